"""Lake queries have limits: a statement timeout, Ctrl-C, a memory limit, bounded threads, and a
spill directory inside the lake's private area, so nothing outside the lake becomes readable."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

import trajlake as tl
from trajlake.errors import QueryOutOfMemory, QueryTimeout, TrajlakeError
from trajlake.sample import sample_trajectory

RUNAWAY = "SELECT sum(a.range * b.range) AS s FROM range(100000000) a, range(100000) b"
"""10^13 rows: hours of work, so only a limit or an interrupt ends it."""
COUNT = "SELECT count(*) AS n FROM trajectories"
SORT = (
    "SELECT count(*), min(h), max(h) FROM (SELECT md5(range::VARCHAR) AS h FROM range(600000) "
    "ORDER BY h LIMIT 599999)"
)
"""A sort of ~50 MB of strings: more than a 40 MB limit holds, so it spills."""


@pytest.fixture(scope="module")
def lake_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("limits") / "lake"
    tl.open_lake(path, create=True).write([sample_trajectory(i, turns=2) for i in range(2)])
    return path


@pytest.fixture
def lake(lake_path: Path) -> tl.Lake:
    """A fresh Lake object (its own DuckDB database) on the shared lake."""
    return tl.open_lake(lake_path)


def _spill_dirs(lake_path: Path) -> list[Path]:
    return sorted((lake_path / "_trajlake").glob("sqltmp-*"))


# Timeout ---------------------------------------------------------------------------------------


def test_timeout_stops_a_runaway_query_and_the_lake_stays_usable(lake: tl.Lake) -> None:
    start = time.monotonic()
    with pytest.raises(QueryTimeout, match=r"0\.5 s.*timeout") as caught:
        lake.sql(RUNAWAY, timeout=0.5)
    assert time.monotonic() - start < 5
    assert "timeout=" in str(caught.value) and "--timeout" in str(caught.value)
    assert lake.sql(COUNT).rows() == [(2,)]


def test_timeout_bounds_session_queries_and_relations(lake: tl.Lake) -> None:
    with lake.query(timeout=0.5) as session:
        start = time.monotonic()
        with pytest.raises(QueryTimeout):
            session.sql(RUNAWAY)
        assert time.monotonic() - start < 5
        assert session.sql(COUNT).rows() == [(2,)]
        # A relation is lazy: the caller runs it, and the watchdog interrupts it there.
        relation = session.relation(RUNAWAY)
        start = time.monotonic()
        with pytest.raises(duckdb.InterruptException):
            relation.to_arrow_table()
        assert time.monotonic() - start < 5
        with pytest.raises(duckdb.InterruptException):  # a reader runs up to its first batch
            session.relation(RUNAWAY, own_cursor=True).to_arrow_reader().read_all()
        assert session.sql(COUNT).rows() == [(2,)]


def test_a_query_that_finishes_in_time_returns_its_rows(lake: tl.Lake) -> None:
    assert lake.sql(COUNT, timeout=30).rows() == [(2,)]
    with lake.query(timeout=30) as session:
        assert session.relation(COUNT).fetchall() == [(2,)]


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf")])
def test_bad_timeouts_are_refused(lake: tl.Lake, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        lake.sql(COUNT, timeout=timeout)


# Ctrl-C ----------------------------------------------------------------------------------------

_SIGINT_CHILD = """
import os, signal, sys, threading, time
import trajlake as tl
lake = tl.open_lake(sys.argv[1])
lake.sql("SELECT 1")
for how in ("lake.sql", "session.sql"):
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        if how == "lake.sql":
            lake.sql(sys.argv[2])
        else:
            with lake.query() as session:
                session.sql(sys.argv[2])
    except KeyboardInterrupt:
        print(how, "KeyboardInterrupt", round(time.monotonic() - start, 2), flush=True)
    print(how, "after", lake.sql("SELECT count(*) FROM trajectories").rows(), flush=True)
