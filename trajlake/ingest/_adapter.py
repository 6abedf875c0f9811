"""The adapter contract: each source format turns a file into trajectories or bad records.

An adapter never raises on bad data: it yields a `BadRecord` naming the line and field, and
goes on with the rest of the file, so one broken record never costs the good ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, ClassVar, Protocol

from pydantic import ValidationError

from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory

RAW_LIMIT = 64 * 1024
"""Bytes of a bad record kept in `quarantine` (enough to debug, bounded for huge lines)."""


@dataclass
class ParsedTrajectory:
    """A trajectory read from a source, with where it came from."""

    record: CanonicalTrajectory
    line: int | None = None
    offset: int | None = None


@dataclass
class BadRecord:
    """A record that failed to parse or validate."""

    error: str
    line: int | None = None
    offset: int | None = None
    field: str | None = None
    raw: bytes | None = None
    raw_size: int | None = None


Parsed = ParsedTrajectory | BadRecord


class Adapter(Protocol):
    """A source format."""

    name: ClassVar[str]
    """Format name used by `--format`."""
    description: ClassVar[str]
    """File pattern and source tool, for docs and error messages."""
    # Optional: `line_records: ClassVar[bool] = True` when every line is one whole record,
    # so big plain files may be split into line-aligned chunks parsed in parallel; or a method
    # `line_records(source) -> bool` when that depends on the file.

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Confidence in [0, 1] that the file is in this format, from its first bytes."""
        ...

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """Every trajectory (or bad record) in the file, in order."""
        ...


class CompanionAware(Protocol):
    """Optional adapter method: files read together with another file are not ingested alone.

    For example a Claude Code subagent transcript (`<session>/subagents/agent-*.jsonl`) is read
    as a thread of its session; when a directory holds both, the pipeline skips the subagent
    file instead of ingesting it a second time as a session of its own.
    """

    def companion_of(self, source: SourceFile, all_uris: frozenset[str]) -> str | None:
        """The URI of the file that reads `source` along with itself, if it is among `all_uris`."""
        ...


def stable_id(fmt: str, *parts: object) -> str:
    """A deterministic trajectory id from a source's own identifiers (or content).

    Prefer identifiers the source carries (session id, instance id + run, eval id + sample +
    epoch); fall back to a hash of the record's bytes. Never the file path alone: the same
    rollout read from another folder must get the same id.
    """
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
    return f"{fmt}-{digest[:32]}"


def bad_from_validation(error: ValidationError, **where: Any) -> BadRecord:
    """A BadRecord whose message and field come from the first pydantic error."""
    first = error.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ()))
    count = error.error_count()
    more = f" (and {count - 1} more error(s))" if count > 1 else ""
    return BadRecord(
        error=f"field {field!r}: {first.get('msg', 'invalid')}{more}", field=field or None, **where
    )


def bounded(raw: bytes) -> tuple[bytes, int]:
    """The raw bytes truncated to RAW_LIMIT, and the original size."""
    return raw[:RAW_LIMIT], len(raw)


def iter_json_lines(stream: IO[bytes]) -> Iterator[tuple[int, int, bytes, Any | BadRecord]]:
    """(line number, byte offset, raw bytes, parsed object or BadRecord) for each non-blank line.

    Each line is decoded on its own, so invalid UTF-8 or broken JSON costs only that line.
    """
    offset = 0
    for number, raw in enumerate(stream, start=1):
        start = offset
        offset += len(raw)
        stripped = raw.strip()
        if not stripped:
            continue
        kept, size = bounded(stripped)
        try:
            text = stripped.decode("utf-8")
        except UnicodeDecodeError as e:
            yield (
                number,
                start,
                stripped,
                BadRecord(
                    f"invalid UTF-8 at byte {e.start} of the line", number, start, None, kept, size
                ),
            )
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            truncated = " (truncated file?)" if not raw.endswith(b"\n") else ""
            yield (
                number,
                start,
                stripped,
                BadRecord(
                    f"malformed JSON: {e.msg} at column {e.colno}{truncated}",
                    number,
                    start,
                    None,
                    kept,
                    size,
                ),
            )
            continue
        yield number, start, stripped, value
