"""Other engines read the lake's Delta tables at a pinned version and see what trajlake sees."""

from __future__ import annotations

import datetime as dt
from typing import Any

import deltalake
import polars as pl
import pyarrow as pa
import pytest

import trajlake as tl
from trajlake.sample import sample_trajectory
from trajlake.schema import PRIMARY_KEYS

TABLES = ("trajectories", "messages")


def _normalise(value: Any) -> Any:
    """Engine-neutral form of a cell: maps as dicts, lists/structs recursively, UTC times."""
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _normalise(v) for k, v in value}  # a map as Arrow lists it
        return [_normalise(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC) if value.tzinfo else value
    return value


def _sorted_rows(table: str, data: pa.Table) -> list[dict[str, Any]]:
    """Rows as normalised dicts, in primary-key order (engines return rows in any order)."""
    rows = [{k: _normalise(v) for k, v in row.items()} for row in data.to_pylist()]
    key = PRIMARY_KEYS[table]
    return sorted(rows, key=lambda r: tuple(r[k] for k in key))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    """Three commits (with named rewards, tool calls, reasoning), a tag, then compaction."""
    lake = tl.open_lake(tmp_path_factory.mktemp("interop") / "lake", create=True)
    records = []
    for i in range(9):
        record = sample_trajectory(i, turns=2 + i % 3)
        record["rewards"] = {"tests": i / 10, "lint": 1.0}
        records.append(record)
    lake.write(records[:3])
    lake.write(records[3:6])
    lake.tag("pinned")
    lake.write(records[6:])
    lake.maintain()  # compaction rewrites files; the pinned versions must still read the same
    return lake


def _uri(lake: tl.Lake, table: str) -> str:
    return f"{lake.uri}/tables/{table}"


@pytest.mark.parametrize("at", ["pinned", None])
@pytest.mark.parametrize("table", TABLES)
def test_polars_reads_the_pinned_version(lake: tl.Lake, table: str, at: str | None) -> None:
    version = lake.table_version(table, at)
    theirs = pl.scan_delta(_uri(lake, table), version=version).collect()
    ours = lake.sql(f"select * from {table}", at=at)
    assert theirs.columns == ours.columns
    assert theirs.height == len(ours) > 0
    assert _sorted_rows(table, theirs.to_arrow()) == _sorted_rows(table, ours.to_arrow())
    # pl.read_delta is the eager spelling of the same read.
    eager = pl.read_delta(_uri(lake, table), version=version)
    assert eager.height == theirs.height


def test_polars_sees_nested_columns(lake: tl.Lake) -> None:
    version = lake.table_version("messages", "pinned")
    theirs = (
        pl.scan_delta(_uri(lake, "messages"), version=version)
        .filter(pl.col("role") == "assistant")
        .select("trajectory_id", "idx", pl.col("tool_calls").list.first().struct.field("name"))
        .sort("trajectory_id", "idx")
        .collect()
    )
    ours = lake.sql(
        "select trajectory_id, idx, tool_calls[1].name as name from messages "
        "where role = 'assistant' order by trajectory_id, idx",
        at="pinned",
    ).rows()
    assert [tuple(r) for r in theirs.iter_rows()] == ours
    assert {name for _, _, name in ours} >= {"submit"}
    rewards = (
        pl.scan_delta(_uri(lake, "trajectories"), version=lake.table_version("trajectories"))
        .select("trajectory_id", "rewards")
        .sort("trajectory_id")
        .collect()
        .to_arrow()
        .to_pylist()
    )
    assert _normalise(rewards[1]["rewards"]) == {"tests": 0.1, "lint": 1.0}


@pytest.mark.parametrize("at", ["pinned", None])
@pytest.mark.parametrize("table", TABLES)
def test_deltalake_reads_the_pinned_version(lake: tl.Lake, table: str, at: str | None) -> None:
    version = lake.table_version(table, at)
    delta = deltalake.DeltaTable(_uri(lake, table), version=version)
    assert delta.version() == version
    theirs = delta.to_pyarrow_table()
    ours = lake.sql(f"select * from {table}", at=at).to_arrow()
    assert _sorted_rows(table, theirs) == _sorted_rows(table, ours)
    # read_table is trajlake's Arrow path: same rows, and the exact table schema.
    arrow = lake.read_table(table, at=at)
    assert _sorted_rows(table, arrow) == _sorted_rows(table, theirs)
    assert arrow.schema.names == theirs.schema.names
    # The file list trajlake hands to engines is the version's file list.
    assert sorted(lake.table_files(table, at)) == sorted(delta.file_uris())


def test_pinned_version_is_older_than_latest(lake: tl.Lake) -> None:
    for table in TABLES:
        assert lake.table_version(table, "pinned") < lake.table_version(table)
        old = deltalake.DeltaTable(_uri(lake, table), version=lake.table_version(table, "pinned"))
        new = deltalake.DeltaTable(_uri(lake, table))
        assert old.to_pyarrow_table().num_rows < new.to_pyarrow_table().num_rows
    assert lake.sql("select count(*) from trajectories", at="pinned").rows() == [(6,)]


def test_daft_reads_the_pinned_version(lake: tl.Lake) -> None:
    daft = pytest.importorskip("daft")
    version = lake.table_version("trajectories", "pinned")
    frame = daft.read_deltalake(_uri(lake, "trajectories"), version=version)
    theirs = frame.to_arrow()
    ours = lake.sql("select * from trajectories", at="pinned").to_arrow()
    assert _sorted_rows("trajectories", theirs) == _sorted_rows("trajectories", ours)
