"""Storage below query below the user API: what each layer may know of the others.

`trajlake.lake` is storage only; `trajlake.query` finds a store's DuckDB database without the
store knowing DuckDB; `trajlake.api.Lake` (what `open_lake` returns) composes them.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import duckdb
import pytest

import trajlake as tl
import trajlake.lake
from trajlake.api import Lake
from trajlake.lake import LakeStore, open_store
from trajlake.query import open_session, sql
from trajlake.sample import sample_trajectories

_STORAGE_ONLY = """
import sys
from trajlake.lake import open_store
from trajlake.sample import sample_trajectories
store = open_store(sys.argv[1], create=True)
store.write(list(sample_trajectories(4)))
store.tag("t")
assert store.read_table("trajectories").num_rows == 4
store.maintain()
assert store.validate().ok
above = ("trajlake.query", "trajlake.ingest", "trajlake.export", "trajlake.api",
         "trajlake.credit", "trajlake.value", "duckdb")
print(sorted(m for m in sys.modules if m.startswith(above)))
"""


def test_storage_runs_without_loading_any_layer_above_it(tmp_path: Path) -> None:
    """Writing, tagging, reading, maintaining and validating never import query, ingest,
    export or DuckDB (not even lazily), so storage cannot depend on its callers."""
    out = subprocess.run(
        [sys.executable, "-c", _STORAGE_ONLY, str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_the_user_facing_lake_is_the_store_plus_the_layers_above(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    assert type(lake) is Lake and isinstance(lake, LakeStore)
    assert repr(lake) == f"Lake({lake.uri!r})"
    store = open_store(tmp_path / "lake")
    assert type(store) is LakeStore and repr(store) == f"LakeStore({store.uri!r})"
    assert not hasattr(store, "sql") and not hasattr(store, "ingest")
    assert not hasattr(trajlake.lake, "Lake") and not hasattr(trajlake.lake, "open_lake")
    assert type(tl.init_lake(tmp_path / "other")) is Lake


def test_query_functions_take_a_bare_store(tmp_path: Path) -> None:
    store = open_store(tmp_path / "lake", create=True)
    store.write(list(sample_trajectories(6)))
    task = store.read_table("trajectories", columns=["task_id"]).column("task_id")[0].as_py()
    query = "SELECT count(*) FROM trajectories WHERE task_id = ?"
    expected = sum(1 for t in sample_trajectories(6) if t["task_id"] == task)
    assert sql(store, query, [task]).rows() == [(expected,)]
    assert sql(store, "SELECT count(*) FROM trajectories", at=0).rows() == [(0,)]
    with open_session(store, at="latest") as session:
        assert session.sql("SELECT count(*) FROM outcomes").rows() == [(6,)]
    # The user-facing lake on the same folder answers the same.
    assert tl.open_lake(tmp_path / "lake").sql(query, [task]).rows() == [(expected,)]


def test_closing_the_lake_closes_its_database_and_the_lake_stays_usable(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(list(sample_trajectories(3)))
    database = lake.duckdb()
    assert lake.duckdb() is database  # one database per lake, reused by every query
    lake.close()
    with pytest.raises(duckdb.ConnectionException):
        database.execute("SELECT 1")
    assert lake.duckdb() is not database
    assert lake.sql("SELECT count(*) FROM trajectories").rows() == [(3,)]


def test_a_dropped_store_takes_its_database_with_it(tmp_path: Path) -> None:
    """The query layer's per-store cache holds the store weakly: it never keeps one alive."""
    store = open_store(tmp_path / "lake", create=True)
    assert sql(store, "SELECT count(*) FROM trajectories").rows() == [(0,)]
    gone = weakref.ref(store)
    del store
    gc.collect()
    assert gone() is None


def test_a_full_maintenance_makes_the_views_rebuild(tmp_path: Path) -> None:
    """After a vacuum the cached views may name deleted files; the store says so by its
    `files_epoch`, and the next query builds them again."""
    lake = tl.open_lake(tmp_path / "lake", create=True)
    for start in range(0, 6, 2):
        lake.write(list(sample_trajectories(2, start=start)))
    assert lake.sql("SELECT count(*) FROM messages").rows()[0][0] > 0
    epoch = lake.files_epoch
    lake.maintain(incremental=True)
    assert lake.files_epoch == epoch  # incremental maintenance vacuums nothing
    lake.maintain()
    assert lake.files_epoch == epoch + 1
    assert lake.sql("SELECT count(*) FROM trajectories").rows() == [(6,)]
