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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trajlake._progress import NullProgress, Progress
from trajlake.errors import FormatDetectionError
from trajlake.ingest._adapter import Adapter, BadRecord
from trajlake.ingest._isolate import parse_contained, rejected_chunk
from trajlake.ingest._limits import Limits
from trajlake.ingest._parse import ParsedChunk, ParseTask, Stamp
from trajlake.ingest._registry import adapters, classify, get_adapter
from trajlake.ingest._run_ids import EXPLICIT_ID_FORMATS, scope_ids
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.ingest._worker import start_worker
from trajlake.redact import AllowList, as_allow_list, redact_uri
from trajlake.schema import Stage

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

log = logging.getLogger(__name__)
_EXAMPLES_PER_KIND = 20


@dataclass
class IngestReport:
    """What an ingest did."""

    ingest_id: str
    files: int = 0
    files_skipped: list[str] = field(default_factory=list)
    skipped_by_reason: dict[str, list[str]] = field(default_factory=dict)
    """Kind of non-trajectory file (`README/markdown/text`, `patches`, …) → the files skipped."""
    files_companion: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    trajectories_read: int = 0
    added: int = 0
    duplicates: int = 0
    """Trajectories not stored: same id and content, or an older version of a stored one."""
    updated: int = 0
    """Trajectories that replaced the stored version they extend (a session that grew)."""
    conflicts: int = 0
    """Trajectories whose id was taken by other messages, kept under `<id>~<hash8>`."""
    identity_examples: list[dict[str, Any]] = field(default_factory=list)
    """Some duplicates, updates and conflicts: kind, id, source `file:line`, what happened."""
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
            "updated": self.updated,
            "conflicts": self.conflicts,
            "identity_examples": self.identity_examples,
            "redactions": self.redactions,
            "files": self.files,
            "files_skipped": self.files_skipped,
            "skipped_by_reason": {
                reason: {"count": len(uris), "examples": uris[:3]}
                for reason, uris in sorted(self.skipped_by_reason.items())
            },
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
    """Replace secrets with typed placeholders (trajlake.redact)."""
    redact_personal: bool = False
    """Also replace personal data (e-mail addresses, phone numbers); credentials only if not."""
    allow_list: AllowList | str | os.PathLike[str] | None = None
    """Values never redacted: an `AllowList`, or the path of an allow-list file."""
    dedupe_content: bool = False
    """Also skip trajectories whose content hash is stored (one rollout from two sources)."""
    workers: int | None = None
    """Parsing processes (None: one per core); small inputs are parsed in-process."""
    parallel_min_bytes: int = 64 * 1024 * 1024
    """Inputs smaller than this are parsed in-process: starting workers costs ~1 s."""
    chunk_bytes: int = 16 * 1024 * 1024
    """Big line-record files are split into line-aligned chunks of about this size."""
    max_decompressed_bytes: int = Limits.max_decompressed_bytes
    """A compressed file stops (quarantined) past this many decompressed bytes..."""
    max_decompression_ratio: float = Limits.max_decompression_ratio
    """...or past this multiple of its size on disk (floor 64 MiB): real trajectory files
    compress 1–40×, bombs 1,000× and more (see `trajlake.ingest._limits.Limits`)."""
    max_line_bytes: int = Limits.max_line_bytes
    """A longer line is quarantined without being held in memory."""
    max_bad_records: int = Limits.max_bad_records
    """Bad records stored per file (or chunk); more are counted in one summary row, and a
    file that is nearly all bad beyond this stops being read."""

    def limits(self) -> Limits:
        """The per-file limits these options set."""
        return Limits(
            max_decompressed_bytes=self.max_decompressed_bytes,
            max_decompression_ratio=self.max_decompression_ratio,
            max_line_bytes=self.max_line_bytes,
            max_bad_records=self.max_bad_records,
        )


