"""Small-commit latency: many commits of 8 trajectories × 50 messages with maintenance on.

Targets (DESIGN.md §10): p50 ≤ 25 ms and p99 ≤ 100 ms (judged on the worst of the first 100,
the last 100 and all commits), and flat: the p50 of the last 100 commits within 1.3x of the
first 100. A plain `deltalake.write_deltalake` append loop of the same message tables (no
maintenance) runs in the same process as the reference.

Run: `python benchmarks/bench_commit.py [--commits 2000] [--no-reference]`.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

import trajlake as tl
from trajlake.records import trajectories_to_tables
from trajlake.sample import sample_trajectory

SEED = 29
TRAJECTORIES_PER_COMMIT = 8
TURNS = 24  # 2 + 2 × 24 = 50 messages per trajectory
WINDOW = 100
TARGET_P50_MS = 25.0
TARGET_P99_MS = 100.0
TARGET_DRIFT = 1.3

Tables = dict[str, pa.Table]


@dataclass(frozen=True)
class Window:
    """p50 and p99 of one stretch of commits, in milliseconds."""

    p50: float
    p99: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), linear interpolation between order statistics."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def window(latencies_ms: Sequence[float]) -> Window:
    """Summarise a stretch of commit latencies."""
    return Window(percentile(latencies_ms, 50), percentile(latencies_ms, 99))


def build_pool(batches: int) -> list[Tables]:
    """Distinct 8-trajectory batches, built once from realistic sample records."""
    pool = []
    for b in range(batches):
        start = b * TRAJECTORIES_PER_COMMIT
        records = [
            tl.CanonicalTrajectory.model_validate(sample_trajectory(i, seed=SEED, turns=TURNS))
            for i in range(start, start + TRAJECTORIES_PER_COMMIT)
        ]
        pool.append(trajectories_to_tables(records))
    return pool


def rekey(tables: Tables, commit: int) -> Tables:
    """A pool batch under fresh trajectory ids and content hashes, so no commit is a duplicate.

    The lake drops rows whose trajectory id or content hash it already holds; building 16,000
    distinct trajectories would take minutes, so pool batches are reused under new keys.
    Fields keep their exact schema (nullability included), as `trajectories_to_tables` made it.
    """
    trajectories, messages = tables["trajectories"], tables["messages"]
    old_ids = trajectories.column("trajectory_id")
    new_ids = pa.array(
        [f"bench-{commit:06d}-{j:02d}" for j in range(trajectories.num_rows)], pa.string()
    )
    hashes = pa.array([hashlib.sha256(i.encode()).hexdigest() for i in new_ids.to_pylist()])
    trajectories = _replace(trajectories, "trajectory_id", new_ids)
    trajectories = _replace(trajectories, "content_hash", hashes)
    position = pc.index_in(messages.column("trajectory_id"), value_set=old_ids)
    messages = _replace(messages, "trajectory_id", new_ids.take(position))
    return {"trajectories": trajectories, "messages": messages}


def _replace(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.schema.field(index), values)


def build_commits(count: int, pool_size: int) -> list[Tables]:
    """The Arrow tables of every commit, ready before any timing starts."""
    pool = build_pool(min(pool_size, count))
    return [rekey(pool[c % len(pool)], c) for c in range(count)]


@dataclass(frozen=True)
class Run:
    """Per-commit wall and process-CPU times in milliseconds.

    CPU time counts every thread of the process (delta-rs works in its own threads, and
    maintenance may run in the background); unlike wall time it barely moves when other
    processes load the machine, so it tells intrinsic cost from contention.
    """

    wall: list[float]
    cpu: list[float]


def time_each(commits: Sequence[Tables], commit: Callable[[Tables], object]) -> Run:
    """Wall and CPU time of each commit."""
    wall, cpu = [], []
    for tables in commits:
        start, start_cpu = time.perf_counter(), time.process_time()
        commit(tables)
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return Run(wall, cpu)


def run_lake(root: Path, commits: Sequence[Tables]) -> Run:
    """trajlake commits into a fresh lake with default settings (auto-maintenance on)."""
    lake = tl.open_lake(root / "lake", create=True)
    if not lake.settings.auto_maintain_every:
        raise RuntimeError("auto maintenance is off; this benchmark needs the defaults")
    try:
        return time_each(commits, lambda t: lake.commit(t, operation="bench"))
    finally:
        # Maintenance may run in a background thread: let it finish before the dir goes.
        wait = getattr(lake, "wait_for_maintenance", None)
        if wait is not None:
            wait()


def run_delta(root: Path, commits: Sequence[Tables]) -> Run:
    """Reference: plain delta-rs appends of the messages table, no maintenance."""
    path = str(root / "delta-messages")
    return time_each(commits, lambda t: write_deltalake(path, t["messages"], mode="append"))


def stretches(latencies: Sequence[float]) -> tuple[Window, Window, Window]:
    """First window, last window and the whole run."""
    n = min(WINDOW, len(latencies))
    return window(latencies[:n]), window(latencies[-n:]), window(latencies)


def verdict(value: float, target: float) -> str:
    """'met' or 'MISSED by x%' for an upper-bound target."""
    if value <= target:
        return "met"
    return f"MISSED by {(value / target - 1) * 100:.0f}%"


def report(name: str, run: Run) -> tuple[Window, Window, Window]:
    """Print one run's windows; return its first, last and whole-run wall-time windows."""
    first, last, whole = stretches(run.wall)
    cpu_first, cpu_last, cpu_whole = stretches(run.cpu)
    n = min(WINDOW, len(run.wall))
    print(f"{name}: {len(run.wall)} commits, total {sum(run.wall) / 1000:.1f} s")
    print(f"  {'':9s} {'p50 wall':>9s} {'p99 wall':>9s} {'p50 cpu':>9s} {'p99 cpu':>9s}  (ms)")
    for label, w, c in (
        (f"first {n}", first, cpu_first),
        (f"last {n}", last, cpu_last),
        ("all", whole, cpu_whole),
    ):
        print(f"  {label:9s} {w.p50:9.1f} {w.p99:9.1f} {c.p50:9.1f} {c.p99:9.1f}")
    print(
        f"  max {max(run.wall):.1f} ms; last/first p50: wall {last.p50 / first.p50:.2f}, "
        f"cpu {cpu_last.p50 / cpu_first.p50:.2f}"
    )
    return first, last, whole


