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
from typing import IO, Any, cast

import pyarrow as pa

from trajlake.errors import InvalidRecord
from trajlake.ingest._adapter import BadRecord, Parsed, ParsedTrajectory
from trajlake.ingest._contain import contain
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._registry import get_adapter
from trajlake.ingest._rows import ParsedRow, RowFields, finish_row_models
from trajlake.ingest._sources import SourceFile
from trajlake.records import dict_rows, record_rows, rows_for_table, rows_to_tables
from trajlake.redact import (
    AllowList,
    Redactor,
    redact_bytes,
    redact_calls,
    redact_rows,
    redact_text,
    redact_trajectory,
    redact_uri,
)
from trajlake.schema import CanonicalTrajectory, Stage

log = logging.getLogger(__name__)
# Records are turned into Arrow a part at a time (Arrow holds a record in a fraction of the
# memory its Python objects take), and a part's row dicts are redacted as one batch, whose
# native scans cost a fixed few milliseconds each: a part is the records read from 4 MiB of
# a line-record source (at most 1024), or 128 records where a source has no offsets.
_PART_BYTES = 4 << 20
_MOST_RECORDS_PER_PART = 1024
_RECORDS_PER_PART_WITHOUT_OFFSETS = 128
# Formats whose adapters settle `policy_model` themselves (`finish_model_fields` last): the
# pass is idempotent, so this only saves repeating it. Canonical records are the lake's own
# data, stored as they were written; every other format is settled here.
_MODELS_SETTLED = frozenset(
    {"canonical", "atif", "claude-code", "codex", "inspect", "mini-swe-agent", "openhands"}
    | {"responses", "swe-agent"}
)


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
    redact_personal: bool = False
    """Also replace personal data (e-mail addresses, phone numbers)."""
    allow_list: AllowList | None = None
    """Values never replaced (parsed once; pickled to workers with the stamp)."""
    fast_path: bool = True
    """Let adapters hand over plain row dicts where validation has nothing to do (the rows
    are the same either way; off: every record goes through the record models)."""

    def redactor(self) -> Redactor | None:
        """A fresh redactor for one trajectory or one bad record; None without redaction."""
        if not self.redact:
            return None
        return Redactor(personal=self.redact_personal, allow=self.allow_list)

    def uri(self, uri: str) -> str:
        """A source URL as stored and reported: its credentials replaced when redacting."""
        return redact_uri(uri) if self.redact else uri


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


def _items(task: ParseTask, fast: bool = False) -> Iterator[Parsed | ParsedRow]:
    adapter = get_adapter(task.format)
    source = task.source
    # Adapters with a row reader hand over plain dicts where validation has nothing to do.
    read = getattr(adapter, "read_rows", None) if fast else None
    read = read or adapter.read
    with source.open() as stream:
        # contain(): bad records capped per file, unexpected errors and damage end the file.
        if task.end is None:
            yield from contain(read(source, stream))
            return
        window = io.BufferedReader(_Range(stream, task.start, task.end), 1 << 20)
        for item in contain(read(source, window)):
            # Adapters count from the start of what they are given; make it the file's.
            if item.line is not None:
                item.line += task.first_line - 1
            if item.offset is not None:
                item.offset += task.start
            yield item


def _stamp(
    record: CanonicalTrajectory, parsed: ParsedTrajectory, task: ParseTask, stamp: Stamp
) -> None:
    if task.format not in _MODELS_SETTLED and not isinstance(record, RowFields):
        finish_model_fields(record)  # a row's are settled by `_stamp_row`, the same way
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
    record.source_uri = stamp.uri(record.source_uri)
    if record.ingest_id is None:
        record.ingest_id = stamp.ingest_id
        record.ingested_at = stamp.now


def quarantine_row(task: ParseTask, bad: BadRecord, stamp: Stamp) -> dict[str, Any]:
    """The `quarantine` row of a bad record (id deterministic: re-ingest adds nothing)."""
    key = f"{task.uri}\0{bad.line}\0{bad.offset}\0".encode() + (bad.raw or b"")
    raw, error, where = bad.raw, bad.error, bad.field
    redactor = stamp.redactor()
    if redactor is not None:  # one redactor: the error quoting the raw text shares its numbers
        if raw is not None:
            raw, _ = redact_bytes(raw, redactor)
        (error, *rest), _ = redactor.redact_texts([error, *([where] if where else [])])
        where = rest[0] if rest else where
    return {
        "quarantine_id": hashlib.sha256(key).hexdigest()[:32],
        "source_uri": stamp.uri(task.uri),
        "line": bad.line,
        "offset": bad.offset,
        "source_format": task.format,
        "field": where,
        "error": error,
        "raw": raw,
        "raw_size": bad.raw_size,
        "ingest_id": stamp.ingest_id,
        "created_at": stamp.now,
    }