class _Committer:
    """Collects parsed chunks and commits them in batches of `batch_size` trajectories."""

    def __init__(self, lake: LakeStore, report: IngestReport, options: IngestOptions) -> None:
        self.lake = lake
        self.options = options
        self.report = report
        self.batch_size = options.batch_size
        self.batch_bytes = options.batch_bytes
        self.pending: dict[str, list[pa.Table]] = {}
        self.trajectories = 0

    def add(self, chunk: ParsedChunk, fmt: str | None = None) -> None:
        self.report.trajectories_read += chunk.trajectories
        self.report.quarantined += chunk.quarantined
        self.report.redactions += chunk.redactions
        self.report.problems.extend(chunk.problems)
        tables = chunk.tables
        if self.options.run_id is not None and fmt not in EXPLICIT_ID_FORMATS:
            tables = scope_ids(tables, self.options.run_id)  # runs that reuse ids stay apart
        for name, table in tables.items():
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
        count = _whole_ids(trajectories.column("trajectory_id"), count)
        batch = {"trajectories": trajectories.slice(0, count), **tables}
        self.pending = {"trajectories": [trajectories.slice(count)]}
        for name in ("messages", "calls"):  # rows that follow their trajectories
            rows = tables.get(name)
            if rows is not None:
                ids = batch["trajectories"].column("trajectory_id")
                mine = pc.is_in(rows.column("trajectory_id"), value_set=ids)
                batch[name] = rows.filter(mine)
                self.pending[name] = [rows.filter(pc.invert(mine))]
        self.trajectories -= batch["trajectories"].num_rows
        return batch

    def _commit(self, tables: dict[str, pa.Table]) -> None:
        summary = {"ingest_id": self.report.ingest_id, "source_files": self.report.files}
        result = self.lake.commit(
            tables,
            operation="ingest",
            summary=summary,
            dedupe_content=self.options.dedupe_content,
            on_conflict="fail" if self.options.strict else "keep",
        )
        self.report.added += result.added.get("trajectories", 0)
        self.report.duplicates += result.duplicates.get("trajectories", 0)
        self.report.updated += result.updated.get("trajectories", 0)
        self.report.conflicts += result.conflicts.get("trajectories", 0)
        _keep_examples(self.report.identity_examples, result.examples)
        self.report.snapshot_id = result.snapshot_id
        self.report.commits += 1

    def flush(self) -> None:
        if any(t.num_rows for ts in self.pending.values() for t in ts):
            self._commit({n: pa.concat_tables(ts) for n, ts in self.pending.items()})
        self.pending = {}
        self.trajectories = 0


def _whole_ids(ids: pa.ChunkedArray, count: int) -> int:
    """`count`, or more: every version of an id read twice goes into the same commit.

    Messages are matched to trajectories by id, so two versions of one id (a file with a
    session and its later copy) split across commits would take each other's messages.
    """
    while count < len(ids):
        spill = pc.is_in(ids.slice(count), value_set=pc.unique(ids.slice(0, count)))
        if not pc.any(spill).as_py():
            return count
        count += int(pc.max(pc.indices_nonzero(spill)).as_py()) + 1
    return count


def _keep_examples(kept: list[dict[str, Any]], new: Sequence[Any]) -> None:
    """Add a commit's identity examples, at most `_EXAMPLES_PER_KIND` of each kind."""
    for example in new:
        if sum(1 for e in kept if e["kind"] == example.kind) < _EXAMPLES_PER_KIND:
            kept.append(example.to_dict())


def _is_companion(source: SourceFile, all_uris: frozenset[str]) -> bool:
    for adapter in adapters().values():
        companion_of = getattr(adapter, "companion_of", None)
        if companion_of is not None and companion_of(source, all_uris) is not None:
            return True
    return False


def _choose_adapters(
    sources: Sequence[SourceFile],
    fmt: str,
    report: IngestReport,
    limits: Limits | None = None,
    rejected: list[tuple[ParseTask, BadRecord]] | None = None,
) -> list[tuple[SourceFile, Adapter]]:
    """The files to parse with their adapters; files to quarantine whole go to `rejected`.

    Files that hold no trajectory are skipped (counted by kind in the report); a single
    input that is skipped is an error, since the user named it.
    """
    all_uris = frozenset(s.uri for s in sources)
    chosen = []
    rejected = [] if rejected is None else rejected
    for source in sources:
        if len(sources) > 1 and _is_companion(source, all_uris):
            report.files_companion += 1  # read together with the file it belongs to
            continue
        if fmt != "auto" and source.problem is None:
            chosen.append((source, get_adapter(fmt)))
            continue
        found = classify(source, limits)
        if found.adapter is not None:
            chosen.append((source, found.adapter))
        elif found.rejected is not None:
            task = ParseTask(source.uri, source.size, source.storage_options, "unknown")
            rejected.append((task, BadRecord(found.rejected)))
        elif len(sources) == 1:
            raise FormatDetectionError(
                f"{source.uri}: cannot tell the trajectory format from its content "
                f"({found.skipped}); pass --format with one of: {', '.join(adapters())}"
            )
        else:
            uri = redact_uri(source.uri)
            report.files_skipped.append(uri)
            report.skipped_by_reason.setdefault(found.skipped or "unknown", []).append(uri)
            log.info("skipping %s (%s)", uri, found.skipped)
    if not chosen and not rejected:
        raise FormatDetectionError(
            f"none of the {len(sources)} input file(s) is in a known trajectory format; "
            "pass --format"
        )
    return chosen


