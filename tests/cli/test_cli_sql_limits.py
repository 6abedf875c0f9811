"""`trajlake sql` stops on --timeout and on Ctrl-C with a clear message, and takes DuckDB's
memory and thread limits."""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from click.testing import Result

import trajlake as tl
from trajlake.sample import sample_trajectory

Run = Callable[..., Result]
RUNAWAY = "SELECT sum(a.range * b.range) AS s FROM range(100000000) a, range(100000) b"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cli-limits") / "lake"
    tl.open_lake(path, create=True).write([sample_trajectory(i, turns=2) for i in range(3)])
    return str(path)


def test_timeout_stops_the_query_with_one_clear_line(run: Run, lake: str) -> None:
    start = time.monotonic()
    result = run("sql", RUNAWAY, "--lake", lake, "--timeout", "0.5", code=1)
    assert time.monotonic() - start < 10
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: query stopped after its 0.5 s timeout")
    assert "--timeout SECONDS" in line


def test_timeout_zero_means_no_limit_and_the_default_is_shown(run: Run, lake: str) -> None:
    rows = json.loads(
        run(
            "sql",
            "SELECT count(*) AS n FROM trajectories",
            "--lake",
            lake,
            "--timeout",
            "0",
            "-o",
            "json",
        ).stdout
    )
    assert rows == [{"n": 3}]
    help_text = " ".join(run("sql", "--help").stdout.split())
    assert "--timeout SECONDS" in help_text and "default: 300" in help_text
    assert "--memory-limit SIZE" in help_text and "--threads" in help_text


def test_memory_limit_and_threads_reach_duckdb(run: Run, lake: str) -> None:
    query = "SELECT current_setting('memory_limit') AS m, current_setting('threads') AS t"
    out = run(
        "sql", query, "--lake", lake, "--memory-limit", "300MB", "--threads", "1", "-o", "json"
    ).stdout
    assert json.loads(out) == [{"m": "286.1 MiB", "t": 1}]


@pytest.mark.parametrize("limit", ["lots", "1KB", "-3GB"])
def test_bad_memory_limits_are_usage_errors(run: Run, lake: str, limit: str) -> None:
    result = run("sql", "SELECT 1", "--lake", lake, "--memory-limit", limit, code=2)
    assert "--memory-limit" in result.stderr and "Traceback" not in result.stderr


def test_ctrl_c_stops_a_running_query(lake: str) -> None:
    command = [sys.executable, "-m", "trajlake", "--log-level", "DEBUG", "sql", RUNAWAY,
               "--lake", lake]  # fmt: skip
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert child.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in child.stderr or ()])
    reader.start()
    try:
        # SIGINT once the query runs (not while Python starts), or after 20 s regardless.
        deadline = time.monotonic() + 20
        started = False
        while not started and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                started = "query started" in lines.get(timeout=deadline - time.monotonic())
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        code = child.wait(timeout=20)
        elapsed = time.monotonic() - sent
    finally:
        child.kill()
        child.communicate()
        reader.join()
    rest = "".join(lines.queue)
    assert started and code == 130, rest
    assert elapsed < 5
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1] == "interrupted"
