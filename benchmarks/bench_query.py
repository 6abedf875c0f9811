"""SQL on a pinned snapshot: `lake.sql` vs DuckDB `read_parquet` over the same Parquet files.

Target (DESIGN.md §10): ≤ 1.2x DuckDB. `lake.sql` opens a new pinned session per call (views
over every table), so it is measured both per call and through one reused `lake.query()`
session; the baseline is a plain `duckdb.connect()` with the same views. Best of 5 each.

Run: `python benchmarks/bench_query.py [--trajectories 7000]`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

import trajlake as tl
from trajlake.records import trajectories_to_tables
from trajlake.sample import sample_trajectories

SEED = 5
TARGET = 1.2
REPEATS = 5
BATCH = 2000

QUERIES: dict[str, str] = {
    "group-by": """
        SELECT role, count(*) AS n, avg(length(content)) AS avg_content_chars
        FROM messages
        GROUP BY role
        ORDER BY role
    """,
    "join": """
        SELECT t.harness, count(*) AS messages, sum(m.completion_tokens) AS completion_tokens
        FROM trajectories t JOIN messages m ON m.trajectory_id = t.trajectory_id
        WHERE t.resolved
        GROUP BY t.harness
        ORDER BY t.harness
    """,
}
TABLES = ("trajectories", "messages")


def build_lake(root: Path, trajectories: int) -> tuple[tl.Lake, int]:
    """A lake holding `trajectories` sample rollouts, committed in batches; its head snapshot."""
    lake = tl.open_lake(root, create=True)
    snapshot_id = 0
    for start in range(0, trajectories, BATCH):
        dicts = sample_trajectories(min(BATCH, trajectories - start), seed=SEED, start=start)
        records = [tl.CanonicalTrajectory.model_validate(d) for d in dicts]
        snapshot_id = lake.commit(trajectories_to_tables(records), operation="bench").snapshot_id
    return lake, snapshot_id


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scan(files: Sequence[str]) -> str:
    """`read_parquet([...])` over a list of file URIs."""
    return "read_parquet([" + ", ".join(_quote(f.removeprefix("file://")) for f in files) + "])"


def duckdb_connection(files: dict[str, list[str]]) -> duckdb.DuckDBPyConnection:
    """The baseline: a plain DuckDB connection with one view per table over its files."""
    con = duckdb.connect()
    for table, table_files in files.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM {scan(table_files)}")
    return con


def duckdb_per_call(files: dict[str, list[str]], sql: str) -> pa.Table:
    """A fresh plain connection per query, as `lake.sql` opens one: DuckDB's own share."""
    con = duckdb_connection(files)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def best_of(
    works: dict[str, Callable[[], pa.Table]], repeats: int
) -> tuple[dict[str, float], dict[str, pa.Table]]:
    """Best wall time of each work over `repeats` interleaved rounds, and their results.

    One untimed round first warms the OS cache and each connection's caches alike.
    """
    best = dict.fromkeys(works, float("inf"))
    results = {name: work() for name, work in works.items()}
    for _ in range(repeats):
        for name, work in works.items():
            start = time.perf_counter()
            results[name] = work()
            best[name] = min(best[name], time.perf_counter() - start)
    return best, results


def verdict(ratio: float) -> str:
    """'met' or how far above the target a ratio is."""
    return "met" if ratio <= TARGET else f"MISSED by {(ratio / TARGET - 1) * 100:.0f}%"


def time_query(lake: tl.Lake, at: int, sql: str, repeats: int) -> dict[str, float]:
    """Seconds for the baseline, per-call `lake.sql` and a reused session; results must agree."""
    files = {t: lake.table_files(t, at=at) for t in TABLES}
    con = duckdb_connection(files)
    session = lake.query(at=at)
    try:
        times, results = best_of(
            {
                "duckdb": lambda: con.sql(sql).to_arrow_table(),
                "duckdb/call": lambda: duckdb_per_call(files, sql),
                "lake.sql": lambda: lake.sql(sql, at=at).to_arrow(),
                "session": lambda: session.sql(sql).to_arrow(),
            },
            repeats,
        )
    finally:
        session.close()
        con.close()
    expected = results.pop("duckdb")
    if not all(result.equals(expected) for result in results.values()):
        raise AssertionError(f"lake and DuckDB results differ for:\n{sql}")
    return times


def time_session_open(lake: tl.Lake, at: int, repeats: int) -> float:
    """Seconds to open and close a pinned session: the fixed cost inside every `lake.sql`."""

    def work() -> pa.Table:
        lake.query(at=at).close()
        return pa.table({})

    return best_of({"open": work}, repeats)[0]["open"]


def main(argv: Sequence[str] | None = None) -> None:
    """Build the lake, time each query three ways, print the ratios and the ratio line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=7000, help="≈29 messages each (7000)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="best of N (5)")
    args = parser.parse_args(argv)
    if args.trajectories < 1 or args.repeats < 1:
        parser.error("--trajectories and --repeats must be ≥ 1")

    root = Path(tempfile.mkdtemp(prefix="trajlake-bench-query-"))
    try:
        start = time.perf_counter()
        lake, at = build_lake(root / "lake", args.trajectories)
        messages = lake.sql("SELECT count(*) AS n FROM messages", at=at).to_arrow()["n"][0]
        n_files = {t: len(lake.table_files(t, at=at)) for t in TABLES}
        print(
            f"lake with {args.trajectories} trajectories, {messages.as_py():,} messages "
            f"(files: {n_files}) built in {time.perf_counter() - start:.1f} s; snapshot {at}"
        )
        results = {name: time_query(lake, at, sql, args.repeats) for name, sql in QUERIES.items()}
        session_open = time_session_open(lake, at, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"best of {args.repeats}, ms:")
    print(
        f"  {'query':10s} {'duckdb':>8s} {'lake.sql':>9s} {'session':>8s} {'duckdb/call':>12s}"
        "   lake.sql/duckdb  session/duckdb"
    )
    worst_call = worst_session = 0.0
    for name, t in results.items():
        call, reused = t["lake.sql"] / t["duckdb"], t["session"] / t["duckdb"]
        worst_call, worst_session = max(worst_call, call), max(worst_session, reused)
        print(
            f"  {name:10s} {t['duckdb'] * 1000:8.1f} {t['lake.sql'] * 1000:9.1f} "
            f"{t['session'] * 1000:8.1f} {t['duckdb/call'] * 1000:12.1f}"
            f"   {call:15.2f}x {reused:14.2f}x"
        )
    print(
        "  (duckdb: one plain connection, views made once; duckdb/call: a fresh plain "
        "connection per query, for information)"
    )
    print(f"opening a pinned session (inside every lake.sql call): {session_open * 1000:.1f} ms")
    print(f"per-call lake.sql vs duckdb, worst query: {worst_call:.2f} — {verdict(worst_call)}")
    print(f"reused session vs duckdb, worst query: {worst_session:.2f} — {verdict(worst_session)}")
    print(
        f"RATIO bench_query trajlake/duckdb={worst_call:.2f} (target <= {TARGET}) "
        f"[per-call lake.sql, worst query; reused session: {worst_session:.2f}]"
    )


if __name__ == "__main__":
    main()
