"""The ingest pipeline: sources → adapter → normalised records → batched lake commits.

Memory stays bounded (records are committed every `batch_size` trajectories); bad records go
to `quarantine` with file, line and reason while the good ones are kept; `strict` raises on
the first bad record instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trajlake._progress import NullProgress, Progress
from trajlake.errors import FormatDetectionError, InvalidRecord
from trajlake.ingest._adapter import Adapter, BadRecord, ParsedTrajectory
from trajlake.ingest._registry import detect, get_adapter
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.records import rows_for_table, trajectories_to_tables
from trajlake.schema import CanonicalTrajectory, Stage

if TYPE_CHECKING:
    from trajlake.lake import Lake

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What an ingest did."""

    ingest_id: str
    files: int = 0
    files_skipped: list[str] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)
    trajectories_read: int = 0
    added: int = 0
    duplicates: int = 0
    quarantined: int = 0
    redactions: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    snapshot_id: int | None = None
    commits: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        """Input throughput in MB/s."""
        return self.bytes_read / 1e6 / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (`snapshot`, `added`, `duplicates`, `quarantined` first)."""
        return {
            "snapshot": self.snapshot_id,
            "added": self.added,
            "duplicates": self.duplicates,
            "quarantined": self.quarantined,
            "redactions": self.redactions,
            "files": self.files,
            "files_skipped": self.files_skipped,
            "formats": self.formats,
            "trajectories_read": self.trajectories_read,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 2),
            "commits": self.commits,
            "ingest_id": self.ingest_id,
            "problems": self.problems[:20],
        }


@dataclass(frozen=True)
class IngestOptions:
    """Fields set on every ingested trajectory, and how to treat bad records."""

    generation: int | None = None
    run_id: str | None = None
    stage: Stage | None = None
    strict: bool = False
    batch_size: int = 1000


def _quarantine_row(
    source: SourceFile, fmt: str, bad: BadRecord, ingest_id: str, now: dt.datetime
) -> dict[str, Any]:
    digest = hashlib.sha256(
        f"{source.uri}\0{bad.line}\0{bad.offset}\0".encode() + (bad.raw or b"")
    ).hexdigest()
    return {
        "quarantine_id": digest[:32],
        "source_uri": source.uri,
        "line": bad.line,
        "offset": bad.offset,
        "source_format": fmt,
        "field": bad.field,
        "error": bad.error,
        "raw": bad.raw,
        "raw_size": bad.raw_size,
        "ingest_id": ingest_id,
        "created_at": now,
    }


def _describe(source: SourceFile, bad: BadRecord) -> str:
    where = f"{source.uri}:{bad.line}" if bad.line is not None else source.uri
    return f"{where}: {bad.error}"


class _Batch:
    """Records and quarantine rows waiting for the next commit."""

    def __init__(self) -> None:
        self.records: list[CanonicalTrajectory] = []
        self.quarantine: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.records) + len(self.quarantine)


class _Ingest:
    def __init__(self, lake: Lake, options: IngestOptions, progress: Progress) -> None:
        self.lake = lake
        self.options = options
        self.progress = progress
        self.report = IngestReport(ingest_id=uuid.uuid4().hex)
        self.now = dt.datetime.now(dt.timezone.utc)
        self.batch = _Batch()

    def stamp(self, parsed: ParsedTrajectory, source: SourceFile, fmt: str) -> CanonicalTrajectory:
        record = parsed.record
        opts = self.options
        if opts.generation is not None:
            record.generation = opts.generation
        if opts.run_id is not None:
            record.run_id = opts.run_id
        if opts.stage is not None:
            record.stage = opts.stage
        # Provenance already present (a canonical re-ingest) is kept: it names the original source.
        if record.source_format is None:
            record.source_format = fmt
        if record.source_uri is None:
            record.source_uri = source.uri
            record.source_line = parsed.line
            record.source_offset = parsed.offset
        if record.ingest_id is None:
            record.ingest_id = self.report.ingest_id
            record.ingested_at = self.now
        return record

    def commit(self) -> None:
        if not len(self.batch):
            return
        tables: dict[str, pa.Table] = trajectories_to_tables(self.batch.records)
        if self.batch.quarantine:
            tables["quarantine"] = rows_for_table("quarantine", self.batch.quarantine)
        summary = {"ingest_id": self.report.ingest_id, "source_files": self.report.files}
        result = self.lake.commit(tables, operation="ingest", summary=summary)
        self.report.added += result.added.get("trajectories", 0)
        self.report.duplicates += result.duplicates.get("trajectories", 0)
        self.report.snapshot_id = result.snapshot_id
        self.report.commits += 1
        self.batch = _Batch()

    def bad(self, source: SourceFile, fmt: str, bad: BadRecord) -> None:
        message = _describe(source, bad)
        if self.options.strict:
            raise InvalidRecord(message + " (without --strict it would be quarantined)")
        log.info("quarantined %s", message)
        self.report.quarantined += 1
        self.report.problems.append(message)
        self.batch.quarantine.append(
            _quarantine_row(source, fmt, bad, self.report.ingest_id, self.now)
        )

    def file(self, source: SourceFile, adapter: Adapter) -> None:
        self.report.files += 1
        self.report.formats[adapter.name] = self.report.formats.get(adapter.name, 0) + 1
        # Progress moves with the records' byte offsets where they are file offsets (plain
        # files); compressed files advance when they are done.
        plain = source.size is not None and not source.is_compressed
        done = 0
        with source.open() as stream:
            for item in adapter.read(source, stream):
                if isinstance(item, BadRecord):
                    self.bad(source, adapter.name, item)
                else:
                    self.report.trajectories_read += 1
                    self.batch.records.append(self.stamp(item, source, adapter.name))
                if plain and item.offset is not None and item.offset > done:
                    self.progress.advance(item.offset - done)
                    done = item.offset
                if len(self.batch) >= self.options.batch_size:
                    self.commit()
        self.report.bytes_read += source.size or 0
        self.progress.advance((source.size or 0) - done)


def _choose_adapters(
    sources: Sequence[SourceFile], fmt: str, report: IngestReport
) -> list[tuple[SourceFile, Adapter]]:
    if fmt != "auto":
        adapter = get_adapter(fmt)
        return [(s, adapter) for s in sources]
    chosen = []
    for source in sources:
        try:
            chosen.append((source, detect(source)))
        except FormatDetectionError as e:
            if len(sources) == 1:
                raise
            report.files_skipped.append(source.uri)
            log.info("skipping %s", e)
    if not chosen:
        raise FormatDetectionError(
            f"none of the {len(sources)} input file(s) is in a known trajectory format; "
            "pass --format"
        )
    return chosen


def ingest(
    lake: Lake,
    inputs: Sequence[str],
    *,
    format: str = "auto",
    options: IngestOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest files (paths, directories, globs, fsspec URLs; .gz/.zst) into the lake."""
    options = options or IngestOptions()
    progress = progress or NullProgress()
    start = time.perf_counter()
    run = _Ingest(lake, options, progress)
    sources = expand_sources(inputs, storage_options)
    plan = _choose_adapters(sources, format, run.report)
    progress.start("ingest", float(sum(s.size or 0 for s, _ in plan)))
    try:
        for source, adapter in plan:
            run.file(source, adapter)
        run.commit()
    finally:
        progress.finish()
    run.report.seconds = time.perf_counter() - start
    if run.report.snapshot_id is None:
        run.report.snapshot_id = lake.snapshot().snapshot_id
    return run.report
