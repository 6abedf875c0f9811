"""The adapter contract: each source format turns a file into trajectories or bad records.

An adapter never raises on bad data: it yields a `BadRecord` naming the line and field, and
goes on with the rest of the file, so one broken record never costs the good ones. Lines are
read with a length limit (`Limits.max_line_bytes`): an over-long line is passed, not held.
`to_parsed` is that contract for one record (mapping and validation errors alike), and
`parse_document` the same for a whole-file JSON document.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, ClassVar, Protocol

import orjson
from pydantic import ValidationError

from trajlake.ingest._limits import current_watch
from trajlake.ingest._rows import unpaired_surrogate
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory

RAW_LIMIT = 64 * 1024
"""Bytes of a bad record kept in `quarantine` (enough to debug, bounded for huge lines)."""
_BOM = b"\xef\xbb\xbf"


@dataclass
class ParsedTrajectory:
    """A trajectory read from a source, with where it came from."""

    record: CanonicalTrajectory
    line: int | None = None
    offset: int | None = None
    calls: list[dict[str, Any]] | None = None
    """`calls` rows the source logged for it (sources that record model calls, e.g. traces)."""


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
        """Confidence in [0, 1] that the file is in this format, from its first bytes.

        An adapter may also take `keys: KeyStructure | None = None` (trajlake.ingest._keys):
        when no adapter is sure from the head, detection streams the file's key structure
        (top-level keys, short values, one level below) and asks those adapters again.
        """
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


def _non_finite(constant: str) -> None:
    """NaN and ±Infinity are not JSON (an export would be invalid): read them as null."""
    current_watch().non_finite_parsed += 1


_DECODER = json.JSONDecoder(parse_constant=_non_finite)


def loads(data: bytes | str) -> Any:
    """`json.loads`, with NaN/Infinity read as null and counted on the current file watch
    (the trajectory they end up in records how many in `attrs.trajlake_cleaned`)."""
    if isinstance(data, bytes):
        data = data.decode(json.detect_encoding(data))
    return _DECODER.decode(data.removeprefix("\ufeff"))


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


def to_parsed(
    build: dict[str, Any] | Callable[[], dict[str, Any]],
    *,
    line: int | None = None,
    offset: int | None = None,
    raw: bytes | Callable[[], tuple[bytes, int]],
    finish: Callable[[CanonicalTrajectory], CanonicalTrajectory] | None = None,
) -> Parsed:
    """The trajectory that `build()` maps a source record to (or the mapped record `build`),
    validated, or why there is none.

    The one error contract of every adapter: a ValueError or TypeError of the mapping (or of
    `finish`, run on the validated record) is a BadRecord with its message; a pydantic error is
    one naming the first failing field (`bad_from_validation`). `raw` is the record's bytes, or
    a function giving them bounded with their size (a re-serialised value): it runs only for a
    bad record, so good records pay nothing for quarantine.
    """
    try:
        record = CanonicalTrajectory.model_validate(build if isinstance(build, dict) else build())
        if finish is not None:
            record = finish(record)
    except ValidationError as e:
        kept, size = bounded(raw) if isinstance(raw, bytes) else raw()
        return bad_from_validation(e, line=line, offset=offset, raw=kept, raw_size=size)
    except (ValueError, TypeError) as e:
        kept, size = bounded(raw) if isinstance(raw, bytes) else raw()
        return BadRecord(str(e), line, offset, None, kept, size)
    return ParsedTrajectory(record, line=line, offset=offset)


def bounded(raw: bytes) -> tuple[bytes, int]:
    """The raw bytes truncated to RAW_LIMIT, and the original size."""
    return raw[:RAW_LIMIT], len(raw)


def read_document(stream: IO[bytes]) -> Any | BadRecord:
    """A whole-file JSON document, or one BadRecord for the file when it does not parse."""
    return parse_document(stream.read())


def parse_document(data: bytes) -> Any | BadRecord:
    """The JSON document in `data`, or one BadRecord for the file when it does not parse."""
    kept, size = bounded(data)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return BadRecord(f"invalid UTF-8 at byte {e.start} of the file", None, 0, None, kept, size)
    except json.JSONDecodeError as e:
        where = f"line {e.lineno} column {e.colno}"
        return BadRecord(f"malformed JSON: {e.msg} at {where}", e.lineno, 0, None, kept, size)


def raw_json(value: Any) -> tuple[bytes, int]:
    """A parsed value re-serialised for quarantine (bounded) and its size."""
    return bounded(json.dumps(value, ensure_ascii=False, default=str).encode())


def iter_json_lines(stream: IO[bytes]) -> Iterator[tuple[int, int, bytes, Any | BadRecord]]:
    """(line number, byte offset, raw bytes, parsed object or BadRecord) for each non-blank line.

    Each line is decoded on its own, so invalid UTF-8 or broken JSON costs only that line; a
    line longer than `max_line_bytes` is passed without being held; a UTF-8 byte-order mark
    before the first line is dropped; a line whose text holds half a UTF-16 surrogate pair is
    a BadRecord.
    """
    limit = current_watch().limits.max_line_bytes
    readline = getattr(stream, "readline", None)
    if readline is None:  # an iterable of lines (an adapter put back a line it peeked at)
        lines = iter(stream)
        readline = lambda _size: next(lines, b"")  # noqa: E731
    offset, number = 0, 0
    while raw := readline(limit + 1):
        number += 1
        start = offset
        offset += len(raw)
        if len(raw) - raw.endswith(b"\n") > limit:
            kept, size = raw[:RAW_LIMIT], len(raw)
            if not raw.endswith(b"\n") and len(raw) == limit + 1:  # the rest is still unread
                del raw
                size += _pass_line(readline)
            offset = start + size
            error = f"line of {size} bytes is longer than max_line_bytes ({limit}): not parsed"
            yield number, start, kept, BadRecord(error, number, start, None, kept, size)
            continue
        stripped = raw.strip()
        if start == 0 and stripped.startswith(_BOM):
            stripped = stripped[len(_BOM) :].strip()
        if not stripped:
            continue
        value = _parse_line(stripped, number, start, raw.endswith(b"\n"))
        # A lone surrogate escape (`"\ud800"`) parses but cannot be written as UTF-8 (hashing,
        # Arrow, Parquet). The line is quarantined like invalid UTF-8, not repaired: its raw
        # bytes stay in `quarantine`, and no stored text differs from what the source said.
        if not isinstance(value, BadRecord) and (why := unpaired_surrogate(stripped, value)):
            kept, size = bounded(stripped)
            value = BadRecord(why, number, start, None, kept, size)
        yield number, start, stripped, value


def _pass_line(readline: Any) -> int:
    """Read to the end of the current line in bounded pieces; the bytes passed."""
    passed = 0
    while piece := readline(1 << 20):
        passed += len(piece)
        if piece.endswith(b"\n"):
            break
    return passed


# orjson reads a line in about half the time `json` takes and gives the very same values,
# except in three cases, where `json` reads the line instead: integers outside 64 bits (orjson
# makes them floats; such a number has 19 digits in a row), nesting past `json`'s recursion
# limit (orjson has none; a line with fewer brackets than `_SHALLOW` cannot nest that deep, one
# with more is measured), and all that orjson refuses (NaN/Infinity, invalid UTF-8, lone
# surrogates, malformed JSON), which `json` reads or reports as it always did. One translated
# copy of the line (digits as "0", braces as "[") answers the first two with C scans.
# `tests/ingest/test_line_decoding.py` holds the two decoders to the same values.
_GUARD_TABLE = bytes.maketrans(b"123456789{", b"000000000[")
_LONG_INTEGER = b"0" * 19
_SHALLOW = 512


def _fast_value(stripped: bytes) -> tuple[bool, Any]:
    """(True, the line's value) where orjson reads it as `json` would, else (False, None)."""
    guarded = stripped.translate(_GUARD_TABLE)
    if _LONG_INTEGER in guarded:
        return False, None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return False, None
    if guarded.count(b"[") >= _SHALLOW and not _nests_below(value, _SHALLOW):
        return False, None
    return True, value


def _nests_below(value: Any, limit: int) -> bool:
    """Whether `value` nests fewer than `limit` lists and objects deep (level by level)."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth >= limit:
            return False
        inner: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item if type(item) is list else ()
            inner.extend(c for c in children if type(c) is dict or type(c) is list)
        level = inner
    return True


def _parse_line(stripped: bytes, number: int, start: int, complete: bool) -> Any | BadRecord:
    """The JSON value of one line, or the BadRecord saying why it has none."""
    exact, value = _fast_value(stripped)
    if exact:
        return value
    try:
        text = stripped.decode("utf-8")
    except UnicodeDecodeError as e:
        kept, size = bounded(stripped)
        error = f"invalid UTF-8 at byte {e.start} of the line"
        return BadRecord(error, number, start, None, kept, size)
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        kept, size = bounded(stripped)
        truncated = "" if complete else " (truncated file?)"
        error = f"malformed JSON: {e.msg} at column {e.colno}{truncated}"
        return BadRecord(error, number, start, None, kept, size)
    except RecursionError:
        kept, size = bounded(stripped)
        error = "JSON nested too deeply to parse (more levels than the parser's recursion limit)"
        return BadRecord(error, number, start, None, kept, size)
