"""`trajlake view` latency over a 100,000-trajectory lake, per endpoint, over real HTTP.

Target (issue: the runs page over 100,000 trajectories answers in under 300 ms per page). The
lake is written directly as Arrow tables (few messages per rollout, labels for a tenth, scores
for all, one 500-turn trajectory). Each endpoint's first call (the very first, meta, builds the
snapshot's run table; a where's ids are cached after its first call) is reported apart from the
median of the next calls; the bare DuckDB
`SELECT count(*)` over the same Parquet files (with the same predicate) is the baseline.

Run: `python benchmarks/bench_view.py [--trajectories 100000] [--repeat 15]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import statistics
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

import trajlake as tl
from trajlake.records import rows_for_table
from trajlake.view import view_in_background

HARNESSES = ("swe-agent", "openhands", "claude-code", "mini-swe-agent")
MODELS = ("qwen3-coder-30b", "gpt-5-mini", "claude-sonnet")
LONG = "long-500"
WHERE = "n_turns > 20 AND harness <> 'openhands'"


def build_lake(root: Path, n: int) -> tl.Lake:
    """A lake of `n` short rollouts plus one of 500 turns, labels and scores."""
    lake = tl.open_lake(root / "lake", create=True)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    trajectories, messages, labels, scores = [], [], [], []
    for i in range(n):
        tid = f"t{i:07d}"
        trajectories.append(
            {
                "trajectory_id": tid,
                "task_id": f"task-{i % 5000:05d}",
                "harness": HARNESSES[i % 4],
                "policy_model": MODELS[i % 3],
                "generation": i % 3,
                "run_id": f"run-{i % 40}",
                "status": "completed",
                "resolved": i % 3 == 0,
                "reward": float(i % 3 == 0),
                "n_turns": 5 + i % 40,
                "n_messages": 3,
                "n_tool_calls": 1,
                "total_tokens": 1000 + i % 9000,
                "started_at": start + dt.timedelta(seconds=i),
            }
        )
        messages += [
            {"trajectory_id": tid, "idx": 0, "role": "user", "content": f"task {i}"},
            {
                "trajectory_id": tid,
                "idx": 1,
                "turn": 0,
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "bash", "arguments": '{"command": "ls"}'}],
            },
            {
                "trajectory_id": tid,
                "idx": 2,
                "turn": 0,
                "role": "tool",
                "tool_call_id": "c",
                "content": "a.py",
            },
        ]
        if i % 10 == 0:
            labels.append(
                {
                    "label_id": f"l{i}",
                    "trajectory_id": tid,
                    "resolved": i % 20 == 0,
                    "source": "verifier",
                }
            )
        scores.append({"model_id": "vm", "trajectory_id": tid, "score": (i * 7919 % 1000) / 1000})
    trajectories.append(
        {
            "trajectory_id": LONG,
            "task_id": "task-00000",
            "harness": "swe-agent",
            "n_turns": 500,
            "started_at": start,
        }
    )
    messages.append({"trajectory_id": LONG, "idx": 0, "role": "user", "content": "long task"})
    for turn in range(500):
        arguments = json.dumps({"command": f"python step_{turn}.py --flag"})
        messages += [
            {
                "trajectory_id": LONG,
                "idx": 1 + 2 * turn,
                "turn": turn,
                "role": "assistant",
                "content": f"Step {turn}: " + "thinking " * 40,
                "prompt_tokens": 1000 + turn,
                "completion_tokens": 50,
                "tool_calls": [{"id": f"c{turn}", "name": "bash", "arguments": arguments}],
            },
            {
                "trajectory_id": LONG,
                "idx": 2 + 2 * turn,
                "turn": turn,
                "role": "tool",
                "tool_call_id": f"c{turn}",
                "content": "output line\n" * 30,
                "exit_code": int(turn % 7 == 0),
            },
        ]
    lake.commit(
        {
            "trajectories": rows_for_table("trajectories", trajectories),
            "messages": rows_for_table("messages", messages),
        }
    )
    lake.commit(
        {"labels": rows_for_table("labels", labels), "scores": rows_for_table("scores", scores)}
    )
    return lake


def _get(base: str, path: str) -> tuple[int, bytes]:
    url = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def timed(call: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(first call ms, median of the next `repeat` calls ms)."""
    t0 = time.perf_counter()
    call()
    first = (time.perf_counter() - t0) * 1000
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return first, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        lake = build_lake(Path(tmp), args.trajectories)
        print(f"built {args.trajectories + 1} trajectories in {time.perf_counter() - t0:.1f} s")
        files = [f.removeprefix("file://") for f in lake.table_files("trajectories")]
        bare = duckdb.connect()
        source = f"read_parquet({files!r})"
        _, count_ms = timed(
            lambda: bare.sql(f"SELECT count(*) FROM {source}").fetchall(), args.repeat
        )
        _, where_ms = timed(
            lambda: bare.sql(f"SELECT count(*) FROM {source} WHERE {WHERE}").fetchall(), args.repeat
        )
        print(f"baseline: bare DuckDB count(*) {count_ms:.1f} ms; with the where {where_ms:.1f} ms")
        q = urllib.parse.quote
        cases = {
            "meta": "/api/meta",
            "runs (started_at desc)": "/api/runs",
            "runs (n_turns asc, page 100)": "/api/runs?sort=n_turns&order=asc&offset=5000&limit=50",
            "runs (total_tokens desc)": "/api/runs?sort=total_tokens",
            "runs (task_id asc, limit 500)": "/api/runs?sort=task_id&order=asc&limit=500",
            "runs (harness + resolved)": "/api/runs?harness=swe-agent&resolved=true",
            "runs (where)": f"/api/runs?where={q(WHERE)}",
            "runs (where, sorted by reward)": f"/api/runs?where={q(WHERE)}&sort=reward",
            "runs (q substring)": "/api/runs?q=task-0042",
            "groups (harness)": "/api/groups?by=harness",
            "groups (task_id, where)": f"/api/groups?by=task_id&where={q(WHERE)}",
            "tasks": "/api/tasks",
            "candidates (20 rollouts)": "/api/candidates?task_id=task-00042",
            f"trajectory ({LONG}, 500 turns)": f"/api/trajectory?id={LONG}",
        }
        with view_in_background(lake) as url:
            print(f"{'endpoint':44} {'first ms':>9} {'median ms':>10} {'÷ count(*)':>11}")
            for name, path in cases.items():
                t0 = time.perf_counter()
                status, body = _get(url, path)
                first = (time.perf_counter() - t0) * 1000
                assert status == 200, (name, body[:300])
                _, median = timed(lambda p=path: _get(url, p), args.repeat)  # type: ignore[misc]
                print(f"{name:44} {first:9.1f} {median:10.1f} {median / count_ms:10.1f}x")
            status, body = _get(url, f"/api/trajectory?id={LONG}")
            print(f"trajectory payload: {len(body) / 1e6:.2f} MB")
        print("load average (1, 5, 15 min): " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
