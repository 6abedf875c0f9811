"""mini-swe-agent adapter: the real old-list files, and a synthetic `mini-swe-agent-1` run file."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import read_head
from trajlake.ingest.mini_swe_agent import MiniSweAgentAdapter, exit_status_to_status
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "mini_swe_agent"
GITHUB_ISSUE = DATA / "github_issue.traj.json"  # a real claude-sonnet-4 run (SOURCES.md)
LOCAL = DATA / "local.traj.json"  # scripted: "Here be some dummy command"
FENCE = re.compile(r"```mswea_bash_command\s*\n(.*?)\n```", re.S)


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(MiniSweAgentAdapter().read(source, stream))


def _record(path: Path) -> CanonicalTrajectory:
    (item,) = _read(path)
    assert isinstance(item, ParsedTrajectory), item
    return normalize(item.record)


def test_old_list_file_matches_its_messages() -> None:
    source = json.loads(GITHUB_ISSUE.read_text())
    record = _record(GITHUB_ISSUE)
    assert [(m.role, m.content) for m in record.messages] == [
        (s["role"], s["content"]) for s in source
    ]
    commands = [FENCE.findall(s["content"])[0] for s in source if s["role"] == "assistant"]
    calls = [c for m in record.messages for c in m.tool_calls or []]
    assert [json.loads(c.arguments or "")["command"] for c in calls] == commands
    assert {c.name for c in calls} == {"bash"} and len(calls) == 10
    results = [m for m in record.messages if m.tool_call_id]
    assert [m.tool_call_id for m in results] == [c.id for c in calls]
    # Exit codes come from <returncode>; the final submission output has none.
    codes = [int(re.findall(r"<returncode>(\d+)", m.content or "")[0]) for m in results[:-1]]
    assert [m.exit_code for m in results] == [*codes, None]
    assert codes.count(1) == 2  # `cat` of a missing path, and the ZeroDivisionError run
    assert record.final_output == source[-1]["content"]
    assert record.final_output.startswith("diff --git a/tests/missing_colon.py")
    assert record.task_id == "github_issue" and record.harness == "mini-swe-agent"
    assert (record.status, record.policy_model, record.cost_usd) == (None, None, None)
    assert (record.n_turns, record.n_tool_calls) == (10, 10)


def test_scripted_run_with_an_empty_submission() -> None:
    record = _record(LOCAL)
    assert record.final_output is None  # the submit command printed nothing
    assert [m.exit_code for m in record.messages if m.tool_call_id] == [0, None]


# --- a synthetic mini-swe-agent-1 file --------------------------------------------------
# Written here from the structure documented in corpus/FORMATS.md §2 (no real v1 run folder
# is in the corpus); every value is made up.


def _response(created: int, prompt: int, completion: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"gen-{created}",
        "provider": "Google",
        "model": "google/gemini-3-pro-preview",
        "created": created,
        "choices": [
            {"finish_reason": "stop", "message": {"content": "…", "reasoning": "**Plan** look"}}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "cost": 0.001,
            "prompt_tokens_details": {"cached_tokens": extra.get("cached", 0)},
            "completion_tokens_details": {"reasoning_tokens": extra.get("reasoning", 0)},
        },
    }


SYNTHETIC_V1: dict[str, Any] = {
    "info": {
        "exit_status": "Submitted",
        "submission": "diff --git a/x.py b/x.py\n",
        "model_stats": {"instance_cost": 0.3386, "api_calls": 3},
        "mini_version": "1.15.0",
        "config": {
            "agent": {"system_template": "You are a helpful assistant …"},
            "model": {"model_name": "openrouter/google/gemini-3-pro-preview"},
            "environment": {"image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-14598"},
            "agent_type": "minisweagent.run.extra.swebench.ProgressTrackingAgent",
        },
    },
    "messages": [
        {"role": "system", "content": "You are a helpful assistant that can interact …"},
        {"role": "user", "content": "<pr_description>Fix it</pr_description>"},
        {
            "role": "assistant",
            "content": "THOUGHT: explore.\n\n```bash\nls -R\n```",
            "extra": {"response": _response(1763510516, 2211, 218, cached=1024, reasoning=150)},
        },
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nastropy\n</output>"},
        {
            "role": "assistant",
            "content": "THOUGHT: two at once.\n\n```bash\nls\n```\n```bash\npwd\n```",
            "extra": {"response": _response(1763510530, 2500, 40)},
        },
        {
            "role": "user",
            "content": "Please always provide EXACTLY ONE action in triple backticks.",
        },
        {
            "role": "assistant",
            "content": "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
            "extra": {"response": _response(1763510545, 2600, 30)},
        },
        {"role": "user", "content": "diff --git a/x.py b/x.py\n"},
    ],
    "trajectory_format": "mini-swe-agent-1",
    "instance_id": "astropy__astropy-14598",
}


def write_v1(folder: Path, data: dict[str, Any] | None = None) -> Path:
    """The synthetic v1 file at `<folder>/<id>/<id>.traj.json` (mini-swe-agent's batch layout)."""
    data = data or SYNTHETIC_V1
    path = folder / data["instance_id"] / f"{data['instance_id']}.traj.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def test_v1_per_call_usage_reasoning_and_run_fields(tmp_path: Path) -> None:
    record = _record(write_v1(tmp_path / "gemini3pro_run" / "trajs"))
    assistants = [m for m in record.messages if m.role == "assistant"]
    assert [(m.prompt_tokens, m.completion_tokens) for m in assistants] == [
        (2211, 218),
        (2500, 40),
        (2600, 30),
    ]
    first = assistants[0]
    assert (first.cached_tokens, first.reasoning_tokens) == (1024, 150)
    assert first.reasoning == "**Plan** look" and first.finish_reason == "stop"
    assert first.model == "google/gemini-3-pro-preview"
    assert first.timestamp == dt.datetime(2025, 11, 19, 0, 1, 56, tzinfo=dt.UTC)
    assert first.attrs["response"] == {
        "id": "gen-1763510516",
        "provider": "Google",
        "cost_usd": 0.001,
    }
    # Two fenced blocks are a format error: no call, and the harness's complaint is not a result.
    assert assistants[1].tool_calls is None and record.messages[5].tool_call_id is None
    assert [m.exit_code for m in record.messages if m.tool_call_id] == [0, None]
    assert (record.prompt_tokens, record.completion_tokens) == (2211 + 2500 + 2600, 218 + 40 + 30)
    assert record.task_id == "astropy__astropy-14598" and record.run_id == "gemini3pro_run"
    assert (record.status, record.exit_reason) == ("completed", "Submitted")
    assert record.final_output == "diff --git a/x.py b/x.py\n"
    assert record.cost_usd == pytest.approx(0.3386) and record.harness_version == "1.15.0"
    # The model that answered, in normal form (the configured route is in model_config).
    assert record.policy_model == "google/gemini-3-pro-preview"
    assert record.attrs["model_config"]["model_name"] == "openrouter/google/gemini-3-pro-preview"
    assert record.task_source == "swe-bench"
    assert (record.started_at, record.ended_at) == (first.timestamp, assistants[-1].timestamp)
    assert record.attrs["model_stats"]["api_calls"] == 3
    assert "agent_config" not in record.attrs  # prompt templates are in the messages already


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("Submitted", "completed"),
        ("LimitsExceeded", "truncated"),
        ("TimeExceeded", "timeout"),
        ("RetryError", "error"),
        ("FormatError", "error"),
        ("", None),
        ("something else", None),
    ],
)
def test_exit_status_mapping(text: str, status: str | None) -> None:
    assert exit_status_to_status(text) == status


