"""The viewer over real rollouts ingested from their native formats (SWE-agent, mini-swe-agent,
OpenHands, Claude Code with a subagent, Inspect): every transcript holds each message once, the
edits the agents made come back as diffs, and the runs page counts what SQL counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trajlake as tl
from tests.conftest import SHARED_CORPUS
from trajlake.view import ViewData

FILES = [
    "01_sweagent_traj/tests/test_data/trajectories/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__c-3.00__install-1/pydicom__pydicom-1458.traj",
    "02_mini_swe_agent/upstream_test_data/github_issue.traj.json",
    "03_openhands/evaluation/benchmarks/multi_swe_bench/examples/output.jsonl",
    "05_coding_cli_sessions/claude_code_jsonl/marot_spotter/test/fixtures/transcripts/tool_heavy.jsonl",
    # A session with two subagent files beside it (`<session>/subagents/agent-*.jsonl`).
    "05_coding_cli_sessions/claude_code_jsonl/marot_spotter/test/fixtures/transcripts/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    "06_eval_frameworks/inspect_ai_logs/tests/log/test_eval_log/log_formats.eval",
]

pytestmark = pytest.mark.skipif(not SHARED_CORPUS.is_dir(), reason="the shared corpus is absent")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> ViewData:
    lake = tl.open_lake(tmp_path_factory.mktemp("corpus") / "lake", create=True)
    present = [SHARED_CORPUS / f for f in FILES if (SHARED_CORPUS / f).is_file()]
    if len(present) < len(FILES):
        pytest.skip("corpus files are missing")
    lake.ingest([str(p) for p in present])
    view = ViewData(lake)
    yield view
    view.close()


def test_every_harness_is_listed(data: ViewData) -> None:
    harness = {f["value"] for f in data.answer("meta", {})["facets"]["harness"]}
    assert {"swe-agent", "mini-swe-agent", "openhands", "claude-code", "inspect_ai"} <= harness
    for name in harness:
        expected = data.store.sql(  # type: ignore[attr-defined]
            "SELECT count(*) FROM trajectories WHERE harness = ?", [name]
        ).rows()[0][0]
        assert data.answer("runs", {"harness": name})["total"] == expected


def test_transcripts_hold_every_message_once(data: ViewData) -> None:
    rows = data.answer("runs", {"limit": "500"})["rows"]
    assert rows
    for row in rows:
        payload = data.answer("trajectory", {"id": row["trajectory_id"]})
        shown = [(t["thread"], m["idx"]) for t in payload["turns"] for m in t["messages"]]
        stored = data.store.sql(  # type: ignore[attr-defined]
            "SELECT thread, idx FROM messages WHERE trajectory_id = ?", [row["trajectory_id"]]
        ).rows()
        assert sorted(shown) == sorted(stored) and len(shown) == len(set(shown))
        assert sum(t["n_messages"] for t in payload["threads"]) == len(stored)
        json.dumps(payload)


def _edits(data: ViewData, harness: str) -> list[dict[str, str]]:
    edits = []
    for row in data.answer("runs", {"harness": harness, "limit": "500"})["rows"]:
        payload = data.answer("trajectory", {"id": row["trajectory_id"]})
        edits += [e for t in payload["turns"] for e in t["edits"]]
    return edits


def test_edits_of_real_agents_are_diffs(data: ViewData) -> None:
    openhands = _edits(data, "openhands")
    assert openhands and {e["kind"] for e in openhands} == {"str_replace"}
    assert all(e["diff"].startswith("--- a/") for e in openhands)
    assert sum("\n@@ " in e["diff"] for e in openhands) >= len(openhands) - 1  # one is a no-op
    claude = _edits(data, "claude-code")
    assert {"str_replace", "write"} & {e["kind"] for e in claude}
    mini = _edits(data, "mini-swe-agent")
    assert [e["kind"] for e in mini] == ["sed"] * len(mini) and mini


def test_subagent_threads_are_marked(data: ViewData) -> None:
    subagents = []
    for row in data.answer("runs", {"harness": "claude-code", "limit": "500"})["rows"]:
        payload = data.answer("trajectory", {"id": row["trajectory_id"]})
        assert payload["threads"][0]["thread"] == "main"
        subagents += [t for t in payload["threads"] if t["thread"] != "main"]
        # Turns list the main thread first, then each other thread's.
        order = [t["thread"] for t in payload["turns"]]
        assert order == sorted(
            order, key=lambda name: [th["thread"] for th in payload["threads"]].index(name)
        )
    assert len(subagents) == 2 and all(t["is_subagent"] for t in subagents)


def test_tool_results_keep_exit_codes_and_errors(data: ViewData) -> None:
    flagged = 0
    for row in data.answer("runs", {"limit": "500"})["rows"]:
        payload = data.answer("trajectory", {"id": row["trajectory_id"]})
        messages = [m for t in payload["turns"] for m in t["messages"]]
        flagged += sum(bool(m["is_error"]) or (m["exit_code"] or 0) != 0 for m in messages)
    stored = data.store.sql(  # type: ignore[attr-defined]
        "SELECT count(*) FROM messages "
        "WHERE coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0"
    ).rows()[0][0]
    assert flagged == stored


def test_file_path_in_corpus_exists() -> None:
    assert all(Path(SHARED_CORPUS / f).is_file() for f in FILES)
