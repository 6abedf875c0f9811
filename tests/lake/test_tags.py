"""Tags and time travel: snapshot references, immutable tags, and tags surviving maintenance."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _lakecheck import count_files, set_settings, snapshot_contents

import trajlake as tl
from trajlake.errors import NoSuchSnapshot, NoSuchTag, SnapshotExpired, TagAlreadyExists
from trajlake.sample import sample_trajectory


def _count(lake: tl.Lake, at: tl.lake.SnapshotRef = None) -> int:
    return int(lake.sql("select count(*) from trajectories", at=at).rows()[0][0])


def _rows(lake: tl.Lake, at: tl.lake.SnapshotRef) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the two data tables at a snapshot, in key order (nested columns too)."""
    return {
        "trajectories": lake.sql(
            "select trajectory_id, content_hash, n_messages, reward, resolved, tools, attrs "
            "from trajectories order by trajectory_id",
            at=at,
        ).rows(),
        "messages": lake.sql(
            "select trajectory_id, thread, idx, role, content, tool_calls, timestamp "
            "from messages order by trajectory_id, thread, idx",
            at=at,
        ).rows(),
    }


def test_query_at_tag_returns_the_old_result(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(i, turns=2) for i in range(3)])
    tag = lake.tag("gen-1", note="first generation")
    assert (tag.name, tag.snapshot_id, tag.note) == ("gen-1", 1, "first generation")
    before = _rows(lake, "gen-1")
    files_before = lake.table_files("messages", at="gen-1")

    lake.write([sample_trajectory(i, turns=2) for i in range(3, 8)])
    assert _count(lake) == 8
    assert _count(lake, at="gen-1") == 3
    assert _rows(lake, "gen-1") == before
    assert lake.table_files("messages", at="gen-1") == files_before
    assert lake.table_version("messages", at="gen-1") < lake.table_version("messages")
    # A fresh process sees the same tag.
    reopened = tl.open_lake(lake.uri)
    assert [(t.name, t.snapshot_id, t.note) for t in reopened.tags()] == [
        ("gen-1", 1, "first generation")
    ]
    assert _rows(reopened, "gen-1") == before


def test_tags_are_immutable(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(0, turns=2)])
    lake.tag("sft-v2-data", note="original")
    lake.write([sample_trajectory(1, turns=2)])
    with pytest.raises(TagAlreadyExists, match="sft-v2-data"):
        lake.tag("sft-v2-data", note="moved")
    with pytest.raises(TagAlreadyExists):
        lake.tag("sft-v2-data", at=1)
    tag = next(t for t in lake.tags() if t.name == "sft-v2-data")
    assert (tag.snapshot_id, tag.note) == (1, "original")
    assert _count(lake, at="sft-v2-data") == 1
    # Another name for the same snapshot is fine; tags list by snapshot, then name.
    lake.tag("alias", at="sft-v2-data")
    lake.tag("head")
    assert [(t.name, t.snapshot_id) for t in lake.tags()] == [
        ("alias", 1),
        ("sft-v2-data", 1),
        ("head", 2),
    ]


def test_tag_and_resolve_errors(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(0, turns=2)])
    with pytest.raises(NoSuchSnapshot):
        lake.tag("nope", at=99)
    assert lake.tags() == []
    with pytest.raises(NoSuchTag):
        lake.snapshot("no-such-tag")
    with pytest.raises(NoSuchSnapshot):  # NoSuchTag is one
        lake.sql("select 1", at="no-such-tag")
    with pytest.raises(NoSuchSnapshot):
        lake.snapshot(42)
    with pytest.raises(TypeError):
        lake.snapshot(True)
    with pytest.raises(TypeError):
        lake.snapshot(1.5)  # type: ignore[arg-type]


def test_resolve_by_id_tag_timestamp_and_latest(lake: tl.Lake) -> None:
    for i in range(3):
        time.sleep(0.005)  # distinct commit times
        lake.write([sample_trajectory(i, turns=2)])
    lake.tag("second", at=2)
    snaps = lake.snapshots()
    assert [s.snapshot_id for s in snaps] == [0, 1, 2, 3]

    assert lake.snapshot(2).snapshot_id == 2
    assert lake.snapshot("2").snapshot_id == 2
    assert lake.snapshot("second").snapshot_id == 2
    assert lake.snapshot().snapshot_id == 3
    assert lake.snapshot("latest").snapshot_id == 3
    # Timestamps: exact commit time, ISO text (with or without '@'), aware or naive (UTC).
    t2 = snaps[2].time
    assert lake.snapshot(t2).snapshot_id == 2
    assert lake.snapshot(snaps[2].timestamp).snapshot_id == 2
    assert lake.snapshot("@" + snaps[2].timestamp).snapshot_id == 2
    assert lake.snapshot(t2.replace(tzinfo=None)).snapshot_id == 2
    assert lake.snapshot(t2.astimezone(dt.timezone(dt.timedelta(hours=5)))).snapshot_id == 2
    # Between two commits: the older one; after the last: the latest.
    middle = t2 + (snaps[3].time - t2) / 2
    assert lake.snapshot(middle).snapshot_id == 2
    assert lake.snapshot(middle.isoformat()).snapshot_id == 2
    assert lake.snapshot(snaps[3].time + dt.timedelta(days=1)).snapshot_id == 3
    with pytest.raises(NoSuchSnapshot):
        lake.snapshot(snaps[0].time - dt.timedelta(seconds=1))
    # Queries resolve the same way.
    assert _count(lake, at=middle) == _count(lake, at=2) == 2
    assert _count(lake, at="latest") == 3