def slowest(latencies: Sequence[float], k: int = 6) -> str:
    """The k slowest commits as '#index:ms' (maintenance spikes show up here)."""
    top = sorted(range(len(latencies)), key=lambda i: latencies[i], reverse=True)[:k]
    return ", ".join(f"#{i}:{latencies[i]:.0f}ms" for i in sorted(top))


def main(argv: Sequence[str] | None = None) -> None:
    """Build the commits, time trajlake and plain Delta, print the summary and ratio line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=2000, help="number of commits (2000)")
    parser.add_argument("--pool", type=int, default=100, help="distinct batches to build (100)")
    parser.add_argument("--no-reference", action="store_true", help="skip the plain Delta loop")
    args = parser.parse_args(argv)
    if args.commits < 1 or args.pool < 1:
        parser.error("--commits and --pool must be ≥ 1")

    start = time.perf_counter()
    commits = build_commits(args.commits, args.pool)
    messages = commits[0]["messages"]
    print(
        f"built {len(commits)} commits of {TRAJECTORIES_PER_COMMIT} trajectories × "
        f"{messages.num_rows // TRAJECTORIES_PER_COMMIT} messages "
        f"({messages.nbytes / 1e6:.2f} MB Arrow each) in {time.perf_counter() - start:.1f} s"
    )
    root = Path(tempfile.mkdtemp(prefix="trajlake-bench-commit-"))
    try:
        lake_run = run_lake(root, commits)
        delta_run = None if args.no_reference else run_delta(root, commits)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    first, last, whole = report("trajlake commit (auto-maintenance on)", lake_run)
    print(f"  slowest: {slowest(lake_run.wall)}")
    if delta_run is not None:
        report("plain write_deltalake append (reference, no maintenance)", delta_run)
    judge(first, last, whole)


def judge(first: Window, last: Window, whole: Window) -> None:
    """Print each target's verdict (worst of first 100, last 100 and all) and the ratio line."""
    drift = last.p50 / first.p50
    worst_p50 = max(first.p50, last.p50, whole.p50)
    worst_p99 = max(first.p99, last.p99, whole.p99)
    print("targets (worst of first 100, last 100 and all commits):")
    p50_verdict = verdict(worst_p50, TARGET_P50_MS)
    p99_verdict = verdict(worst_p99, TARGET_P99_MS)
    print(f"  p50 ≤ {TARGET_P50_MS:.0f} ms: {worst_p50:.1f} ms — {p50_verdict}")
    print(f"  p99 ≤ {TARGET_P99_MS:.0f} ms: {worst_p99:.1f} ms — {p99_verdict}")
    print(f"  last/first p50 ≤ {TARGET_DRIFT}: {drift:.2f} — {verdict(drift, TARGET_DRIFT)}")
    print(
        f"RATIO bench_commit last/first p50={drift:.2f} (target <= {TARGET_DRIFT}) "
        f"p50={worst_p50:.1f}ms (target <= {TARGET_P50_MS:.0f}) "
        f"p99={worst_p99:.1f}ms (target <= {TARGET_P99_MS:.0f})"
    )


if __name__ == "__main__":
    main()
