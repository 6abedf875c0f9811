"""Core lake API: idempotent writes, dedup, views, memory lakes, errors and result conversions."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from _lakecheck import chain_problems, snapshot_contents

import trajlake as tl
from trajlake.errors import (
    LakeAlreadyExists,
    LakeNotFound,
    SchemaMismatch,
    UnsupportedStorage,
)
from trajlake.records import records_to_table, trajectories_to_tables
from trajlake.sample import sample_trajectory
from trajlake.schema import CanonicalTrajectory, Label


def _count(lake: tl.Lake, table: str = "trajectories") -> int:
    return int(lake.sql(f"select count(*) from {table}").rows()[0][0])


def _n_messages(records: list[dict]) -> int:
    return sum(len(r["messages"]) for r in records)


# Idempotence and dedup --------------------------------------------------------------------


def test_rewriting_the_same_records_adds_nothing(lake: tl.Lake) -> None:
    records = [sample_trajectory(i, turns=2) for i in range(5)]
    first = lake.write(records)
    assert first.snapshot_id == 1
    assert first.added == {"trajectories": 5, "messages": _n_messages(records)}
    assert first.duplicates == {"trajectories": 0, "messages": 0}

    again = lake.write([sample_trajectory(i, turns=2) for i in range(5)])
    assert again.snapshot_id == 1  # no new snapshot
    assert again.added == {"trajectories": 0, "messages": 0}
    assert again.duplicates == {"trajectories": 5, "messages": _n_messages(records)}
    assert [s.snapshot_id for s in lake.snapshots()] == [0, 1]

    # A fresh Lake object (no cached keys) agrees; a partly new batch adds only the new part.
    mixed = [sample_trajectory(i, turns=2) for i in range(3, 8)]
    result = tl.open_lake(lake.uri).write(mixed)
    assert result.snapshot_id == 2
    assert result.added == {"trajectories": 3, "messages": _n_messages(mixed[2:])}
    assert result.duplicates == {"trajectories": 2, "messages": _n_messages(mixed[:2])}
    ids, problems = snapshot_contents(lake, None)
    assert not problems and len(ids) == 8


def _same_rollout_twice() -> tuple[dict[str, Any], dict[str, Any]]:
    original = sample_trajectory(0, turns=3)
    copy = sample_trajectory(0, turns=3)
    copy["trajectory_id"] = "same-rollout-other-source"
    copy["source_format"] = "openhands"
    # Harness-specific details that the content hash leaves out.
    for m in copy["messages"]:
        m["timestamp"] = None
        m["prompt_tokens"] = None
    return original, copy


def test_same_content_under_another_id_is_kept_and_listed_by_default(lake: tl.Lake) -> None:
    # Distinct samples can share their text (short answers across epochs or models): by
    # default both are kept, and the `duplicates` view shows the group.
    original, copy = _same_rollout_twice()
    lake.write([original])
    second = lake.write([copy])
    assert second.added["trajectories"] == 1
    groups = lake.sql("SELECT copies, trajectory_ids FROM duplicates").to_dicts()
    assert groups == [
        {"copies": 2, "trajectory_ids": sorted([original["trajectory_id"], copy["trajectory_id"]])}
    ]


def test_same_rollout_under_another_id_is_stored_once_on_request(lake: tl.Lake) -> None:
    original, copy = _same_rollout_twice()
    first = lake.write([original], dedupe_content=True)
    second = lake.write([copy], dedupe_content=True)
    assert first.added["trajectories"] == 1
    assert second.added == {"trajectories": 0, "messages": 0}
    assert second.duplicates["trajectories"] == 1
    assert lake.sql("select trajectory_id from trajectories").rows() == [
        (original["trajectory_id"],)
    ]
    assert _count(lake, "messages") == len(original["messages"])

    # Within one batch too; and a rollout that differs in content is a different one.
    other = sample_trajectory(1, turns=3)
    twin = {**other, "trajectory_id": "twin-in-same-batch"}
    changed = sample_trajectory(0, turns=3)
    changed["trajectory_id"] = "edited"
    changed["messages"][-1]["content"] += " (edited)"
    result = lake.write([other, twin, changed], dedupe_content=True)
    assert result.added["trajectories"] == 2
    assert result.duplicates["trajectories"] == 1
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert ids == {original["trajectory_id"], other["trajectory_id"], "edited"}


def test_messages_committed_alone_are_not_stored_twice(lake: tl.Lake) -> None:
    record = CanonicalTrajectory.model_validate(sample_trajectory(0, turns=2))
    messages = trajectories_to_tables([record])["messages"]
    lake.commit({"messages": messages})
    again = lake.commit({"messages": messages})
    assert again.added.get("messages", 0) == 0
    assert _count(lake, "messages") == messages.num_rows


def test_empty_write_and_summary(lake: tl.Lake) -> None:
    empty = lake.write([])
    assert empty.snapshot_id == 0
    assert sum(empty.added.values()) == 0
    result = lake.write(
        [sample_trajectory(0, turns=2)], operation="ingest", summary={"source": "unit-test"}
    )
    snap = lake.snapshot(result.snapshot_id)
    assert snap.operation == "ingest"
    assert snap.summary["source"] == "unit-test"
    assert snap.summary["added"]["trajectories"] == 1
    assert snap.parent_id == 0
    assert not chain_problems(lake.snapshots())


# Views -------------------------------------------------------------------------------------


def _label(label_id: str, source: str, created: int, **fields: object) -> Label:
    when = dt.datetime(2026, 2, 1, tzinfo=dt.UTC) + dt.timedelta(hours=created)
    return Label(label_id=label_id, source=source, created_at=when, **fields)


def test_outcomes_view_resolves_labels(lake: tl.Lake) -> None:
    records = [sample_trajectory(i, turns=2) for i in range(8)]  # tasks 0 and 1, 4 attempts each
    lake.write(records)
    ids = [r["trajectory_id"] for r in records]
    task0, run = records[0]["task_id"], records[0]["run_id"]
    labels = [
        # By task + run: applies to every attempt of task 0 without a label of its own.
        _label("task0", "swebench", 0, task_id=task0, run_id=run, resolved=False, reward=0.0),
        # By id: beats the task label.
        _label("t0", "human", 0, trajectory_id=ids[0], resolved=True, reward=1.0),
        # Two labels by id: the newest wins.
        _label("t1-old", "judge", 0, trajectory_id=ids[1], resolved=True, reward=0.9),
        _label("t1-new", "judge", 5, trajectory_id=ids[1], resolved=False, reward=0.2),
    ]
    lake.commit({"labels": records_to_table("labels", labels)})
    rows = {
        r["trajectory_id"]: r
        for r in lake.sql("select * from outcomes order by trajectory_id").to_dicts()
    }
    assert len(rows) == 8
    assert (rows[ids[0]]["resolved"], rows[ids[0]]["reward"]) == (True, 1.0)
    assert rows[ids[0]]["outcome_source"] == "label:human"
    assert (rows[ids[1]]["resolved"], rows[ids[1]]["reward"]) == (False, 0.2)
    for i in (2, 3):
        assert (rows[ids[i]]["resolved"], rows[ids[i]]["outcome_source"]) == (
            False,
            "label:swebench",
        )
    for i in range(4, 8):  # task 1: no label, the rollout's own outcome
        assert rows[ids[i]]["resolved"] == records[i]["resolved"]
        assert rows[ids[i]]["outcome_source"] == "swebench-harness"
    # Labels are versioned like everything else: before them, outcomes were the recorded ones.
    before = lake.sql("select resolved from outcomes order by trajectory_id", at=1).rows()
    assert [r[0] for r in before] == [
        r["resolved"] for r in sorted(records, key=lambda r: r["trajectory_id"])
    ]


def test_tool_calls_view(lake: tl.Lake) -> None:
    records = [sample_trajectory(i, turns=3) for i in range(4)]
    lake.write(records)
    total = lake.sql("select sum(n_tool_calls) from trajectories").rows()[0][0]
    assert total == 12
    calls = lake.sql(
        "select trajectory_id, idx, turn, call_id, tool_name, arguments from tool_calls "
        "order by trajectory_id, idx"
    ).to_dicts()
    assert len(calls) == total
    first = records[0]["messages"][2]["tool_calls"][0]
    assert (calls[0]["call_id"], calls[0]["tool_name"], calls[0]["arguments"]) == (
        first["id"],
        first["name"],
        first["arguments"],
    )
    assert calls[0]["turn"] == 0
    # Every call is answered by the tool message that names it.
    answered = lake.sql(
        "select count(*) from tool_calls c join messages m "
        "on m.trajectory_id = c.trajectory_id and m.tool_call_id = c.call_id and m.role = 'tool'"
    ).rows()[0][0]
    assert answered == total
    submits = lake.sql("select count(*) from tool_calls where tool_name = 'submit'").rows()[0][0]
    assert submits == 4  # the last turn of each rollout


# Opening and creating ----------------------------------------------------------------------


def test_memory_lakes_are_shared_within_the_process() -> None:
    name = f"memory://test-{uuid.uuid4().hex}"
    a = tl.open_lake(name, create=True)
    b = tl.open_lake(name, create=True)
    assert a.uri == b.uri
    a.write([sample_trajectory(0, turns=2)])
    assert _count(b) == 1
    assert tl.open_lake(name).snapshot().snapshot_id == 1
    other = tl.open_lake(f"memory://test-{uuid.uuid4().hex}", create=True)
    assert _count(other) == 0
    with pytest.raises(LakeNotFound):
        tl.open_lake(f"memory://test-{uuid.uuid4().hex}")


def test_lake_not_found_and_already_exists(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(LakeNotFound, match="create"):
        tl.open_lake(missing)
    assert not (missing / "_trajlake").exists()

    lake = tl.init_lake(tmp_path / "new")
    assert [s.operation for s in lake.snapshots()] == ["init"]
    assert set(lake.snapshot().tables) == set(lake.table_names())
    with pytest.raises(LakeAlreadyExists):
        tl.init_lake(tmp_path / "new")
    lake.write([sample_trajectory(0, turns=2)])
    # create=True on an existing lake opens it as it is.
    again = tl.open_lake(tmp_path / "new", create=True)
    assert again.snapshot().snapshot_id == 1
    assert tl.open_lake(f"file://{tmp_path / 'new'}").snapshot().snapshot_id == 1
    with pytest.raises(UnsupportedStorage):
        tl.open_lake("ftp://example.com/lake")


# Schema checks -----------------------------------------------------------------------------


def _labels(n: int = 1) -> pa.Table:
    return records_to_table("labels", [_label(f"l{i}", "unit", 0, task_id="t") for i in range(n)])


def test_commit_with_an_unknown_column_names_it(lake: tl.Lake) -> None:
    bad = _labels().append_column("bogus_column", pa.array([1]))
    with pytest.raises(SchemaMismatch, match="bogus_column"):
        lake.commit({"labels": bad})
    assert lake.snapshot().snapshot_id == 0


def test_commit_with_a_wrong_type_names_the_column(lake: tl.Lake) -> None:
    good = _labels()
    bad = good.set_column(good.schema.get_field_index("reward"), "reward", pa.array(["high"]))
    with pytest.raises(SchemaMismatch, match="reward"):
        lake.commit({"labels": bad})
    missing = good.drop_columns(["details"])
    with pytest.raises(SchemaMismatch, match="details"):
        lake.commit({"labels": missing})
    assert lake.commit({"labels": good}).added == {"labels": 1}


def test_commit_without_the_key_column_names_it(lake: tl.Lake) -> None:
    with pytest.raises(SchemaMismatch, match="label_id"):
        lake.commit({"labels": _labels().drop_columns(["label_id"])})


def test_failed_multi_table_commit_is_invisible(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(0, turns=2)])
    record = CanonicalTrajectory.model_validate(sample_trajectory(1, turns=2))
    tables = trajectories_to_tables([record])
    good = _labels()
    bad_labels = good.set_column(good.schema.get_field_index("reward"), "reward", pa.array(["x"]))
    with pytest.raises(SchemaMismatch):
        lake.commit({**tables, "labels": bad_labels})
    assert lake.snapshot().snapshot_id == 1
    assert _count(lake) == 1
    assert lake.validate().ok
    # The next commit starts from the last snapshot; the failed rows never show up.
    lake.write([sample_trajectory(2, turns=2)])
    ids, problems = snapshot_contents(lake, None)
    assert not problems
    assert ids == {"sample-0-0000000", "sample-0-0000002"}
    assert lake.validate().orphan_versions == {}


# Query results -----------------------------------------------------------------------------


def test_query_result_conversions(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(i, turns=2) for i in range(3)])
    result = lake.sql(
        "select trajectory_id, n_messages, reward, started_at from trajectories "
        "order by trajectory_id"
    )
    assert len(result) == 3
    assert result.columns == ["trajectory_id", "n_messages", "reward", "started_at"]
    arrow = result.to_arrow()
    assert isinstance(arrow, pa.Table)
    assert arrow.column("trajectory_id").to_pylist() == [f"sample-0-000000{i}" for i in range(3)]
    frame = result.to_polars()
    assert isinstance(frame, pl.DataFrame)
    assert frame["n_messages"].to_list() == [6, 6, 6]
    dicts = result.to_dicts()
    assert dicts[0]["trajectory_id"] == "sample-0-0000000"
    assert dicts[0]["started_at"] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert list(result) == dicts
    rows = result.rows()
    assert rows[2][:2] == ("sample-0-0000002", 6)
    assert [tuple(d.values()) for d in dicts] == rows
    relation = result.to_duckdb(duckdb.connect())
    assert relation.aggregate("count(*)").fetchall() == [(3,)]
    empty = lake.sql("select * from trajectories where false")
    assert len(empty) == 0 and empty.rows() == [] and empty.to_polars().height == 0


def test_query_session_is_pinned(lake: tl.Lake) -> None:
    lake.write([sample_trajectory(0, turns=2)])
    with lake.query() as session:
        lake.write([sample_trajectory(1, turns=2)])
        # A session keeps reading the snapshot it was opened at.
        assert session.sql("select count(*) from trajectories").rows() == [(1,)]
        assert session.snapshot.snapshot_id == 1
        batches = session.relation("select * from messages").to_arrow_reader(4)
        assert sum(b.num_rows for b in batches) == 6
    assert _count(lake) == 2
