"""SWE-agent `.traj` adapter: real 0.x and 1.x files checked against their own JSON."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import read_head
from trajlake.ingest.swe_agent import SweAgentAdapter, exit_status_to_status, run_id_from_path
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "swe_agent"
V0_DEMO = DATA / "swe-agent__test-repo-i1.traj"  # 0.x, text-parsed, one demonstration message
V1_CALLS = DATA / "6e44b9__sweagenttestrepo-1c2844.traj"  # 1.x function calling, replay_config
HISTORY_ONLY = DATA / "function_calling_simple.traj"
CORPUS = SHARED_CORPUS / "01_sweagent_traj"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not available")


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(SweAgentAdapter().read(source, stream))


def _record(path: Path) -> CanonicalTrajectory:
    (item,) = _read(path)
    assert isinstance(item, ParsedTrajectory), item
    return normalize(item.record)


def _source(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_text_parsed_0x_file_matches_its_history() -> None:
    data = _source(V0_DEMO)
    history = data["history"]
    record = _record(V0_DEMO)
    assert [m.role for m in record.messages] == [h["role"] for h in history]
    assert [m.content for m in record.messages] == [h["content"] for h in history]
    # The one demonstration is copied context, nothing else is.
    assert [m.is_copied_context for m in record.messages] == [
        bool(h.get("is_demo")) for h in history
    ]
    # Every action becomes a call named after its command, with the command as arguments.
    assistants = [m for m in record.messages if m.role == "assistant"]
    actions = [h["action"] for h in history if h["role"] == "assistant"]
    assert [c.name for m in assistants for c in m.tool_calls or []] == [
        a.split()[0] for a in actions
    ]
    assert [json.loads(m.tool_calls[0].arguments or "")["command"] for m in assistants] == [
        a.strip("\n") for a in actions
    ]
    # Each observation (a user message right after an action) answers that action's call.
    for before, after in itertools.pairwise(record.messages):
        if before.role == "assistant" and after.role == "user":
            call = before.tool_calls[0]
            assert (after.tool_call_id, after.name) == (call.id, call.name)
    assert sum(1 for m in record.messages if m.tool_call_id) == len(actions) - 1  # last: submit
    # The 0.x state (a JSON string per step) is attached to the action, parsed.
    assert assistants[0].attrs["state"] == json.loads(data["trajectory"][0]["state"])


def test_text_parsed_0x_run_fields() -> None:
    data = _source(V0_DEMO)
    record = _record(V0_DEMO)
    stats = data["info"]["model_stats"]  # {total_cost: 0.53839, tokens_sent: 52861, …}
    assert record.task_id == "swe-agent__test-repo-i1"
    assert (record.status, record.exit_reason) == ("completed", "submitted")
    assert record.final_output == data["info"]["submission"]
    assert record.cost_usd == pytest.approx(stats["instance_cost"])
    assert (record.prompt_tokens, record.completion_tokens) == (52861, 326)
    assert record.harness == "swe-agent" and record.harness_version is None
    assert record.run_id is None and record.policy_model is None
    assert record.attrs["environment"] == "swe_main"
    assert record.n_turns == 5 and record.n_tool_calls == 5


def test_function_calling_1x_keeps_native_calls_and_appends_the_missing_final_step() -> None:
    data = _source(V1_CALLS)
    record = _record(V1_CALLS)
    native = [c for h in data["history"] for c in h.get("tool_calls", [])]
    calls = [c for m in record.messages for c in m.tool_calls or []]
    assert [(c.id, c.name, c.arguments) for c in calls[: len(native)]] == [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in native
    ]
    tools = [m for m in record.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == [h["tool_call_ids"][0] for h in data["history"][3::2]]
    assert [m.name for m in tools] == ["find_file", "open", "edit", "bash"]
    # History stops before the final `submit` step; it comes from `trajectory`, unanswered.
    last = record.messages[-1]
    assert last.role == "assistant" and last.attrs["from_trajectory_step"] is True
    assert last.tool_calls[0].name == "submit"
    assert last.content == data["trajectory"][-1]["response"]
    assert record.n_turns == len(data["trajectory"]) == 5
    first = record.messages[2]
    assert first.attrs["execution_time"] == data["trajectory"][0]["execution_time"]
    assert record.policy_model == "openai/gpt-4o"  # replay_config.agent.model.name, normalised
    assert record.attrs["parse_function"] == "function_calling"
    assert record.attrs["problem_statement_id"] == "SWE-agent__test-repo-i1"
    assert (record.prompt_tokens, record.completion_tokens) == (7141, 243)


def test_history_only_file() -> None:
    record = _record(HISTORY_ONLY)
    assert record.task_id == "function_calling_simple"
    assert record.status is None and record.final_output is None and record.cost_usd is None
    roles = [m.role for m in record.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 5
    assert all(m.tool_call_id for m in record.messages if m.role == "tool")


def test_demonstration_replays_report_no_usage() -> None:
    # Replays record zero tokens and cost for calls no model answered: unknown, not 0.
    record = _record(DATA / "marshmallow-code__marshmallow-1867.traj")
    assert (record.cost_usd, record.prompt_tokens, record.completion_tokens) == (None,) * 3
    assert record.attrs["model_stats"]["tokens_sent"] == 0


def test_ingest_through_the_lake(lake: tl.Lake, tmp_path: Path) -> None:
    report = lake.ingest(str(DATA / "*.traj"), format="swe-agent")
    assert (report.added, report.quarantined) == (6, 0)
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    expected: dict[str, int] = {}
    for path in DATA.glob("*.traj"):
        for h in _source(path)["history"]:
            expected[h["role"]] = expected.get(h["role"], 0) + 1
    expected["assistant"] += 1  # the final step of the 1.x file that history lacks
    assert roles == expected
    pairs = lake.sql(
        "SELECT count(*) FROM tool_calls c JOIN messages m "
        "ON m.trajectory_id = c.trajectory_id AND m.tool_call_id = c.call_id"
    ).rows()[0][0]
    assert pairs == sum(_expected_pairs(_source(p)["history"]) for p in DATA.glob("*.traj"))
    again = lake.ingest(DATA)  # auto-detection; nothing new
    assert (again.added, again.duplicates, again.formats) == (0, 6, {"swe-agent": 6})


def _expected_pairs(history: list[dict[str, Any]]) -> int:
    """Results a source file holds: tool entries, and user messages right after a parsed action."""
    parsed = sum(
        1
        for before, after in itertools.pairwise(history)
        if before["role"] == "assistant" and "tool_calls" not in before and after["role"] == "user"
    )
    return parsed + sum(1 for h in history if h["role"] == "tool")


def test_the_same_file_elsewhere_has_the_same_id(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / V0_DEMO.name
    copy.parent.mkdir()
    shutil.copy(V0_DEMO, copy)
    assert _record(copy).trajectory_id == _record(V0_DEMO).trajectory_id


def test_run_id_from_submission_layouts() -> None:
    assert run_id_from_path("/x/20240620_agent_gpt4/trajs/a__b-1.traj", "a__b-1") == (
        "20240620_agent_gpt4"
    )
    assert run_id_from_path("s3://bkt/run7/a__b-1/a__b-1.traj", "a__b-1") == "run7"
    assert run_id_from_path("/r/run8/trajs/a__b-1/a__b-1.traj.json", "a__b-1") == "run8"
    assert run_id_from_path("/x/gpt4__default__t-0.00/a__b-1.traj", "a__b-1") is None
    assert run_id_from_path("a__b-1.traj", "a__b-1") is None


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("submitted", "completed"),
        ("submitted (exit_cost)", "truncated"),
        ("submitted (exit_context)", "truncated"),
        ("submitted (exit_format)", "error"),
        ("exit_total_execution_time", "timeout"),
        ("exit_command_timeout", "timeout"),
        ("exit_forfeit", "completed"),
        ("exit_api", "error"),
        ("early_exit", "error"),
        ("skipped", None),
        (None, None),
    ],
)
def test_exit_status_mapping(text: str | None, status: str | None) -> None:
    assert exit_status_to_status(text) == status


def _write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_synthetic_details(tmp_path: Path) -> None:
    # Synthetic file: thinking blocks, an inline image, a second agent, an exit pseudo-action.
    image = "data:image/png;base64," + "iVBORw0KGgo" * 8
    history = [
        {"role": "system", "content": "sys", "agent": "primary"},
        {"role": "user", "content": f"look ![s]({image}) here", "agent": "primary"},
        {"role": "assistant", "content": "x", "action": "ls -a\n", "agent": "primary",
         "thinking_blocks": [{"type": "thinking", "thinking": "hmm", "signature": "s"}]},
        {"role": "user", "content": "a b", "agent": "primary"},
        {"role": "user", "content": "summarise", "agent": "summarizer"},
        {"role": "assistant", "content": "Exit due to cost limit", "action": "exit_cost",
         "agent": "primary"},
    ]  # fmt: skip
    info = {"exit_status": "submitted (exit_cost)", "swe_agent_version": "1.0.1"}
    record = _record(_write(tmp_path, "t__t-1.traj", {"history": history, "info": info}))
    user = record.messages[1]
    assert image not in (user.content or "") and "data-sha256:" in (user.content or "")
    assert [p.type for p in user.parts or []] == ["text", "image"]
    assert user.parts[1].mime_type == "image/png"
    assert record.messages[2].reasoning == "hmm"
    assert record.messages[3].tool_call_id == "swe-agent-call-1"
    assert record.messages[4].thread == "summarizer"
    assert record.messages[5].tool_calls is None  # the harness's exit, not a tool call
    assert (record.status, record.harness_version) == ("truncated", "1.0.1")


def test_bad_files_become_bad_records(tmp_path: Path, lake: tl.Lake) -> None:
    (broken,) = _read(_write(tmp_path, "a.traj", {}))
    assert isinstance(broken, BadRecord) and "history" in broken.error
    truncated = tmp_path / "b.traj"
    truncated.write_text('{"history": [{"role": "user", "content": "hi"}')
    (bad,) = _read(truncated)
    assert isinstance(bad, BadRecord) and "not a JSON document" in bad.error
    wrong_role = _write(tmp_path, "c.traj", {"history": [{"role": "robot", "content": "x"}]})
    (bad_role,) = _read(wrong_role)
    assert isinstance(bad_role, BadRecord) and bad_role.field == "role"
    report = lake.ingest(tmp_path, format="swe-agent")
    assert (report.added, report.quarantined) == (0, 3)


def _sniff(path: Path) -> float:
    source = SourceFile(str(path), os.path.getsize(path))
    return SweAgentAdapter().sniff(source, read_head(source))


@needs_corpus
def test_every_corpus_traj_is_read() -> None:
    files = sorted(CORPUS.rglob("*.traj"))
    records = [_record(p) for p in files]
    assert len(records) == 22
    for path, record in zip(files, records, strict=True):
        history = _source(path).get("history", [])
        extra = 1 if path.name == V1_CALLS.name else 0
        assert record.n_messages == len(history) + extra, path
    assert sum(r.n_messages or 0 for r in records) == 489 + 1  # history entries + one step


@needs_corpus
def test_sniff_claims_only_swe_agent_files() -> None:
    for path in SHARED_CORPUS.rglob("*"):
        if path.is_file():
            mine = path.suffix == ".traj" and CORPUS in path.parents
            assert (_sniff(path) >= 0.9) == mine, path
            assert mine or _sniff(path) == 0.0, path