"""


def test_ctrl_c_reaches_the_python_caller_promptly(lake_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SIGINT_CHILD, str(lake_path), RUNAWAY],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["lake.sql", "KeyboardInterrupt"],
        ["lake.sql", "after"],
        ["session.sql", "KeyboardInterrupt"],
        ["session.sql", "after"],
    ], done.stdout + done.stderr
    for line in (lines[0], lines[2]):
        assert float(line.split()[2]) < 5, line  # 1 s until the signal, then prompt
    assert lines[1].endswith("[(2,)]") and lines[3].endswith("[(2,)]")


# Memory, threads and the spill directory -------------------------------------------------------


def test_default_limits(lake: tl.Lake, lake_path: Path) -> None:
    settings = lake.sql(
        "SELECT current_setting('memory_limit') AS memory, current_setting('threads') AS threads,"
        " current_setting('temp_directory') AS temp,"
        " current_setting('max_temp_directory_size') AS temp_size"
    ).to_dicts()[0]
    memory_gib = float(settings["memory"].split()[0]) * (
        1 if settings["memory"].endswith("GiB") else 1 / 1024
    )
    assert 0 < memory_gib <= 4.0
    assert 1 <= int(settings["threads"]) <= 8
    assert settings["temp"].startswith(str(lake_path / "_trajlake" / "sqltmp-"))
    assert "90%" not in settings["temp_size"]


def test_custom_limits_apply_to_their_query_only(lake: tl.Lake) -> None:
    memory = "SELECT current_setting('memory_limit') AS m, current_setting('threads') AS t"
    assert lake.sql(memory, memory_limit="300MB", threads=1).rows() == [("286.1 MiB", 1)]
    assert lake.sql(memory, memory_limit=256 * 2**20).rows()[0][0] == "256.0 MiB"
    assert lake.sql(memory).rows()[0] != ("286.1 MiB", 1)


@pytest.mark.parametrize("limit", ["lots", "-1GB", "0", "12 parsecs", 0, 2**20])
def test_bad_memory_limits_are_refused(lake: tl.Lake, limit: object) -> None:
    with pytest.raises(ValueError, match="memory_limit"):
        lake.sql(COUNT, memory_limit=limit)  # type: ignore[arg-type]


def test_files_outside_the_lake_temp_folders_included_cannot_be_read(
    lake_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DuckDB's default temp directory is `<cwd>/.tmp`, and a temp directory is readable through
    # SQL even with external access off: none may sit outside the lake.
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret.csv").write_text("password\nhunter2\n")
    system_tmp = Path(tempfile.mkdtemp(prefix="trajlake-test-"))
    (system_tmp / "secret.csv").write_text("password\nhunter2\n")
    (Path(tempfile.gettempdir()) / f"trajlake-test-{os.getpid()}.csv").write_text("a\n1\n")
    lake = tl.open_lake(lake_path)
    lake.sql(COUNT)  # the database exists, with its temp settings, before the probes
    try:
        for path in [
            ".tmp/secret.csv",
            f"{tmp_path}/.tmp/secret.csv",
            f"{system_tmp}/secret.csv",
            f"{tempfile.gettempdir()}/trajlake-test-{os.getpid()}.csv",
        ]:
            for reader in ("read_csv", "read_text", "read_blob", "read_parquet", "read_json"):
                with pytest.raises(TrajlakeError, match=r"(?i)permission|access"):
                    lake.sql(f"SELECT * FROM {reader}('{path}')")
            with pytest.raises(TrajlakeError):
                lake.sql(f"SELECT * FROM '{path}'")
        with pytest.raises(TrajlakeError):
            lake.sql(f"SELECT * FROM glob('{tmp_path}/.tmp/*')")
    finally:
        (Path(tempfile.gettempdir()) / f"trajlake-test-{os.getpid()}.csv").unlink()
    assert lake.sql(COUNT).rows() == [(2,)]


_MEMORY_CHILD = """
import json, resource, sys
import trajlake as tl
from trajlake.errors import QueryOutOfMemory
lake = tl.open_lake(sys.argv[1])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    lake.sql(sys.argv[2], memory_limit=sys.argv[3], threads=1)
    outcome = "finished"
except QueryOutOfMemory as e:
    outcome = str(e)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"outcome": outcome, "base_mib": base / 1024, "peak_mib": peak / 1024}))
"""


def _in_child(lake_path: Path, query: str, limit: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(lake_path), query, limit],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_query_over_the_memory_limit_fails_clearly_without_growing(lake_path: Path) -> None:
    # About 1.5 GB of strings gathered into one list: a result DuckDB cannot spill.
    query = "SELECT len(list(md5(range::VARCHAR))) FROM range(30000000)"
    child = _in_child(lake_path, query, "200MB")
    outcome = str(child["outcome"])
    assert "memory" in outcome and "190.7 MiB" in outcome, outcome
    assert "memory_limit=" in outcome and "--memory-limit" in outcome
    growth = float(str(child["peak_mib"])) - float(str(child["base_mib"]))
    assert growth < 400, child  # the limit plus allocator slack, not the 1.5 GB it asked for


def test_a_sort_over_the_memory_limit_spills_inside_the_lake(lake_path: Path) -> None:
    before = _spill_dirs(lake_path)
    child = _in_child(lake_path, SORT, "40MB")
    assert child["outcome"] == "finished", child
    growth = float(str(child["peak_mib"])) - float(str(child["base_mib"]))
    assert growth < 400, child
    # Its spill directory went away with its database.
    assert _spill_dirs(lake_path) == before


def test_spill_directory_is_inside_the_lake_and_removed_on_close(
    lake: tl.Lake, lake_path: Path
) -> None:
    with lake.query(memory_limit="40MB", threads=1) as session:
        assert session.sql(SORT).rows()[0][0] == 599999
        (spill,) = [p for p in _spill_dirs(lake_path) if os.getpid() == int(p.name.split("-")[-2])]
        assert str(spill) == session.sql("SELECT current_setting('temp_directory')").rows()[0][0]
    assert not spill.exists()


def test_stale_spill_directories_of_dead_processes_are_removed(lake_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())
    stale = lake_path / "_trajlake" / f"sqltmp-{host}-{dead.pid}-0123abcd"
    stale.mkdir()
    (stale / "duckdb_temp_storage_S32K-0.tmp").write_bytes(b"x" * 1000)
    live = lake_path / "_trajlake" / f"sqltmp-{host}-{os.getppid()}-0123abcd"
    live.mkdir()
    tl.open_lake(lake_path).sql(COUNT)
    assert not stale.exists()
    assert live.exists()  # a live process's directory is left alone
    live.rmdir()


def test_the_memory_error_names_the_limit(lake: tl.Lake) -> None:
    with pytest.raises(QueryOutOfMemory, match=r"64\.0 MiB"):
        lake.sql(
            "SELECT len(list(md5(range::VARCHAR))) FROM range(5000000)",
            memory_limit="64MiB",
            threads=1,
        )


def test_module_docs_name_the_defaults() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    section = text.split("## SQL: timeouts, interruption, memory", 1)[1].split("\n## ", 1)[0]
    for needle in ("--timeout", "300", "memory_limit", "4 GiB", "threads", "_trajlake/sqltmp-"):
        assert needle in section, needle
