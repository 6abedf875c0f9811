"""What trajectory identity costs: new ids, duplicates, updates, and another writer catching up.

A lake holds `--trajectories` sample trajectories (18 messages each, minus the last 4: every
one can later grow), committed 1,000 at a time and compacted. Timed, best of `--repeats`:
a commit of 1,000 new trajectories (the common path: no stored message is read), a commit of
the same 1,000 again (all duplicates), the update of one trajectory that grew (its stored
rows are replaced copy-on-write), and a second `Lake` catching up on that update (its key
cache reads only the files the update removed and added) vs building its key cache afresh.

Commits take prebuilt Arrow tables (record validation and normalisation are not timed).

Run: `python benchmarks/bench_identity.py [--trajectories 20000] [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import trajlake as tl
from trajlake.records import trajectories_to_tables
from trajlake.sample import sample_trajectory
from trajlake.schema import CanonicalTrajectory

SEED = 41
TURNS = 8  # 2 + 2 × 8 = 18 messages
_DERIVED = ("content_hash", "n_messages", "n_turns", "n_tool_calls", "prompt_tokens")
_DERIVED += ("completion_tokens", "total_tokens", "cached_tokens", "reasoning_tokens")


def _record(i: int, *, grown: bool) -> dict[str, Any]:
    record = sample_trajectory(i, seed=SEED, turns=TURNS)
    if not grown:
        record["messages"] = record["messages"][:-4]
        for name in _DERIVED:
            record[name] = None
    return record


def _tables(records: list[dict[str, Any]]) -> dict[str, pa.Table]:
    """Arrow tables of the records, built outside the timed region."""
    return trajectories_to_tables([CanonicalTrajectory.model_validate(r) for r in records])


def _best(repeats: int, run: Callable[[int], None]) -> tuple[float, float]:
    """(wall, process CPU) seconds of the fastest run: CPU time barely moves under load."""
    times = []
    for r in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run(r)
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(times)


def _once(run: Callable[[], None]) -> tuple[float, float]:
    return _best(1, lambda _: run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--target-file-mb", type=int, default=None, help="compacted file size (default: 100)"
    )
    args = parser.parse_args()
    n, repeats = args.trajectories, args.repeats
    root = Path(tempfile.mkdtemp(prefix="bench-identity-"))
    try:
        tl.open_lake(root / "lake", create=True)
        if args.target_file_mb is not None:
            config_path = root / "lake" / "_trajlake" / "lake.json"
            config = json.loads(config_path.read_text())
            config["settings"]["target_file_mb"] = args.target_file_mb
            config_path.write_text(json.dumps(config))
        lake = tl.open_lake(root / "lake")
        for start in range(0, n, 1000):
            lake.write([_record(i, grown=False) for i in range(start, min(n, start + 1000))])
        lake.maintain()
        files = len(lake.table_files("messages"))
        batches = [
            _tables([_record(n + r * 1000 + i, grown=False) for i in range(1000)])
            for r in range(repeats)
        ]
        new = _best(repeats, lambda r: lake.commit(batches[r]))
        dup = _best(repeats, lambda r: lake.commit(batches[r]))
        grown = [_tables([_record(r, grown=True)]) for r in range(repeats)]

        def update(r: int) -> None:
            assert lake.commit(grown[r]).updated["trajectories"] == 1

        upd = _best(repeats, update)
        other = tl.open_lake(root / "lake")
        other.write([_record(0, grown=True)])  # builds its key cache
        lake.write([_record(repeats, grown=True)])
        again = _tables([_record(repeats, grown=True)])

        def catch_up_run() -> None:
            assert other.commit(again).duplicates["trajectories"] == 1

        catch_up = _once(catch_up_run)

        def fresh_run() -> None:
            assert tl.open_lake(root / "lake").commit(again).duplicates["trajectories"] == 1

        fresh = _once(fresh_run)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"lake: {n + repeats * 1000:,} trajectories, 14-18 messages each; messages compacted "
        f"into {files} file(s) (target {args.target_file_mb or 100} MB)"
    )
    rows = [
        ("commit of 1,000 new trajectories", new),
        ("commit of the same 1,000 (duplicates)", dup),
        ("update of one grown trajectory (copy-on-write)", upd),
        ("another writer, catching up on that update", catch_up),
        ("a new writer, key cache from scratch", fresh),
    ]
    for name, (wall, cpu) in rows:
        print(f"{name:48s} {wall * 1000:8.1f} ms wall {cpu * 1000:8.1f} ms CPU")
    print(
        f"RATIO update/new-1000 {upd[0] / new[0]:.2f} catch-up/fresh {catch_up[0] / fresh[0]:.2f}"
    )


if __name__ == "__main__":
    main()
