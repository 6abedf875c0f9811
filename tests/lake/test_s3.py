"""The lake on S3 (a moto server on loopback): write, query, tags, time travel, two writers."""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")
pytest.importorskip("s3fs")

from _lakecheck import chain_problems, snapshot_contents
from _writer_child import context, read_progress, write_batches

import trajlake as tl
from trajlake.errors import TagAlreadyExists
from trajlake.sample import sample_trajectory

# tests/ holds the moto helper; it is not a package.
_TESTS_DIR = str(Path(__file__).resolve().parents[1])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
from s3_server import DEFAULT_BUCKET, moto_s3_server  # noqa: E402

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """Storage options of a moto S3 server shared by this module's tests."""
    with moto_s3_server() as (_, storage_options):
        yield storage_options


def _uri() -> str:
    return f"s3://{DEFAULT_BUCKET}/lake-{uuid.uuid4().hex[:8]}"


def _count(lake: tl.Lake, at: tl.lake.SnapshotRef = None) -> int:
    return int(lake.sql("select count(*) from trajectories", at=at).rows()[0][0])


def test_s3_lake_write_query_tag_time_travel(s3: dict[str, str]) -> None:
    uri = _uri()
    lake = tl.open_lake(uri, create=True, storage_options=s3)
    first = lake.write([sample_trajectory(i, turns=2) for i in range(3)])
    assert first.snapshot_id == 1
    lake.tag("gen-1", note="on s3")
    second = lake.write([sample_trajectory(i, turns=2) for i in range(3, 5)])
    assert second.snapshot_id == 2

    # (Each query opens every table at its version over HTTP: keep them few.)
    assert _count(lake, at="gen-1") == 3
    when = lake.snapshot(1).time + (lake.snapshot(2).time - lake.snapshot(1).time) / 2
    assert lake.snapshot(when).snapshot_id == 1
    assert lake.snapshot(lake.snapshot(2).time + dt.timedelta(seconds=1)).snapshot_id == 2
    assert _count(lake, at=when.isoformat()) == 3
    ids, problems = snapshot_contents(lake, None)
    assert not problems and len(ids) == 5
    assert all(f.startswith(f"{uri}/tables/messages/") for f in lake.table_files("messages"))
    assert lake.read_table("trajectories", at="gen-1").num_rows == 3

    with pytest.raises(TagAlreadyExists):
        lake.tag("gen-1")
    again = lake.write([sample_trajectory(i, turns=2) for i in range(5)])
    assert again.snapshot_id == 2 and again.duplicates["trajectories"] == 5

    # Another Lake object (as another process would) sees the same lake.
    other = tl.open_lake(uri, storage_options=s3)
    assert [s.snapshot_id for s in other.snapshots()] == [0, 1, 2]
    assert [(t.name, t.snapshot_id, t.note) for t in other.tags()] == [("gen-1", 1, "on s3")]

    other.maintain()
    assert _count(other) == 5
    assert _count(other, at="gen-1") == 3
    report = tl.open_lake(uri, storage_options=s3).validate()
    assert report.ok, report.problems
    assert not chain_problems(other.snapshots())


@pytest.mark.long
def test_s3_concurrent_writers(s3: dict[str, str], tmp_path: Path) -> None:
    uri = _uri()
    tl.open_lake(uri, create=True, storage_options=s3)
    ctx = context()
    start = ctx.Barrier(2)
    plans = [list(range(n * 100, n * 100 + 9)) for n in range(2)]
    procs = [
        ctx.Process(
            target=write_batches,
            args=(uri, str(tmp_path / f"progress-{n}.jsonl"), plan),
            kwargs={"batch": 3, "storage_options": s3, "start": start},
        )
        for n, plan in enumerate(plans)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=240)
        assert proc.exitcode == 0, f"an S3 writer failed (exit code {proc.exitcode})"

    lake = tl.open_lake(uri, storage_options=s3)
    commits = [c for n in range(2) for c in read_progress(tmp_path / f"progress-{n}.jsonl")]
    assert len(commits) == 6
    assert len({c["snapshot_id"] for c in commits}) == 6
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert ids == {sample_trajectory(i)["trajectory_id"] for plan in plans for i in plan}
    snapshots = lake.snapshots()
    assert not chain_problems(snapshots)
    assert sorted(s.snapshot_id for s in snapshots if s.operation == "write") == sorted(
        c["snapshot_id"] for c in commits
    )
    assert lake.validate().ok
