"""Harbor job folders: ATIF + native Claude Code session per trial, result.json and verifier files.

The job in `tests/data/harbor/claude-code-job` is built by `make_job.py` beside it from real Claude
Code sessions, converted to ATIF the way Harbor's Claude Code agent does (see SOURCE.txt).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.ingest._adapter import stable_id

JOB = Path(__file__).parents[1] / "data" / "harbor" / "claude-code-job"
PHOENIX = JOB / "start-phoenix__Xa7pQ2c"
SCROLL = JOB / "fix-scroll__Bc3dE4f"


def _session(trial: Path) -> Path:
    (path,) = (trial / "agent" / "sessions" / "projects").glob("*/*.jsonl")
    return path


def _rows(lake: tl.Lake, query: str) -> list[dict[str, Any]]:
    return lake.sql(query).to_dicts()


def _trajectories(lake: tl.Lake) -> dict[str, dict[str, Any]]:
    rows = _rows(lake, "SELECT * FROM trajectories ORDER BY task_id")
    return {r["task_id"]: {**r, "attrs": json.loads(r["attrs"])} for r in rows}


def test_job_folder_ingests_as_one_run_with_outcomes(lake: tl.Lake) -> None:
    report = lake.ingest(JOB)
    assert report.formats == {"atif": 2} and report.added == 2
    assert report.files_companion == 2  # the native sessions are read with their ATIF file
    by_task = _trajectories(lake)
    assert set(by_task) == {"start-phoenix", "fix-scroll"}
    phoenix, scroll = by_task["start-phoenix"], by_task["fix-scroll"]
    result = json.loads((PHOENIX / "result.json").read_text())
    assert {r["run_id"] for r in by_task.values()} == {"claude-code-job"}
    assert {r["task_source"] for r in by_task.values()} == {result["source"]}
    assert (phoenix["status"], phoenix["reward"], phoenix["resolved"]) == ("completed", 1.0, True)
    assert phoenix["outcome_source"] == "harbor:result.json"
    assert dict(phoenix["rewards"]) == result["verifier_result"]["rewards"]
    # No rewards in result.json: the verifier's reward.txt gives the verdict, and says so.
    assert (scroll["status"], scroll["exit_reason"]) == ("timeout", "AgentTimeoutError")
    assert (scroll["reward"], scroll["resolved"]) == (0.0, False)
    assert scroll["outcome_source"] == "harbor:verifier/reward.txt"
    assert scroll["attrs"]["harbor"]["exception"]["type"] == "AgentTimeoutError"
    assert phoenix["started_at"].isoformat().startswith(result["started_at"])
    assert phoenix["policy_model"] == "anthropic/claude-opus-4-6"
    harbor = phoenix["attrs"]["harbor"]
    assert harbor["trial_name"] == PHOENIX.name and harbor["verifier_files"] == [
        "reward.txt",
        "test-stdout.txt",
    ]
    assert harbor["agent_result"]["n_input_tokens"] == result["agent_result"]["n_input_tokens"]


def test_native_session_tokens_are_compared_and_the_gap_explained(lake: tl.Lake) -> None:
    lake.ingest(JOB)
    by_task = _trajectories(lake)
    atif = json.loads((PHOENIX / "agent" / "trajectory.json").read_text())
    native = by_task["start-phoenix"]["attrs"]["harbor"]["native_session"]
    final = atif["final_metrics"]
    assert (native["atif_prompt_tokens"], native["atif_completion_tokens"]) == (
        final["total_prompt_tokens"],
        final["total_completion_tokens"],
    )
    # Harbor's prompt is input + cache reads; the session reading adds cache writes.
    gap = native["native_prompt_tokens"] - native["atif_prompt_tokens"]
    assert gap == native["native_cache_creation_tokens"] > 0
    # Harbor takes each message's usage from its first streamed line, so its output count is
    # lower than the message's final one: a real disagreement, named in `why`.
    assert native["native_completion_tokens"] > native["atif_completion_tokens"]
    assert native["agrees"] is False and "first line" in native["why"]
    assert "cache-write" in native["why"]
    # The short session streams one line per message: only the cache-write convention differs.
    scroll = by_task["fix-scroll"]["attrs"]["harbor"]["native_session"]
    assert scroll["agrees"] is True and scroll["why"].startswith("prompt: the session counts")


def test_native_session_ingested_alone_shares_the_rollout_key(lake: tl.Lake) -> None:
    lake.ingest(JOB)
    lake.ingest(_session(PHOENIX))
    (group,) = _rows(lake, "SELECT * FROM duplicates")
    session_id = json.loads((PHOENIX / "agent" / "trajectory.json").read_text())["session_id"]
    assert (group["kind"], group["key"], group["copies"]) == ("rollout_key", session_id, 2)
    assert set(group["trajectory_ids"]) == {
        stable_id("atif", session_id),
        stable_id("claude-code", session_id),
    }


def test_labels_from_trial_results_match_the_atif_trajectories(lake: tl.Lake) -> None:
    lake.ingest(JOB)
    report = lake.label(JOB)
    assert report.formats == {"harbor": 2} and report.matched == 2 and not report.problems
    rows = _rows(lake, "SELECT * FROM outcomes ORDER BY task_id")
    assert [(r["task_id"], r["resolved"], r["reward"], r["outcome_source"]) for r in rows] == [
        ("fix-scroll", False, 0.0, "label:harbor"),
        ("start-phoenix", True, 1.0, "label:harbor"),
    ]
    details = _rows(lake, "SELECT details FROM labels WHERE reward = 0")[0]["details"]
    assert json.loads(details)["exception_type"] == "AgentTimeoutError"
    assert lake.label(JOB).added == 0  # re-labelling adds nothing


def test_broken_result_json_keeps_the_trajectory_and_names_the_problem(
    lake: tl.Lake, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    shutil.copytree(JOB, job)
    trial = job / PHOENIX.name
    (trial / "result.json").chmod(0o644)
    text = (trial / "result.json").read_text()
    (trial / "result.json").write_text(text[: len(text) // 2])  # a run killed mid-write
    report = lake.ingest(job)
    assert report.added == 2 and report.quarantined == 0
    phoenix = _trajectories(lake)["start-phoenix"]  # the task name still comes from config.json
    problems = phoenix["attrs"]["harbor"]["problems"]
    assert len(problems) == 1 and "result.json: not readable JSON" in problems[0]
    # Without result.json the verdict still comes from the verifier's own file.
    assert (phoenix["reward"], phoenix["outcome_source"]) == (1.0, "harbor:verifier/reward.txt")
    assert phoenix["run_id"] == "job" and phoenix["status"] is None


def test_show_prints_the_effective_outcome_and_its_source(lake: tl.Lake) -> None:
    lake.ingest(JOB)
    trajectory_id = _trajectories(lake)["fix-scroll"]["trajectory_id"]
    runner = CliRunner()
    before = runner.invoke(cli, ["show", trajectory_id, "--lake", str(lake.uri)])
    assert before.exit_code == 0, before.output
    assert "timeout · unresolved · reward 0 · judged by harbor:verifier/reward.txt" in before.output
    relabel = Path(str(lake.uri)).parent / "relabel.jsonl"
    relabel.write_text(json.dumps({"trajectory_id": trajectory_id, "reward": 0.5}) + "\n")
    lake.label(relabel)
    after = runner.invoke(cli, ["show", trajectory_id, "--lake", str(lake.uri)])
    # The label gives the reward; it says nothing of `resolved`, so the rollout's stays.
    assert "outcome   timeout · unresolved · reward 0.5 · judged by label:jsonl" in after.output
    assert "recorded  unresolved · reward 0 · judged by harbor:verifier/reward.txt" in after.output
