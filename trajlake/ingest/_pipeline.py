"""The ingest pipeline: sources → adapters → normalised tables → batched lake commits.

Files (and line-aligned chunks of big JSONL files) are parsed in worker processes when the
input is big enough to pay for them, so parsing uses every core; memory stays bounded
(trajectories are committed every `batch_size`, at most two chunks per worker are in flight).
Bad records go to `quarantine` with file, line and reason while the good ones are kept;
`strict` raises on the first bad record instead.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import multiprocessing
import os
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trajlake._progress import NullProgress, Progress
from trajlake.errors import FormatDetectionError
from trajlake.ingest._adapter import Adapter
from trajlake.ingest._parse import ParsedChunk, ParseTask, Stamp, parse_task
from trajlake.ingest._registry import adapters, detect, get_adapter
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.schema import Stage

if TYPE_CHECKING:
    from trajlake.lake import Lake

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What an ingest did."""

    ingest_id: str
    files: int = 0
    files_skipped: list[str] = field(default_factory=list)
    files_companion: int = 0
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
    labels: dict[str, Any] | None = None
    """The label report, when labels were attached in the same call."""

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
            "files_companion": self.files_companion,
            "formats": self.formats,
            "trajectories_read": self.trajectories_read,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 2),
            "commits": self.commits,
            "ingest_id": self.ingest_id,
            "problems": self.problems[:20],
            **({"labels": self.labels} if self.labels is not None else {}),
        }


@dataclass(frozen=True)
class IngestOptions:
    """Fields set on every ingested trajectory, and how the work is done."""

    generation: int | None = None
    run_id: str | None = None
    stage: Stage | None = None
    strict: bool = False
    batch_size: int = 1000
    """Trajectories per commit: memory is bounded by it, whatever the input size."""
    batch_bytes: int = 128 * 1024 * 1024
    """Also commit once this much Arrow data is pending (long trajectories are big)."""
    redact: bool = True
    """Replace secrets with typed placeholders (trajlake.ingest.redact)."""
    dedupe_content: bool = False
    """Also skip trajectories whose content hash is stored (one rollout from two sources)."""
    workers: int | None = None
    """Parsing processes (None: one per core); small inputs are parsed in-process."""
    parallel_min_bytes: int = 64 * 1024 * 1024
    """Inputs smaller than this are parsed in-process: starting workers costs ~1 s."""
    chunk_bytes: int = 16 * 1024 * 1024
    """Big line-record files are split into line-aligned chunks of about this size."""


class _Committer:
    """Collects parsed chunks and commits them in batches of `batch_size` trajectories."""

    def __init__(self, lake: Lake, report: IngestReport, options: IngestOptions) -> None:
        self.lake = lake
        self.options = options
        self.report = report
        self.batch_size = options.batch_size
        self.batch_bytes = options.batch_bytes
        self.pending: dict[str, list[pa.Table]] = {}
        self.trajectories = 0

    def add(self, chunk: ParsedChunk) -> None:
        self.report.trajectories_read += chunk.trajectories
        self.report.quarantined += chunk.quarantined
        self.report.redactions += chunk.redactions
        self.report.problems.extend(chunk.problems)
        for name, table in chunk.tables.items():
            self.pending.setdefault(name, []).append(table)
        self.trajectories += chunk.trajectories
        while self.trajectories >= self.batch_size:
            self._commit(self._take(self.batch_size))
        if sum(t.nbytes for ts in self.pending.values() for t in ts) >= self.batch_bytes:
            self.flush()

    def _take(self, count: int) -> dict[str, pa.Table]:
        """The first `count` pending trajectories with their messages (and pending bad rows)."""
        tables = {n: pa.concat_tables(ts) for n, ts in self.pending.items()}
        trajectories = tables.pop("trajectories")
        batch = {"trajectories": trajectories.slice(0, count), **tables}
        self.pending = {"trajectories": [trajectories.slice(count)]}
        messages = tables.get("messages")
        if messages is not None:
            ids = batch["trajectories"].column("trajectory_id")
            mine = pc.is_in(messages.column("trajectory_id"), value_set=ids)
            batch["messages"] = messages.filter(mine)
            self.pending["messages"] = [messages.filter(pc.invert(mine))]
        self.trajectories -= batch["trajectories"].num_rows
        return batch

    def _commit(self, tables: dict[str, pa.Table]) -> None:
        summary = {"ingest_id": self.report.ingest_id, "source_files": self.report.files}
        result = self.lake.commit(
            tables,
            operation="ingest",
            summary=summary,
            dedupe_content=self.options.dedupe_content,
        )
        self.report.added += result.added.get("trajectories", 0)
        self.report.duplicates += result.duplicates.get("trajectories", 0)
        self.report.snapshot_id = result.snapshot_id
        self.report.commits += 1

    def flush(self) -> None:
        if any(t.num_rows for ts in self.pending.values() for t in ts):
            self._commit({n: pa.concat_tables(ts) for n, ts in self.pending.items()})
        self.pending = {}
        self.trajectories = 0


