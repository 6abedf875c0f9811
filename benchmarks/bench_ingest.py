"""Bulk ingest: `lake.commit` of canonical Arrow tables vs `pyarrow.parquet.write_table`.

Target (DESIGN.md §10): lake throughput ≥ 0.8x pyarrow's on the same Arrow tables, zstd,
best of 3 each, interleaved in one run. The end-to-end path from canonical dicts
(`lake.write`: validation, normalisation, Arrow conversion, commit) is reported for information.

Run: `python benchmarks/bench_ingest.py [--trajectories 7000] [--batch 2000]`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import trajlake as tl
from trajlake.records import trajectories_to_tables
from trajlake.sample import sample_trajectories

SEED = 11
TARGET = 0.8
REPEATS = 3

Tables = dict[str, pa.Table]


@dataclass(frozen=True)
class Dataset:
    """The benchmark's input, built once outside any timed region."""

    dicts: list[dict[str, Any]]
    batches: list[Tables]
    whole: Tables

    @property
    def nbytes(self) -> int:
        """Arrow bytes of all tables."""
        return sum(t.nbytes for t in self.whole.values())

    @property
    def rows(self) -> int:
        """Rows of all tables."""
        return sum(t.num_rows for t in self.whole.values())

    @property
    def trajectories(self) -> int:
        """Trajectory rows."""
        return int(self.whole["trajectories"].num_rows)

    @property
    def messages(self) -> int:
        """Message rows."""
        return int(self.whole["messages"].num_rows)


def build_dataset(trajectories: int, batch: int) -> Dataset:
    """Canonical dicts and their Arrow tables, per batch and whole.

    Batches are contiguous runs of sample indices, whose ids sort in index order, so the
    concatenation of the batch tables is sorted like one `trajectories_to_tables` call.
    """
    dicts = list(sample_trajectories(trajectories, seed=SEED))
    batches = []
    for start in range(0, trajectories, batch):
        chunk = dicts[start : start + batch]
        records = [tl.CanonicalTrajectory.model_validate(d) for d in chunk]
        batches.append(trajectories_to_tables(records))
    whole = {
        name: pa.concat_tables([b[name] for b in batches]).combine_chunks() for name in batches[0]
    }
    return Dataset(dicts, batches, whole)


def write_pyarrow(root: Path, tables: Tables) -> None:
    """Baseline: one zstd Parquet file per table."""
    root.mkdir(parents=True)
    for name, table in tables.items():
        pq.write_table(table, root / f"{name}.parquet", compression="zstd")


def commit_batches(root: Path, batches: Sequence[Tables]) -> Callable[[], None]:
    """A fresh lake (created now, untimed) and the timed work: one commit per batch."""
    lake = tl.open_lake(root, create=True)

    def run() -> None:
        for tables in batches:
            lake.commit(tables, operation="bench")

    return run


@dataclass(frozen=True)
class Timing:
    """Wall and process-CPU seconds of one run (CPU counts all threads of the process)."""

    wall: float
    cpu: float


def timed(make: Callable[[Path], Callable[[], None]], root: Path) -> Timing:
    """Time one run of the work `make` prepares (untimed) in a fresh directory, then remove it."""
    work = make(root)
    start, start_cpu = time.perf_counter(), time.process_time()
    work()
    timing = Timing(time.perf_counter() - start, time.process_time() - start_cpu)
    shutil.rmtree(root, ignore_errors=True)
    return timing


def write_dicts(root: Path, dicts: Sequence[dict[str, Any]], batch: int) -> float:
    """End-to-end: `lake.write` of canonical dicts, one commit per batch; returns seconds."""
    lake = tl.open_lake(root, create=True)
    start = time.perf_counter()
    for i in range(0, len(dicts), batch):
        lake.write(dicts[i : i + batch], operation="bench")
    seconds = time.perf_counter() - start
    shutil.rmtree(root, ignore_errors=True)
    return seconds


