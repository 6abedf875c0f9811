"""Parsing one unit of ingest work — a file, or a line-aligned byte range of a big JSONL file —
into normalised Arrow tables. Runs in worker processes, so it takes and returns plain data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa

from trajlake.errors import InvalidRecord
from trajlake.ingest._adapter import BadRecord, Parsed, ParsedTrajectory
from trajlake.ingest._registry import get_adapter
from trajlake.ingest._sources import SourceFile
from trajlake.ingest.redact import redact_trajectory
from trajlake.records import rows_for_table, trajectories_to_tables
from trajlake.schema import CanonicalTrajectory, Stage

log = logging.getLogger(__name__)
_RECORDS_PER_PART = 128


@dataclass(frozen=True)
class Stamp:
    """What every trajectory of one ingest gets: who ingested it, and the user's overrides."""

    ingest_id: str
    now: dt.datetime
    generation: int | None = None
    run_id: str | None = None
    stage: Stage | None = None
    strict: bool = False
    redact: bool = True


@dataclass(frozen=True)
class ParseTask:
    """A file, or the byte range [start, end) of a plain line-record file starting at a line."""

    uri: str
    size: int | None
    storage_options: Mapping[str, Any] | None
    format: str
    start: int = 0
    end: int | None = None
    first_line: int = 1

    @property
    def source(self) -> SourceFile:
        """The source file the task reads."""
        return SourceFile(self.uri, self.size, self.storage_options)

    @property
    def length(self) -> int:
        """Bytes the task covers (for progress)."""
        if self.end is not None:
            return self.end - self.start
        return self.size or 0


@dataclass
class ParsedChunk:
    """The result of one task: tables ready to commit, and what was found on the way."""

    tables: dict[str, pa.Table]
    trajectories: int = 0
    quarantined: int = 0
    redactions: int = 0
    problems: list[str] = field(default_factory=list)


class _Range(io.RawIOBase):
    """A read-only window [start, end) of a binary file, so adapters see only their chunk."""

    def __init__(self, inner: IO[bytes], start: int, end: int) -> None:
        inner.seek(start)
        self._inner = inner
        self._left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._left)
        if n <= 0:
            return 0
        data = self._inner.read(n)
        view[: len(data)] = data
        self._left -= len(data)
        return len(data)


def _items(task: ParseTask) -> Iterator[Parsed]:
    adapter = get_adapter(task.format)
    source = task.source
    with source.open() as stream:
        if task.end is None:
            yield from adapter.read(source, stream)
            return
        window = io.BufferedReader(_Range(stream, task.start, task.end), 1 << 20)
        for item in adapter.read(source, window):
            # Adapters count from the start of what they are given; make it the file's.
            if item.line is not None:
                item.line += task.first_line - 1
            if item.offset is not None:
                item.offset += task.start
            yield item


def _stamp(
    record: CanonicalTrajectory, parsed: ParsedTrajectory, task: ParseTask, stamp: Stamp
) -> None:
    if stamp.generation is not None:
        record.generation = stamp.generation
    if stamp.run_id is not None:
        record.run_id = stamp.run_id
    if stamp.stage is not None:
        record.stage = stamp.stage
    # Provenance already present (a canonical re-ingest) is kept: it names the original source.
    if record.source_format is None:
        record.source_format = task.format
    if record.source_uri is None:
        record.source_uri = task.uri
        record.source_line = parsed.line
        record.source_offset = parsed.offset
    if record.ingest_id is None:
        record.ingest_id = stamp.ingest_id
        record.ingested_at = stamp.now


def quarantine_row(task: ParseTask, bad: BadRecord, stamp: Stamp) -> dict[str, Any]:
    """The `quarantine` row of a bad record (id deterministic: re-ingest adds nothing)."""
    key = f"{task.uri}\0{bad.line}\0{bad.offset}\0".encode() + (bad.raw or b"")
    return {
        "quarantine_id": hashlib.sha256(key).hexdigest()[:32],
        "source_uri": task.uri,
        "line": bad.line,
        "offset": bad.offset,
        "source_format": task.format,
        "field": bad.field,
        "error": bad.error,
        "raw": bad.raw,
        "raw_size": bad.raw_size,
        "ingest_id": stamp.ingest_id,
        "created_at": stamp.now,
    }


def describe(uri: str, bad: BadRecord) -> str:
    """`file:line: reason` for reports and errors."""
    where = f"{uri}:{bad.line}" if bad.line is not None else uri
    return f"{where}: {bad.error}"


def parse_task(task: ParseTask, stamp: Stamp) -> ParsedChunk:
    """Parse, stamp, redact and normalise one task's trajectories; quarantine bad records."""
    redactor = redact_trajectory if stamp.redact else None
    records: list[CanonicalTrajectory] = []
    parts: list[dict[str, pa.Table]] = []
    bad_rows: list[dict[str, Any]] = []
    chunk = ParsedChunk(tables={})
    for item in _items(task):
        if len(records) >= _RECORDS_PER_PART:
            # Arrow holds a record in a fraction of the memory its Python objects take.
            parts.append(trajectories_to_tables(records))
            chunk.trajectories += len(records)
            records = []
        if isinstance(item, BadRecord):
            message = describe(task.uri, item)
            if stamp.strict:
                raise InvalidRecord(message + " (without --strict it would be quarantined)")
            log.info("quarantined %s", message)
            chunk.problems.append(message)
            bad_rows.append(quarantine_row(task, item, stamp))
            continue
        _stamp(item.record, item, task, stamp)
        if redactor is not None:
            found = redactor(item.record)
            item.record.n_redactions += found
            chunk.redactions += found
        records.append(item.record)
    if records:
        parts.append(trajectories_to_tables(records))
        chunk.trajectories += len(records)
    chunk.quarantined = len(bad_rows)
    if parts:
        chunk.tables = {n: pa.concat_tables([p[n] for p in parts]) for n in parts[0]}
    if bad_rows:
        chunk.tables["quarantine"] = rows_for_table("quarantine", bad_rows)
    return chunk