def _line_chunks(source: SourceFile, chunk_bytes: int) -> Iterator[tuple[int, int, int]]:
    """(start, end, first line) of line-aligned chunks covering a plain local file.

    Lazily: a chunk's first line needs the newlines of all before it, and counting them as
    the chunks are handed out lets the first workers start before the file has been read.
    """
    size = source.size or 0
    start, line = 0, 1
    with open(source.uri, "rb") as f:
        while start < size:
            f.seek(min(size, start + chunk_bytes))
            f.readline()  # move to the end of the line the nominal boundary falls in
            end = min(size, f.tell()) if start + chunk_bytes < size else size
            yield start, end, line
            f.seek(start)
            remaining, newlines = end - start, 0
            while remaining > 0:
                block = f.read(min(remaining, 8 << 20))
                newlines += block.count(b"\n")
                remaining -= len(block)
            start, line = end, line + newlines


def _tasks(
    plan: Sequence[tuple[SourceFile, Adapter]], chunk_bytes: int, workers: int = 1
) -> Iterator[ParseTask]:
    """The units of work, in order (lazily: see `_line_chunks`)."""
    for source, adapter in plan:
        line_records = getattr(adapter, "line_records", False)
        if callable(line_records):  # per file: e.g. JSONL outputs vs whole-JSON event lists
            line_records = line_records(source)
        splittable = bool(line_records) and "://" not in source.uri
        big = (source.size or 0) > chunk_bytes and not source.is_compressed
        base = ParseTask(source.uri, source.size, source.storage_options, adapter.name)
        if not (splittable and big):
            yield base
            continue
        size = _even_chunk(source, chunk_bytes, workers)
        for start, end, first_line in _line_chunks(source, size):
            yield replace(base, start=start, end=end, first_line=first_line)


def _even_chunk(source: SourceFile, chunk_bytes: int, workers: int) -> int:
    """At most `chunk_bytes`, in chunks of one size and as many as a multiple of the workers,
    so that no worker is left alone with a short tail while the others wait."""
    size = source.size or 0
    count = max(1, -(-size // chunk_bytes))
    count += -count % max(workers, 1)
    return max(1, -(-size // count))


def _run_tasks(
    tasks: Iterable[ParseTask], stamp: Stamp, workers: int, limits: Limits
) -> Iterator[tuple[ParseTask, ParsedChunk]]:
    """Results in task order; with workers, at most two tasks per worker are in flight.

    Each task runs contained (`parse_contained`): a file that cannot be read becomes a
    quarantine row and the others go on.
    """
    queue = iter(tasks)
    first = list(itertools.islice(queue, 2))
    if workers <= 1 or len(first) <= 1:
        for task in itertools.chain(first, queue):
            yield task, parse_contained(task, stamp, limits)
        return
    queue = itertools.chain(first, queue)
    # spawn, not fork: the parent holds delta-rs and DuckDB thread pools that must not be forked.
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=start_worker)
    with pool:
        in_flight: deque[tuple[ParseTask, Future[ParsedChunk]]] = deque()
        for task in itertools.islice(queue, 2 * workers):
            in_flight.append((task, pool.submit(parse_contained, task, stamp, limits)))
        while in_flight:
            task, future = in_flight.popleft()
            next_task = next(queue, None)
            if next_task is not None:
                in_flight.append(
                    (next_task, pool.submit(parse_contained, next_task, stamp, limits))
                )
            yield task, future.result()


def ingest(
    lake: LakeStore,
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
        dt.datetime.now(dt.UTC),
        options.generation,
        options.run_id,
        options.stage,
        options.strict,
        options.redact,
        options.redact_personal,
        as_allow_list(options.allow_list),
    )
    sources = expand_sources(inputs, storage_options)
    limits = options.limits()
    rejected: list[tuple[ParseTask, BadRecord]] = []
    plan = _choose_adapters(sources, format, report, limits, rejected)
    for source, adapter in plan:
        report.files += 1
        report.formats[adapter.name] = report.formats.get(adapter.name, 0) + 1
        report.bytes_read += source.size or 0
    workers = options.workers or os.cpu_count() or 1
    if report.bytes_read < options.parallel_min_bytes:
        workers = 1
    tasks = _tasks(plan, options.chunk_bytes, workers)
    committer = _Committer(lake, report, options)
    if rejected:  # unreadable or unrecognised files: one quarantine row each
        committer.add(rejected_chunk(rejected, stamp))
    progress.start("ingest", float(report.bytes_read))
    try:
        for task, chunk in _run_tasks(tasks, stamp, workers, limits):
            committer.add(chunk, task.format)
            progress.advance(task.length)
        committer.flush()
    finally:
        progress.finish()
    report.seconds = time.perf_counter() - start
    if report.snapshot_id is None:
        report.snapshot_id = lake.snapshot().snapshot_id
    return report
