"""Concurrent writers (processes and threads) and the buffered writer."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _lakecheck import chain_problems, set_settings, snapshot_contents
from _writer_child import context, read_progress, write_batches

import trajlake as tl
from trajlake.sample import sample_trajectory

WRITERS = 3
PER_WRITER = 24
BATCH = 3


def _run_writers(root: Path, plans: list[list[int]], batch: int) -> list[list[dict[str, Any]]]:
    """One process per plan (a list of sample indices), all starting at once."""
    ctx = context()
    start = ctx.Barrier(len(plans))
    procs = []
    for n, indices in enumerate(plans):
        proc = ctx.Process(
            target=write_batches,
            args=(str(root / "lake"), str(root / f"progress-{n}.jsonl"), indices),
            kwargs={"batch": batch, "start": start},
        )
        proc.start()
        procs.append(proc)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0, f"a writer failed (exit code {proc.exitcode}); see its stderr"
    return [read_progress(root / f"progress-{n}.jsonl") for n in range(len(plans))]


def test_processes_commit_disjoint_trajectories(tmp_path: Path) -> None:
    tl.open_lake(tmp_path / "lake", create=True)
    # Background maintenance now and then, interleaved with the other writers' commits.
    set_settings(tmp_path / "lake", auto_maintain_every=3, compact_min_files=3)
    plans = [list(range(n * 1000, n * 1000 + PER_WRITER)) for n in range(WRITERS)]
    progress = _run_writers(tmp_path, plans, BATCH)

    lake = tl.open_lake(tmp_path / "lake")
    commits = [c for writer in progress for c in writer]
    assert len(commits) == WRITERS * PER_WRITER // BATCH
    assert all(c["added"] == BATCH and c["duplicates"] == 0 for c in commits)
    # Every commit got its own snapshot, and the log is one chain: no lost or forked entries.
    snapshot_ids = [c["snapshot_id"] for c in commits]
    assert len(set(snapshot_ids)) == len(snapshot_ids)
    snapshots = lake.snapshots()
    assert not chain_problems(snapshots)
    writes = [s for s in snapshots if s.operation == "write"]
    assert sorted(s.snapshot_id for s in writes) == sorted(snapshot_ids)

    ids, problems = snapshot_contents(lake, None)
    assert not problems
    expected = {sample_trajectory(i)["trajectory_id"] for plan in plans for i in plan}
    assert ids == expected
    # A writer's commit is visible from its own snapshot on (a few checked: each costs a query).
    for commit in random.Random(0).sample(commits, 4):
        at_commit, problems = snapshot_contents(lake, commit["snapshot_id"])
        assert not problems
        assert set(commit["ids"]) <= at_commit
    report = lake.validate()
    assert report.ok, report.problems


def test_processes_commit_overlapping_trajectories(tmp_path: Path) -> None:
    tl.open_lake(tmp_path / "lake", create=True)
    shared = list(range(PER_WRITER))
    plans = [random.Random(n).sample(shared, len(shared)) for n in range(WRITERS)]
    progress = _run_writers(tmp_path, plans, batch=4)

    lake = tl.open_lake(tmp_path / "lake")
    commits = [c for writer in progress for c in writer]
    # Each trajectory was stored by exactly one writer; the others saw it as a duplicate.
    assert sum(c["added"] for c in commits) == PER_WRITER
    assert sum(c["duplicates"] for c in commits) == (WRITERS - 1) * PER_WRITER
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert ids == {sample_trajectory(i)["trajectory_id"] for i in shared}
    assert lake.sql("select count(*) from messages").rows()[0][0] == sum(
        len(sample_trajectory(i, turns=2)["messages"]) for i in shared
    )
    snapshots = lake.snapshots()
    assert not chain_problems(snapshots)
    # A commit that added nothing made no snapshot.
    assert len(snapshots) == 1 + sum(1 for c in commits if c["added"])
    assert lake.validate().ok


def test_threads_commit_through_separate_lake_objects(lake: tl.Lake) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            mine = tl.open_lake(lake.uri)
            for b in range(4):
                mine.write([sample_trajectory(n * 100 + b * 2 + i, turns=2) for i in range(2)])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert len(ids) == WRITERS * 8
    assert not chain_problems(lake.snapshots())
    assert len(lake.snapshots()) == 1 + WRITERS * 4


# BufferedWriter ------------------------------------------------------------------------------


def _wait_until(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _stored(lake: tl.Lake) -> int:
    return int(lake.sql("select count(*) from trajectories").rows()[0][0])


def test_buffered_writer_flushes_by_count_and_on_close(lake: tl.Lake) -> None:
    writer = lake.writer(max_trajectories=3, max_seconds=60)
    for i in range(7):
        writer.add(sample_trajectory(i, turns=2))
    # Two full batches are committed as they fill; one trajectory waits.
    assert len(writer.results) == 2
    assert writer.pending == 1
    assert _stored(lake) == 6
    assert [len(s.summary.get("added", {})) > 0 for s in writer.snapshots] == [True, True]
    writer.close()
    assert writer.pending == 0
    assert len(writer.results) == 3
    assert _stored(lake) == 7
    with pytest.raises(ValueError):
        writer.add(sample_trajectory(8, turns=2))
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert len(ids) == 7
    assert not chain_problems(lake.snapshots())


def test_buffered_writer_flushes_by_time(lake: tl.Lake) -> None:
    with lake.writer(max_trajectories=100, max_seconds=0.5) as writer:
        writer.add(sample_trajectory(0, turns=2))
        writer.add(sample_trajectory(1, turns=2))
        assert writer.pending == 2
        assert _wait_until(lambda: len(writer.results) == 1), "no time-triggered flush"
        assert writer.pending == 0
        assert _stored(lake) == 2
        # The timer starts again with the next trajectory.
        writer.add(sample_trajectory(2, turns=2))
        assert _wait_until(lambda: len(writer.results) == 2)
        assert _stored(lake) == 3
        writer.add(sample_trajectory(3, turns=2))
    # Leaving the block commits the rest.
    assert _stored(lake) == 4
    assert writer.pending == 0


def test_buffered_writer_keeps_a_failed_batch(
    lake: tl.Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = lake.writer(max_trajectories=100, max_seconds=0.1)
    real_write = lake.write
    failures = []

    def failing_write(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise tl.errors.LockTimeout("simulated: the lake was busy")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(lake, "write", failing_write)
    writer.add(sample_trajectory(0, turns=2))
    assert _wait_until(lambda: failures), "the timer never fired"
    # The background failure surfaces on the producer's next call (the timer thread holds the
    # writer's lock from the failed write until it has recorded the error); nothing was dropped.
    with pytest.raises(tl.errors.LockTimeout):
        writer.add(sample_trajectory(1, turns=2))
    assert writer.pending == 1
    writer.add(sample_trajectory(1, turns=2))
    writer.close()
    assert _stored(lake) == 2


def test_buffered_writer_from_several_threads(lake: tl.Lake) -> None:
    writer = lake.writer(max_trajectories=5, max_seconds=0.05)

    def produce(n: int) -> None:
        for i in range(10):
            writer.add(sample_trajectory(n * 100 + i, turns=2))

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert len(ids) == 30
    assert sum(r.added.get("trajectories", 0) for r in writer.results) == 30