def test_ingest_through_the_lake(lake: tl.Lake, tmp_path: Path) -> None:
    write_v1(tmp_path / "run" / "trajs")
    report = lake.ingest([str(DATA / "*.traj.json"), str(tmp_path / "run")])
    assert (report.added, report.quarantined, report.formats) == (3, 0, {"mini-swe-agent": 3})
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    assert roles == {"system": 3, "user": 11 + 3 + 4, "assistant": 10 + 2 + 3}
    calls = lake.sql("SELECT tool_name, count(*) FROM tool_calls GROUP BY ALL").rows()
    assert calls == [("bash", 10 + 2 + 2)]
    failed = lake.sql("SELECT count(*) FROM messages WHERE exit_code <> 0").rows()[0][0]
    assert failed == 2
    again = lake.ingest(str(DATA / "*.traj.json"), format="mini-swe-agent")
    assert (again.added, again.duplicates) == (0, 2)


def test_bad_and_unsupported_files(tmp_path: Path) -> None:
    v2 = {"trajectory_format": "mini-swe-agent-1.1", "info": {}, "messages": []}
    (path := tmp_path / "a.traj.json").write_text(json.dumps(v2))
    (bad,) = _read(path)
    assert isinstance(bad, BadRecord) and "mini-swe-agent-1.1" in bad.error
    (path := tmp_path / "b.traj.json").write_text('[{"role": "system", "content": ')
    (bad,) = _read(path)
    assert isinstance(bad, BadRecord) and "not a JSON document" in bad.error
    (path := tmp_path / "c.traj.json").write_text('[{"role": "exit", "content": "x"}]')
    (bad,) = _read(path)
    assert isinstance(bad, BadRecord) and bad.field == "role"


def _sniff(path: Path) -> float:
    source = SourceFile(str(path), os.path.getsize(path))
    return MiniSweAgentAdapter().sniff(source, read_head(source))


def test_sniff(tmp_path: Path) -> None:
    assert _sniff(GITHUB_ISSUE) >= 0.9 and _sniff(write_v1(tmp_path)) == 1.0
    (other := tmp_path / "chat.json").write_text('[{"role": "user", "content": "hi"}]')
    assert _sniff(other) == 0.0


@pytest.mark.skipif(not SHARED_CORPUS.exists(), reason="shared corpus not available")
def test_sniff_claims_only_mini_swe_agent_files() -> None:
    mine = SHARED_CORPUS / "02_mini_swe_agent"
    for path in SHARED_CORPUS.rglob("*"):
        if path.is_file():
            expected = path.name.endswith(".traj.json") and mine in path.parents
            assert (_sniff(path) >= 0.9) == expected, path
            assert expected or _sniff(path) == 0.0, path