def _is_companion(source: SourceFile, all_uris: frozenset[str]) -> bool:
    for adapter in adapters().values():
        companion_of = getattr(adapter, "companion_of", None)
        if companion_of is not None and companion_of(source, all_uris) is not None:
            return True
    return False


def _choose_adapters(
    sources: Sequence[SourceFile], fmt: str, report: IngestReport
) -> list[tuple[SourceFile, Adapter]]:
    all_uris = frozenset(s.uri for s in sources)
    chosen = []
    for source in sources:
        if len(sources) > 1 and _is_companion(source, all_uris):
            report.files_companion += 1  # read together with the file it belongs to
            continue
        if fmt != "auto":
            chosen.append((source, get_adapter(fmt)))
            continue
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


def _line_chunks(source: SourceFile, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """(start, end, first line) of line-aligned chunks covering a plain local file."""
    size = source.size or 0
    chunks = []
    start, line = 0, 1
    with open(source.uri, "rb") as f:
        while start < size:
            f.seek(min(size, start + chunk_bytes))
            f.readline()  # move to the end of the line the nominal boundary falls in
            end = min(size, f.tell()) if start + chunk_bytes < size else size
            chunks.append((start, end, line))
            f.seek(start)
            remaining, newlines = end - start, 0
            while remaining > 0:
                block = f.read(min(remaining, 8 << 20))
                newlines += block.count(b"\n")
                remaining -= len(block)
            start, line = end, line + newlines
    return chunks


def _tasks(plan: Sequence[tuple[SourceFile, Adapter]], chunk_bytes: int) -> list[ParseTask]:
    tasks = []
    for source, adapter in plan:
        line_records = getattr(adapter, "line_records", False)
        if callable(line_records):  # per file: e.g. JSONL outputs vs whole-JSON event lists
            line_records = line_records(source)
        splittable = bool(line_records) and "://" not in source.uri
        big = (source.size or 0) > chunk_bytes and not source.is_compressed
        base = ParseTask(source.uri, source.size, source.storage_options, adapter.name)
        if not (splittable and big):
            tasks.append(base)
            continue
        for start, end, first_line in _line_chunks(source, chunk_bytes):
            tasks.append(replace(base, start=start, end=end, first_line=first_line))
    return tasks


def _run_tasks(
    tasks: Sequence[ParseTask], stamp: Stamp, workers: int
) -> Iterator[tuple[ParseTask, ParsedChunk]]:
    """Results in task order; with workers, at most two tasks per worker are in flight."""
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield task, parse_task(task, stamp)
        return
    # spawn, not fork: the parent holds delta-rs and DuckDB thread pools that must not be forked.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        in_flight: deque[tuple[ParseTask, Future[ParsedChunk]]] = deque()
        queue = iter(tasks)
        for task in itertools.islice(queue, 2 * workers):
            in_flight.append((task, pool.submit(parse_task, task, stamp)))
        while in_flight:
            task, future = in_flight.popleft()
            next_task = next(queue, None)
            if next_task is not None:
                in_flight.append((next_task, pool.submit(parse_task, next_task, stamp)))
            yield task, future.result()


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
    report = IngestReport(ingest_id=uuid.uuid4().hex)
    stamp = Stamp(
        report.ingest_id,
        dt.datetime.now(dt.timezone.utc),
        options.generation,
        options.run_id,
        options.stage,
        options.strict,
        options.redact,
    )
    plan = _choose_adapters(expand_sources(inputs, storage_options), format, report)
    for source, adapter in plan:
        report.files += 1
        report.formats[adapter.name] = report.formats.get(adapter.name, 0) + 1
        report.bytes_read += source.size or 0
    tasks = _tasks(plan, options.chunk_bytes)
    workers = options.workers or os.cpu_count() or 1
    if report.bytes_read < options.parallel_min_bytes:
        workers = 1
    committer = _Committer(lake, report, options)
    progress.start("ingest", float(report.bytes_read))
    try:
        for task, chunk in _run_tasks(tasks, stamp, workers):
            committer.add(chunk)
            progress.advance(task.length)
        committer.flush()
    finally:
        progress.finish()
    report.seconds = time.perf_counter() - start
    if report.snapshot_id is None:
        report.snapshot_id = lake.snapshot().snapshot_id
    return report
