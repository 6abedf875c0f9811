"""Crash safety: writers SIGKILLed at random moments never leave a broken or partial snapshot."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from _lakecheck import chain_problems, set_settings, snapshot_contents
from _writer_child import context, die_at, read_progress, write_batches

import trajlake as tl
from trajlake.sample import sample_trajectory

_STRIDE = 100_000  # index range per writer run, so runs never write the same trajectory


def _kill_loop(root: Path, kills: int, seed: int) -> dict[str, int]:
    """Start a writer, SIGKILL it after a random delay, check the lake; `kills` times."""
    ctx = context()
    rng = random.Random(seed)
    checked: dict[int, set[str]] = {}  # snapshot id -> trajectory ids, checked once
    stats = {"commits_reported": 0, "kills_with_orphans": 0, "kills_before_first_commit": 0}
    for k in range(kills):
        progress = root / f"progress-{k}.jsonl"
        writer = ctx.Process(
            target=write_batches,
            args=(str(root / "lake"), str(progress), range(k * _STRIDE, k * _STRIDE + 3)),
            kwargs={"batch": 3, "seed": seed, "forever": True},
        )
        writer.start()
        _wait_for_commits(progress, rng.choice([0, 1, 1, 2]), writer)
        time.sleep(rng.uniform(0.0, 0.08))
        writer.kill()
        writer.join()
        where = f"(kill {k}, seed {seed})"
        # A writer that exited on its own hit an error: an earlier kill broke the lake.
        assert writer.exitcode == -signal.SIGKILL, f"writer failed {where}: {writer.exitcode}"

        lake = tl.open_lake(root / "lake")
        report = lake.validate()
        assert report.ok, f"{where}: {report.problems}"
        stats["kills_with_orphans"] += bool(report.orphan_versions)
        if k % 5 == 4:
            # Maintenance right after a crash (it recovers first), which also keeps the number
            # of small files, and so the cost of these checks, bounded.
            lake.maintain()
            report = lake.validate()
            assert report.ok, f"{where}, after maintain(): {report.problems}"
        snapshots = lake.snapshots()
        assert not chain_problems(snapshots), f"{where}: {chain_problems(snapshots)}"
        # Each snapshot is checked in full when it first appears; a pinned Delta version never
        # changes, and validate() above proved every pinned file is still there. An old one is
        # re-read now and then anyway, in case something rewrote history.
        new = [s.snapshot_id for s in snapshots if s.snapshot_id not in checked]
        old = rng.sample(sorted(checked), 1) if checked and k % 4 == 3 else []
        for snapshot_id in new + old:
            try:
                ids, problems = snapshot_contents(lake, snapshot_id)
            except tl.errors.SnapshotExpired:
                assert snapshot_id in old, f"{where}: new snapshot {snapshot_id} expired"
                continue
            assert not problems, f"{where}: {problems}"
            if snapshot_id in checked:
                assert ids == checked[snapshot_id], f"{where}: snapshot {snapshot_id} changed"
            checked[snapshot_id] = ids

        reported = read_progress(progress)
        stats["commits_reported"] += len(reported)
        stats["kills_before_first_commit"] += not reported
        latest_ids = checked[snapshots[-1].snapshot_id]
        for run in range(k + 1):
            for commit in read_progress(root / f"progress-{run}.jsonl"):
                missing = set(commit["ids"]) - checked[commit["snapshot_id"]]
                assert not missing, f"{where}: snapshot {commit['snapshot_id']} lost {missing}"
                assert set(commit["ids"]) <= latest_ids, f"{where}: finished commit lost"
    return stats


def _wait_for_commits(progress: Path, commits: int, writer: Any) -> None:
    """Let a writer finish `commits` commits (the kill then lands in the next one)."""
    deadline = time.monotonic() + 30
    while len(read_progress(progress)) < commits and writer.is_alive():
        assert time.monotonic() < deadline, "the writer made no progress in 30 s"
        time.sleep(0.005)


def _after_kills(root: Path) -> None:
    """After the kills: a new commit works and leaves no orphan versions behind."""
    lake = tl.open_lake(root / "lake")
    before = lake.snapshot().snapshot_id
    records = [sample_trajectory(i, seed=7, turns=2) for i in range(3)]
    result = lake.write(records)
    assert result.snapshot_id == before + 1
    assert result.added == {"trajectories": 3, "messages": 18}
    report = lake.validate()
    assert report.ok, report.problems
    assert report.orphan_versions == {}
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert {r["trajectory_id"] for r in records} <= ids
    assert not chain_problems(lake.snapshots())


def _crash_lake(root: Path) -> None:
    tl.open_lake(root / "lake", create=True)
    # Maintenance after every commit (compaction once 4 small files pile up, log expiry), so
    # some kills land inside it too; a short window keeps validate() (which loads every
    # snapshot in it) quick.
    set_settings(root / "lake", auto_maintain_every=1, compact_min_files=4, log_versions=8)


@pytest.mark.long
def test_writer_killed_at_random_points(tmp_path: Path) -> None:
    _crash_lake(tmp_path)
    seed = int(os.environ.get("TRAJLAKE_CRASH_SEED", random.randrange(1_000_000)))
    stats = _kill_loop(tmp_path, kills=20, seed=seed)
    print(f"crash test seed {seed}: {stats}")
    assert stats["commits_reported"] > 0, f"no writer ever finished a commit (seed {seed})"
    _after_kills(tmp_path)


@pytest.mark.slow
def test_writer_killed_at_random_points_many_times(tmp_path: Path) -> None:
    _crash_lake(tmp_path)
    seed = int(os.environ.get("TRAJLAKE_CRASH_SEED", random.randrange(1_000_000)))
    stats = _kill_loop(tmp_path, kills=150, seed=seed)
    print(f"crash test seed {seed}: {stats}")
    assert stats["kills_with_orphans"] > 0, "no kill landed between data and log entry"
    _after_kills(tmp_path)
    tl.open_lake(tmp_path / "lake").maintain()
    assert tl.open_lake(tmp_path / "lake").validate().ok


# Deterministic crash points ------------------------------------------------------------------


def _count(lake: tl.Lake, sql: str, at: tl.lake.SnapshotRef = None) -> int:
    return int(lake.sql(sql, at=at).rows()[0][0])


def _die(lake: tl.Lake, indices: range, point: str) -> None:
    child = context().Process(target=die_at, args=(lake.uri, indices, point, 3))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("cleanup", ["commit", "maintain"])
def test_killed_between_data_and_log_entry(lake: tl.Lake, cleanup: str) -> None:
    lake.write([sample_trajectory(i, seed=3, turns=2) for i in range(2)])
    head = lake.snapshot()
    _die(lake, range(10, 12), "before-log-entry")

    lake = tl.open_lake(lake.uri)
    report = lake.validate()
    assert report.ok, report.problems
    # The dead writer's data reached the Delta tables, but no snapshot pins it.
    assert report.orphan_versions, "the kill left no orphan versions: nothing was tested"
    assert lake.snapshot().snapshot_id == head.snapshot_id
    assert _count(lake, "select count(*) from trajectories") == 2
    assert _count(lake, "select count(*) from messages") == 12

    if cleanup == "commit":
        lake.write([sample_trajectory(20, seed=3, turns=2)])
        expected = {"sample-3-0000000", "sample-3-0000001", "sample-3-0000020"}
    else:
        lake.maintain()
        expected = {"sample-3-0000000", "sample-3-0000001"}
    report = lake.validate()
    assert report.ok, report.problems
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert ids == expected

    # The undone rows do not count as stored: writing them for real adds them, messages too.
    result = tl.open_lake(lake.uri).write([sample_trajectory(i, seed=3, turns=2) for i in (10, 11)])
    assert result.added == {"trajectories": 2, "messages": 12}
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert {"sample-3-0000010", "sample-3-0000011"} <= ids
    # Last, so that everything above is checked for both clean-ups.
    assert report.orphan_versions == {}


def test_killed_right_after_log_entry(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(0, seed=3, turns=2)])
    _die(lake, range(1, 3), "after-log-entry")
    lake = tl.open_lake(lake.uri)
    # The entry is the commit point: the commit is there, whole, though its writer died.
    assert lake.snapshot().snapshot_id == 2
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert ids == {"sample-3-0000000", "sample-3-0000001", "sample-3-0000002"}
    assert lake.write([sample_trajectory(3, seed=3, turns=2)]).snapshot_id == 3
    report = lake.validate()
    assert report.ok and report.orphan_versions == {}
    assert not chain_problems(lake.snapshots())


def test_partial_log_write_and_stale_head_hint(lake: tl.Lake) -> None:
    for i in range(3):
        lake.write([sample_trajectory(i, turns=2)])
    log_dir = Path(lake.uri) / "_trajlake" / "log"
    # Killed while writing entry 4: a torn temp file next to the entries.
    (log_dir / f"{4:020d}.json.tmp-999-1").write_bytes(b'{"snapshot_id": 4, "tabl')
    # The head hint lags behind (killed between entry and hint), or is gone.
    (log_dir / "_head.json").write_text(json.dumps({"snapshot_id": 1}))
    assert tl.open_lake(lake.uri).snapshot().snapshot_id == 3
    (log_dir / "_head.json").unlink()
    reopened = tl.open_lake(lake.uri)
    assert reopened.snapshot().snapshot_id == 3
    assert reopened.validate().ok

    result = reopened.write([sample_trajectory(3, turns=2)])
    assert result.snapshot_id == 4
    assert not chain_problems(reopened.snapshots())
    assert _count(reopened, "select count(*) from trajectories") == 4


def test_killed_writer_releases_the_commit_lock(tmp_path: Path) -> None:
    """A writer killed while holding the lock must not block the next one (flock dies with it)."""
    root = tmp_path / "lake"
    tl.open_lake(root, create=True)
    ctx = context()
    locked = ctx.Event()
    holder = ctx.Process(target=_hold_lock_forever, args=(str(root), locked))
    holder.start()
    assert locked.wait(30), "the lock holder never got the lock"
    holder.kill()
    holder.join()
    start = time.monotonic()
    result = tl.open_lake(root).write([sample_trajectory(0, turns=2)])
    assert result.snapshot_id == 1
    assert time.monotonic() - start < 5


def _hold_lock_forever(root: str, locked: Any) -> None:
    from trajlake.lake._lock import commit_lock

    with commit_lock(root):
        locked.set()
        time.sleep(3600)