def describe(uri: str, bad: BadRecord, stamp: Stamp | None = None) -> str:
    """`file:line: reason` for reports and errors, redacted as the lake would store them
    (without a `stamp`: credentials replaced, personal data kept)."""
    if stamp is None or stamp.redact:
        uri = redact_uri(uri)
    where = f"{uri}:{bad.line}" if bad.line is not None else uri
    error = bad.error
    if stamp is None:
        error, _ = redact_text(error)
    elif (redactor := stamp.redactor()) is not None:
        error, _ = redactor.redact_text(error)
    return f"{where}: {error}"


def _stamp_row(parsed: ParsedRow, task: ParseTask, stamp: Stamp) -> None:
    """`_stamp` for a row dict (redaction comes when its part is complete: `_Rows.take`)."""
    record = parsed.record
    if task.format not in _MODELS_SETTLED:
        finish_row_models(record)
    _stamp(cast(CanonicalTrajectory, RowFields(record)), cast(Any, parsed), task, stamp)


class _Rows:
    """The records parsed since the last part, in order: row dicts still to redact, and the
    `trajectories`/`messages` rows of records done (record models are redacted one by one)."""

    def __init__(self, stamp: Stamp) -> None:
        self._stamp = stamp
        self._pending: list[dict[str, Any] | tuple[dict[str, Any], list[dict[str, Any]]]] = []
        self._first_offset: int | None = None
        self.redactions = 0

    def __len__(self) -> int:
        return len(self._pending)

    def full(self, next_offset: int | None) -> bool:
        """Whether the part is complete before the record that starts at `next_offset`."""
        if len(self._pending) >= _MOST_RECORDS_PER_PART:
            return True
        if next_offset is None or self._first_offset is None:
            return len(self._pending) >= _RECORDS_PER_PART_WITHOUT_OFFSETS
        return next_offset - self._first_offset >= _PART_BYTES

    def note_offset(self, offset: int | None) -> None:
        """Where the record being added starts in its source (None: unknown)."""
        if not self._pending:
            self._first_offset = offset

    def add_row(self, record: dict[str, Any]) -> None:
        self._pending.append(record)

    def add(self, rows: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
        self._pending.append(rows)

    def take(self) -> dict[str, pa.Table]:
        """The part's tables; its row dicts redacted first, as one batch (`redact_rows`)."""
        self._redact_rows()
        trajectories: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        for item in self._pending:
            trajectory, message_rows = dict_rows(item) if isinstance(item, dict) else item
            trajectories.append(trajectory)
            messages.extend(message_rows)
        self._pending = []
        return rows_to_tables(trajectories, messages)

    def _redact_rows(self) -> None:
        records = [item for item in self._pending if isinstance(item, dict)]
        if self._stamp.redact:
            batch = [(record, cast(Redactor, self._stamp.redactor())) for record in records]
            counts = redact_rows(batch)
        else:
            counts = [0] * len(records)
        for record, found in zip(records, counts, strict=True):
            record["n_redactions"] = record.get("n_redactions", 0) + found
        self.redactions += sum(counts)


def parse_task(task: ParseTask, stamp: Stamp) -> ParsedChunk:
    """Parse, stamp, redact and normalise one task's trajectories; quarantine bad records."""
    records = _Rows(stamp)
    parts: list[dict[str, pa.Table]] = []
    bad_rows: list[dict[str, Any]] = []
    call_rows: list[dict[str, Any]] = []
    chunk = ParsedChunk(tables={})
    for item in _items(task, stamp.fast_path):
        if len(records) and records.full(item.offset):
            chunk.trajectories += len(records)
            parts.append(records.take())
        if isinstance(item, BadRecord):
            message = describe(task.uri, item, stamp)
            if stamp.strict:
                raise InvalidRecord(message + " (without --strict it would be quarantined)")
            log.info("quarantined %s", message)
            chunk.problems.append(message)
            bad_rows.append(quarantine_row(task, item, stamp))
            continue
        records.note_offset(item.offset)
        if isinstance(item, ParsedRow):
            _stamp_row(item, task, stamp)
            records.add_row(item.record)
            continue
        _stamp(item.record, item, task, stamp)
        if (redactor := stamp.redactor()) is not None:
            found = redact_trajectory(item.record, redactor)
            found += redact_calls(item.calls or [], redactor)  # one numbering per trajectory
            item.record.n_redactions += found
            chunk.redactions += found
        records.add(record_rows(item.record))
        call_rows.extend(item.calls or ())
    if len(records):
        chunk.trajectories += len(records)
        parts.append(records.take())
    chunk.redactions += records.redactions
    chunk.quarantined = len(bad_rows)
    if parts:
        chunk.tables = {n: pa.concat_tables([p[n] for p in parts]) for n in parts[0]}
    if bad_rows:
        chunk.tables["quarantine"] = rows_for_table("quarantine", bad_rows)
    if call_rows:
        chunk.tables["calls"] = rows_for_table("calls", call_rows)
    return chunk
