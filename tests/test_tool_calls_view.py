"""The `tool_calls` view: each call with its result, error flag, exit code and duration.

Checked against the source files of four harnesses: mini-swe-agent and SWE-agent 0.x (text
actions, observations come back as `user` messages), SWE-agent 1.x function calling (`tool`
messages, `execution_time`), and Claude Code (`tool_result` blocks, `is_error`, `durationMs`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl

DATA = Path(__file__).parent / "data"
MINI = DATA / "mini_swe_agent" / "github_issue.traj.json"
SWE_TEXT = DATA / "swe_agent" / "marshmallow-code__marshmallow-1867.traj"
SWE_FC = DATA / "swe_agent" / "6e44b9__sweagenttestrepo-1c2844.traj"
CLAUDE = DATA / "claude_code" / "marot_spotter" / "tool_heavy.jsonl"


@pytest.fixture
def calls(lake: tl.Lake) -> dict[str, list[dict[str, Any]]]:
    """tool_calls rows by harness, in message order."""
    for path in (MINI, SWE_TEXT, SWE_FC, CLAUDE):
        lake.ingest(path)
    query = (
        "SELECT t.harness, t.source_uri, c.* FROM tool_calls c JOIN trajectories t "
        "USING (trajectory_id) ORDER BY t.source_uri, c.thread, c.idx, c.call_id"
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for row in lake.sql(query).to_dicts():
        out.setdefault(Path(row["source_uri"]).name, []).append(row)
    return out


def test_mini_swe_agent_results_and_exit_codes_are_the_next_user_message(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    source = json.loads(MINI.read_text())
    expected = []
    for i, message in enumerate(source):
        blocks = re.findall(r"```mswea_bash_command\s*\n(.*?)\n```", message["content"], re.S)
        if message["role"] == "assistant" and len(blocks) == 1:
            answer = source[i + 1]["content"] if i + 1 < len(source) else None
            code = re.match(r"\s*<returncode>(-?\d+)</returncode>", answer or "")
            word = re.sub(r"^cd \S+ && ", "", blocks[0].strip()).split()[0]
            expected.append((word, answer, int(code.group(1)) if code else None))
    rows = calls[MINI.name]
    assert [(r["tool"], r["result"], r["exit_code"]) for r in rows] == expected
    assert {r["tool_name"] for r in rows} == {"bash"}
    assert [r["is_error"] for r in rows] == [c not in (0, None) for _, _, c in expected]


def test_swe_agent_text_actions_pair_with_their_observations(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    source = json.loads(SWE_TEXT.read_text())
    history = [e for e in source["history"] if not e.get("is_demo")]
    # Each action's result is the next message of the history: the observation as the model
    # saw it (with SWE-agent's state footer), sent back with role `user`.
    seen = [
        (e["action"].split()[0], history[i + 1]["content"] if i + 1 < len(history) else None)
        for i, e in enumerate(history)
        if e["role"] == "assistant"
    ]
    rows = calls[SWE_TEXT.name]
    assert [r["tool"] for r in rows] == [s["action"].split()[0] for s in source["trajectory"]]
    assert [(r["tool"], r["result"]) for r in rows] == seen
    assert rows[-1]["tool"] == "submit" and rows[-1]["result"] is None


def test_swe_agent_function_calls_have_results_and_durations(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    source = json.loads(SWE_FC.read_text())
    results = {
        e["tool_call_ids"][0]: e["content"] for e in source["history"] if e["role"] == "tool"
    }
    rows = calls[SWE_FC.name]
    assert [r["result"] for r in rows] == [results.get(r["call_id"]) for r in rows]
    durations = [s["execution_time"] * 1000 for s in source["trajectory"]]
    assert [r["duration_ms"] for r in rows] == pytest.approx(durations)
    assert not any(r["is_error"] for r in rows if r["result"] is not None)


def test_claude_code_errors_exit_codes_and_durations_match_the_source(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    lines = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    results: dict[str, tuple[bool, Any]] = {}
    for line in lines:
        content = line.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                used = line.get("toolUseResult")
                duration = used.get("durationMs") if isinstance(used, dict) else None
                results[block["tool_use_id"]] = (bool(block.get("is_error")), duration)
    rows = calls[CLAUDE.name]
    assert {r["call_id"] for r in rows} == set(results)
    for row in rows:
        failed, duration = results[row["call_id"]]
        assert row["is_error"] is failed, row["call_id"]
        if duration is not None:
            assert row["duration_ms"] == duration
    failures = [r for r in rows if r["is_error"] and r["tool_name"] == "Bash"]
    for row in failures:
        code = re.match(r"Exit code (\d+)", row["result"])
        assert row["exit_code"] == (int(code.group(1)) if code else None)


def test_which_tools_fail_most_is_one_query_across_harnesses(
    calls: dict[str, list[dict[str, Any]]], lake: tl.Lake
) -> None:
    query = (
        "SELECT tool, count(*) AS calls, count(*) FILTER (WHERE is_error) AS failures "
        "FROM tool_calls GROUP BY tool HAVING failures > 0 ORDER BY failures DESC, tool"
    )
    failing = {r["tool"]: (r["calls"], r["failures"]) for r in lake.sql(query).to_dicts()}
    every = [r for rows in calls.values() for r in rows]
    for tool, (n, failures) in failing.items():
        assert n == sum(r["tool"] == tool for r in every)
        assert failures == sum(bool(r["is_error"]) and r["tool"] == tool for r in every)
    # Shell commands are counted by program, whichever harness ran them.
    assert "bash" not in failing and "Bash" not in failing
    assert failing  # the sources hold failed commands (exit codes 1 and 2, rejected calls)