# Maintenance against tags ---------------------------------------------------------------------


def _maintained_lake(root: Path) -> tuple[tl.Lake, dict[str, Any]]:
    """A lake with a tagged early snapshot, many commits after it and two maintenance runs.

    With a 5-version window and no retention period, everything that neither the tag nor the
    window needs is fair game for log expiry and vacuum.
    """
    lake = tl.open_lake(root, create=True)
    set_settings(
        root, log_versions=5, compact_min_files=2, retention_hours=0, auto_maintain_every=0
    )
    lake = tl.open_lake(root)
    facts: dict[str, Any] = {}
    for i in range(2):
        lake.write([sample_trajectory(i, turns=2)])
    lake.tag("keep", note="must survive maintenance")
    facts["tagged_rows"] = _rows(lake, "keep")
    facts["tagged_files"] = {
        t: lake.table_files(t, at="keep") for t in ("trajectories", "messages")
    }
    for i in range(2, 12):
        lake.write([sample_trajectory(i, turns=2)])
    facts["first"] = lake.maintain()
    for i in range(12, 20):
        lake.write([sample_trajectory(i, turns=2)])
    facts["log_files_before"] = count_files(root, "tables/*/_delta_log/*.json")
    facts["data_files_before"] = count_files(root, "tables/*/*.parquet")
    facts["live_files_before"] = len(lake.table_files("messages"))
    facts["second"] = lake.maintain()
    facts["log_files_after"] = count_files(root, "tables/*/_delta_log/*.json")
    facts["data_files_after"] = count_files(root, "tables/*/*.parquet")
    return tl.open_lake(root), facts


def test_maintenance_expires_old_snapshots_but_keeps_tags(tmp_path: Path) -> None:
    lake, facts = _maintained_lake(tmp_path / "lake")
    # Maintenance really removed things: old log entries, and small files from the live set.
    removed = sum(t.log_files_removed for t in facts["second"].tables.values())
    assert removed > 0
    assert facts["log_files_after"] < facts["log_files_before"]
    assert len(lake.table_files("messages")) < facts["live_files_before"]
    # An untagged snapshot older than the window is gone, and says so.
    with pytest.raises(SnapshotExpired, match="retention"):
        lake.sql("select count(*) from trajectories", at=5)
    with pytest.raises(NoSuchSnapshot):
        lake.table_files("messages", at=5)
    # The tagged one reads exactly as before, from the very same files.
    assert _rows(lake, "keep") == facts["tagged_rows"]
    for table, files in facts["tagged_files"].items():
        assert lake.table_files(table, at="keep") == files
    ids, problems = snapshot_contents(lake, "keep")
    assert not problems and len(ids) == 2
    # The window and the head are intact.
    latest = lake.snapshot().snapshot_id
    assert _count(lake) == 20
    assert _count(lake, at=latest - 2) in (19, 20)
    ids, problems = snapshot_contents(lake, None)
    assert not problems and len(ids) == 20
    report = lake.validate()
    assert report.ok, report.problems
    assert report.snapshots_expired == 0  # validate only looks at the window and tags


def test_vacuum_deletes_files_only_expired_versions_needed(tmp_path: Path) -> None:
    lake, facts = _maintained_lake(tmp_path / "lake")
    # The tag's files stay (validate checks every pinned file of the tag and the window) ...
    assert lake.validate().ok
    for files in facts["tagged_files"].values():
        assert all(Path(f.removeprefix("file://")).exists() for f in files)
    # ... but the small files that only expired versions referenced are deleted.
    assert sum(t.data_files_vacuumed for t in facts["second"].tables.values()) > 0
    assert facts["data_files_after"] < facts["data_files_before"]


def test_stray_files_are_vacuumed_and_tagged_files_kept(tmp_path: Path) -> None:
    """Files no Delta version references (a killed writer's) are vacuumed once old enough."""
    lake, facts = _maintained_lake(tmp_path / "lake")
    stray = Path(lake.uri) / "tables" / "messages" / "part-killed-writer-c000.zstd.parquet"
    stray.write_bytes(
        Path(facts["tagged_files"]["messages"][0].removeprefix("file://")).read_bytes()
    )
    old = time.time() - 400 * 3600  # older than any window the lake computes
    os.utime(stray, (old, old))
    before = count_files(lake.uri, "tables/*/*.parquet")
    report = lake.maintain()
    assert not stray.exists()
    assert report.tables["messages"].data_files_vacuumed >= 1
    assert count_files(lake.uri, "tables/*/*.parquet") < before
    assert _rows(lake, "keep") == facts["tagged_rows"]
    assert _count(lake) == 20
    assert lake.validate().ok


def test_maintain_that_vacuums_leaves_no_orphan_versions(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(0, turns=2)])
    lake.write([sample_trajectory(1, turns=2)])
    stray = Path(lake.uri) / "tables" / "trajectories" / "part-killed-writer-c000.zstd.parquet"
    stray.write_bytes(b"PAR1 not really")
    old = time.time() - 400 * 3600
    os.utime(stray, (old, old))
    report = lake.maintain()
    assert report.tables["trajectories"].data_files_vacuumed == 1
    assert lake.validate().orphan_versions == {}