def throughput(label: str, seconds: float, data: Dataset) -> str:
    """One summary line: MB/s of Arrow data, rows/s, messages/s and trajectories/s."""
    mb = data.nbytes / 1e6
    return (
        f"  {label:34s} {seconds:6.2f} s  {mb / seconds:7.1f} MB/s  "
        f"{data.rows / seconds:9,.0f} rows/s  {data.messages / seconds:9,.0f} messages/s  "
        f"{data.trajectories / seconds:7,.0f} trajectories/s"
    )


def verdict(ratio: float) -> str:
    """'met' or how far below the target a ratio is."""
    return "met" if ratio >= TARGET else f"MISSED by {(1 - ratio / TARGET) * 100:.0f}%"


def main(argv: Sequence[str] | None = None) -> None:
    """Build the data, time lake vs pyarrow (interleaved, best of 3), print the ratio line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=7000, help="≈29 messages each (7000)")
    parser.add_argument("--batch", type=int, default=2000, help="trajectories per commit (2000)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="best of N (3)")
    parser.add_argument("--skip-e2e", action="store_true", help="skip the lake.write timing")
    args = parser.parse_args(argv)
    if min(args.trajectories, args.batch, args.repeats) < 1:
        parser.error("--trajectories, --batch and --repeats must be ≥ 1")

    start = time.perf_counter()
    data = build_dataset(args.trajectories, args.batch)
    print(
        f"built {args.trajectories} trajectories, {data.messages:,} messages, "
        f"{data.nbytes / 1e6:.0f} MB Arrow in {time.perf_counter() - start:.1f} s"
    )
    makers: dict[str, Callable[[Path], Callable[[], None]]] = {
        "pyarrow": lambda p: lambda: write_pyarrow(p, data.whole),
        "one": lambda p: commit_batches(p, [data.whole]),
        "batched": lambda p: commit_batches(p, data.batches),
    }
    runs: dict[str, list[Timing]] = {name: [] for name in makers}
    root = Path(tempfile.mkdtemp(prefix="trajlake-bench-ingest-"))
    try:
        for r in range(args.repeats):  # interleaved, so load on the machine hits all alike
            for name, make in makers.items():
                runs[name].append(timed(make, root / f"{name}-{r}"))
        e2e = None if args.skip_e2e else write_dicts(root / "e2e", data.dicts, args.batch)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summarize(runs, data, args.batch, e2e)


def summarize(runs: dict[str, list[Timing]], data: Dataset, batch: int, e2e: float | None) -> None:
    """Print throughputs, ratios (wall, and CPU for information) and the ratio line."""
    wall = {k: min(t.wall for t in v) for k, v in runs.items()}
    cpu = {k: min(t.cpu for t in v) for k, v in runs.items()}
    n_batches = len(data.batches)
    print(f"best of {len(runs['pyarrow'])}; all runs, wall s / cpu s:")
    for name, timings in runs.items():
        print(f"  {name:8s} " + "  ".join(f"{t.wall:.2f}/{t.cpu:.2f}" for t in timings))
    print(throughput("pyarrow.parquet.write_table (zstd)", wall["pyarrow"], data))
    print(throughput("lake.commit, one commit", wall["one"], data))
    print(throughput(f"lake.commit, {n_batches} commits of {batch}", wall["batched"], data))
    if e2e is not None:
        print(throughput(f"lake.write(dicts), {n_batches} commits", e2e, data) + "  (info)")
    ratio_batched = wall["pyarrow"] / wall["batched"]
    ratio_one = wall["pyarrow"] / wall["one"]
    print(
        f"lake/pyarrow, batches of {batch}: {ratio_batched:.2f} — {verdict(ratio_batched)} "
        f"(cpu time: {cpu['pyarrow'] / cpu['batched']:.2f})"
    )
    print(
        f"lake/pyarrow, one commit: {ratio_one:.2f} — {verdict(ratio_one)} "
        f"(cpu time: {cpu['pyarrow'] / cpu['one']:.2f})"
    )
    print(
        f"RATIO bench_ingest lake/pyarrow={ratio_batched:.2f} (target >= {TARGET}) "
        f"[batches of {batch}; one commit: {ratio_one:.2f}]"
    )


if __name__ == "__main__":
    main()
