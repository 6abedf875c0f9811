"""OpenHands adapter: eval output, event lists, a file-store session and resolver output,
each checked against its own JSON."""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import read_head
from trajlake.ingest.openhands import OpenHandsAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "openhands"
TRAJS = sorted((DATA / "trajs").glob("*.json"))
RESOLVER = DATA / "resolver" / "output.jsonl"
SESSION = DATA / "sessions" / "63b4315947a049e2b7a51249b3d4fcc3"
EVAL = SHARED_CORPUS / "03_openhands/evaluation/benchmarks/multi_swe_bench/examples/output.jsonl"
needs_corpus = pytest.mark.skipif(not EVAL.exists(), reason="shared corpus not available")
# Events that are UI state, not messages (see trajlake.ingest._openhands_parts).
SKIPPED = {"change_agent_state", "agent_state_changed", "recall", "null"}


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(OpenHandsAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _read(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def _kind(event: dict[str, Any]) -> str:
    return str(event.get("action") or event.get("observation"))


def _check_events(record: CanonicalTrajectory, events: list[dict[str, Any]]) -> None:
    """Counts, call ids and pairing of a trajectory against the events it came from."""
    actions = [e for e in events if "tool_call_metadata" in e and "action" in e]
    responses = {e["tool_call_metadata"]["model_response"]["id"] for e in actions}
    kept = [e for e in events if _kind(e) not in SKIPPED]
    assistants = [m for m in record.messages if m.role == "assistant"]
    plain = [e for e in kept if e.get("action") == "message" and e.get("source") == "agent"]
    assert len(assistants) == len(responses) + len(plain)
    calls = [c for m in assistants for c in m.tool_calls or []]
    assert [c.id for c in calls] == [e["tool_call_metadata"]["tool_call_id"] for e in actions]
    assert [c.name for c in calls] == [e["tool_call_metadata"]["function_name"] for e in actions]
    # Messages are the non-UI events, minus the extra actions of a multi-call response.
    assert len(record.messages) == len(kept) - (len(actions) - len(responses))
    results = [m for m in record.messages if m.role == "tool"]
    assert len(results) == sum(1 for e in kept if "observation" in e and "cause" in e)
    assert {m.tool_call_id for m in results} <= {c.id for c in calls}
    expected = {}
    for e in actions:
        usage = e["tool_call_metadata"]["model_response"]["usage"]
        expected[e["tool_call_metadata"]["model_response"]["id"]] = usage
    assert sum(m.prompt_tokens or 0 for m in assistants) == sum(
        u["prompt_tokens"] for u in expected.values()
    )
    assert sum(m.completion_tokens or 0 for m in assistants) == sum(
        u["completion_tokens"] for u in expected.values()
    )


@needs_corpus
def test_eval_output_matches_history_and_metrics() -> None:
    lines = [json.loads(line) for line in EVAL.read_text().splitlines()]
    records = _records(EVAL)
    assert [r.task_id for r in records] == [line["instance_id"] for line in lines]
    for record, line in zip(records, lines, strict=True):
        history, metrics, meta = line["history"], line["metrics"], line["metadata"]
        _check_events(record, history)
        # Per-call usage comes from metrics.token_usages, matched by response id.
        usages = metrics["token_usages"]
        assistants = [m for m in record.messages if m.role == "assistant"]
        assert sum(m.prompt_tokens or 0 for m in assistants) == sum(
            u["prompt_tokens"] for u in usages
        )
        assert sum(m.completion_tokens or 0 for m in assistants) == sum(
            u["completion_tokens"] for u in usages
        )
        assert record.prompt_tokens == metrics["accumulated_token_usage"]["prompt_tokens"]
        assert record.completion_tokens == metrics["accumulated_token_usage"]["completion_tokens"]
        system = record.messages[0]
        assert (system.role, system.content) == ("system", history[0]["args"]["content"])
        assert record.tools == history[0]["args"]["tools"]
        assert record.harness == "openhands"
        assert record.harness_version == history[0]["args"]["openhands_version"]
        assert record.policy_model == meta["llm_config"]["model"]
        assert record.run_id == posixpath.basename(meta["eval_output_dir"])
        start = dt.datetime.fromisoformat(meta["start_time"]).replace(tzinfo=dt.UTC)
        assert record.started_at == start
        assert record.final_output == line["test_result"]["git_patch"]
        assert record.resolved is None and record.outcome_source is None  # no report merged in
        assert record.cost_usd is None  # 0.0 with no priced call: unknown, not free
        # Exit codes of shell results come from extras.metadata.exit_code.
        codes = [
            e["extras"]["metadata"]["exit_code"] for e in history if e.get("observation") == "run"
        ]
        assert [m.exit_code for m in record.messages if m.name == "execute_bash"] == codes
    statuses = [(r.status, r.exit_reason) for r in records]
    assert statuses[:2] == [("completed", "finish"), ("completed", "finish")]
    assert statuses[2] == ("truncated", lines[2]["error"])
    # An error observation that answers no action is shown to the model as a user message.
    errors = [m for m in records[1].messages if m.is_error]
    assert [(m.role, m.tool_call_id) for m in errors] == [("user", None)]


def test_event_lists_match_their_events() -> None:
    for path in TRAJS:
        events = json.loads(path.read_text())
        (record,) = _records(path)
        _check_events(record, events)
        assert record.task_id is None and record.resolved is None
        assert record.attrs is not None
        skipped = Counter(_kind(e) for e in events if _kind(e) in SKIPPED)
        assert sum(record.attrs["skipped_events"].values()) == sum(skipped.values())


def test_gui_session_ends_awaiting_input() -> None:
    (record,) = _records(DATA / "trajs" / "basic_gui_mode.json")
    assert (record.status, record.exit_reason) == (None, "awaiting_user_input")
    assert [m.role for m in record.messages][:3] == ["user", "assistant", "tool"]
    shell = next(m for m in record.messages if m.tool_call_id == "toolu_01DwihWr4ooPZS1CGTLAWrFP")
    assert shell.exit_code == -1 and shell.is_error is False  # still running, not a failure
    first = record.messages[1]
    assert first.tool_calls is not None
    assert json.loads(first.tool_calls[0].arguments or "") == {
        "command": "mkdir -p /workspace/todo-app"
    }
    assert first.cached_tokens == 0 and first.prompt_tokens == 3439
    assert record.started_at == dt.datetime(2025, 1, 20, 20, 29, 13, 519638, dt.UTC)


def test_session_folder_reads_events_in_numeric_order() -> None:
    meta = json.loads((SESSION / "metadata.json").read_text())
    (record,) = _records(SESSION / "metadata.json")
    ids = [m.attrs["event_id"] for m in record.messages if m.attrs]
    assert ids == [1, 4, 8, 9, 10, 11, 12]  # 10.json after 9.json, not after 1.json
    assert [m.role for m in record.messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert record.messages[1].content == "Flip a coin!"
    assert record.policy_model == meta["llm_model"]
    assert record.cost_usd == pytest.approx(meta["accumulated_cost"])
    assert (record.prompt_tokens, record.completion_tokens, record.total_tokens) == (
        meta["prompt_tokens"], meta["completion_tokens"], meta["total_tokens"],
    )  # fmt: skip
    # The per-call usage inside the events adds up to the session's totals.
    assistants = [m for m in record.messages if m.role == "assistant"]
    assert sum(m.prompt_tokens or 0 for m in assistants) == meta["prompt_tokens"]
    assert sum(m.completion_tokens or 0 for m in assistants) == meta["completion_tokens"]
    assert record.final_output == "The coin flip result is: Heads"
    assert (record.status, record.harness_version) == ("completed", "0.48.0")
    assert record.attrs is not None and record.attrs["title"] == "Coin Flip Simulation"


def test_event_files_are_companions_of_their_metadata() -> None:
    adapter = OpenHandsAdapter()
    event = SourceFile(str(SESSION / "events" / "3.json"), 10)
    owner = str(SESSION / "metadata.json")
    assert adapter.companion_of(event, frozenset({owner, event.uri})) == owner
    assert adapter.companion_of(event, frozenset({event.uri})) is None
    (bad,) = _read(SESSION / "events" / "3.json")  # alone: a pointer to the session file
    assert isinstance(bad, BadRecord) and "metadata.json" in bad.error


def test_resolver_output_has_issue_ids_and_success() -> None:
    lines = [json.loads(line) for line in RESOLVER.read_text().splitlines()]
    records = _records(RESOLVER)
    for record, line in zip(records, lines, strict=True):
        issue = line["issue"]
        assert record.task_id == f"{issue['owner']}/{issue['repo']}#{issue['number']}"
        assert (record.resolved, record.outcome_source) == (line["success"], "openhands-resolver")
        assert record.final_output == line["git_patch"]
        assert record.cost_usd == pytest.approx(line["metrics"]["accumulated_cost"])
        actions = [e for e in line["history"] if "action" in e and e["action"] != "message"]
        calls = [c for m in record.messages for c in m.tool_calls or []]
        assert [c.name for c in calls] == [e["action"] for e in actions]
        results = [m for m in record.messages if m.role == "tool"]
        assert len(results) == sum(1 for e in line["history"] if "observation" in e)
        assert record.messages[0].role == "user"
        assert record.messages[0].content == line["history"][0]["content"]
    first = records[0]
    call = first.messages[1].tool_calls
    assert call is not None and json.loads(call[0].arguments or "")["command"] == "touch LICENSE"
    assert first.messages[1].content == lines[0]["history"][1]["thought"]
    assert first.messages[2].exit_code == 0 and first.messages[2].name == "run"


def test_bad_line_is_quarantined_and_the_rest_kept(tmp_path: Path) -> None:
    good = RESOLVER.read_bytes().splitlines(keepends=True)
    path = tmp_path / "output.jsonl"
    path.write_bytes(good[0] + b'{"issue": {"owner": "x"}, "history": [\n' + good[1] + b"[1]\n")
    items = _read(path)
    assert [type(i).__name__ for i in items] == [
        "ParsedTrajectory", "BadRecord", "ParsedTrajectory", "BadRecord",
    ]  # fmt: skip
    assert [i.line for i in items if isinstance(i, BadRecord)] == [2, 4]


def test_sniff_claims_only_openhands_files() -> None:
    adapter = OpenHandsAdapter()

    def score(path: Path) -> float:
        source = SourceFile(str(path), os.path.getsize(path))
        return adapter.sniff(source, read_head(source))

    for path in [*TRAJS, RESOLVER, SESSION / "metadata.json"]:
        assert score(path) >= 0.9, path
    for path in [DATA / "LICENSE", DATA / "SOURCE.txt", SESSION / "events" / "1.json"]:
        assert score(path) == 0.0, path
    others = [
        p
        for p in SHARED_CORPUS.glob("*/**/*")
        if p.is_file() and "03_openhands" not in p.parts and p.stat().st_size < 5_000_000
    ]
    assert [p for p in others if score(p) > 0.0] == []
    if EVAL.exists():
        assert score(EVAL) >= 0.9
        for path in (EVAL.parent / "config.json", EVAL.parent / "patch.jsonl"):
            assert score(path) == 0.0


def test_lake_ingest_of_the_folder(lake: tl.Lake, tmp_path: Path) -> None:
    folder = tmp_path / "openhands"
    shutil.copytree(DATA, folder)
    report = lake.ingest(folder, redact=False)
    assert report.files_companion == 14  # the session's event files
    assert (report.added, report.quarantined) == (6, 0)  # 3 event lists, 2 resolver, 1 session
    assert lake.ingest(folder, format="openhands", redact=False).added == 0  # idempotent
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    expected: Counter[str] = Counter()
    for path in [*TRAJS, RESOLVER, SESSION / "metadata.json"]:
        for record in _records(path):
            expected.update(m.role for m in record.messages)
    assert roles == dict(expected)
    names = lake.sql(
        "SELECT tool_name, count(*) FROM tool_calls c JOIN trajectories t USING (trajectory_id) "
        "WHERE t.task_id = 'neubig/pr-viewer#5' GROUP BY 1 ORDER BY 1"
    ).rows()
    assert names == [("finish", 1), ("run", 2), ("run_ipython", 1)]
    resolved = lake.sql("SELECT count(*) FROM trajectories WHERE resolved").rows()[0][0]
    assert resolved == 2
