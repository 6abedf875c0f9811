"""Labels: verifier outputs joined to trajectories, checked through the `outcomes` view."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.errors import FormatDetectionError
from trajlake.ingest.labels import attach_labels, read_labels

SWE_DATA = Path(__file__).parents[1] / "data" / "swe_agent"
S1, S2, S3 = "20240620_sweagent_gpt4", "20241022_sweagent_claude35", "20250101_openagent_qwen"
DJANGO, ASTROPY, SYMPY = "django__django-11099", "astropy__astropy-12907", "sympy__sympy-20590"

# Real SWE-agent files, renamed to instance ids: (submission, instance) → source file.
SUBMISSIONS: dict[str, dict[str, str]] = {
    S1: {DJANGO: "swe-agent__test-repo-i1.traj", ASTROPY: "pydicom__pydicom-1458.traj"},
    S2: {DJANGO: "6e44b9__sweagenttestrepo-1c2844.traj", ASTROPY: "humanevalfix-python-0.traj"},
    S3: {
        DJANGO: "function_calling_simple.traj",
        ASTROPY: "marshmallow-code__marshmallow-1867.traj",
        SYMPY: "",  # a small synthetic file (below): the same rollout twice would be deduplicated
    },
}
SYNTHETIC_TRAJ = {
    "history": [
        {"role": "system", "content": "You are an autonomous programmer.", "agent": "primary"},
        {"role": "user", "content": "Fix sympy__sympy-20590.", "agent": "primary"},
        {"role": "assistant", "content": "DISCUSSION\nLook.\n```\nls\n```", "action": "ls\n"},
    ],
    "info": {"exit_status": "exit_cost"},
}
RESULTS: dict[str, dict[str, Any]] = {
    # SWE-bench report v1: the resolved list is called `resolved`.
    S1: {
        "total_instances": 500, "submitted_instances": 2, "completed_instances": 2,
        "resolved_instances": 1, "completed_ids": [DJANGO, ASTROPY], "resolved": [DJANGO],
        "unresolved_ids": [ASTROPY], "empty_patch_ids": [], "error_ids": [],
        "incomplete_ids": [], "submitted_ids": [DJANGO, ASTROPY],
    },
    # Report v2 (sb-cli style keys): `resolved_ids`.
    S2: {"resolved_ids": [DJANGO, ASTROPY], "unresolved_ids": [], "schema_version": 2},
    # Nothing resolved; one empty patch, one harness error, one never evaluated.
    S3: {
        "resolved": [], "unresolved_ids": [], "empty_patch_ids": [DJANGO],
        "error_ids": [ASTROPY], "incomplete_ids": [SYMPY],
    },
}  # fmt: skip


def _write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def build_experiments(root: Path) -> Path:
    """`evaluation/verified/<YYYYMMDD>_<agent>_<model>/{trajs/<id>.traj, results/results.json}`."""
    verified = root / "evaluation" / "verified"
    for submission, instances in SUBMISSIONS.items():
        folder = verified / submission
        (folder / "trajs").mkdir(parents=True)
        for instance, source in instances.items():
            target = folder / "trajs" / f"{instance}.traj"
            if source:
                shutil.copy(SWE_DATA / source, target)
            else:
                _write_json(target, SYNTHETIC_TRAJ)
        _write_json(folder / "results" / "results.json", RESULTS[submission])
    report = {DJANGO: {"patch_exists": True, "resolved": True, "tests_status": {}}}
    _write_json(verified / S1 / "logs" / DJANGO / "report.json", report)
    return root / "evaluation"


def test_experiments_layout_resolved_counts_per_submission(lake: tl.Lake, tmp_path: Path) -> None:
    evaluation = build_experiments(tmp_path)
    ingested = lake.ingest(evaluation)
    assert (ingested.added, ingested.quarantined, ingested.formats) == (7, 0, {"swe-agent": 7})
    report = attach_labels(lake, evaluation)
    assert report.formats == {"swebench": 3, "swebench-report": 1}
    assert (report.labels_read, report.added, report.matched, report.unmatched) == (7, 7, 7, 0)
    assert report.trajectories_labelled == 6  # SYMPY of S3 was never evaluated
    counts = lake.sql(
        "SELECT run_id, count(*) FILTER (WHERE resolved) AS resolved, "
        "count(*) FILTER (WHERE resolved IS NOT NULL) AS judged, count(*) AS n "
        "FROM outcomes GROUP BY run_id ORDER BY run_id"
    ).rows()
    assert counts == [(S1, 1, 2, 2), (S2, 2, 2, 2), (S3, 0, 2, 3)]
    sources = lake.sql(
        f"SELECT task_id, outcome_source FROM outcomes WHERE run_id = '{S3}' ORDER BY task_id"
    ).rows()
    assert sources == [(ASTROPY, "label:swebench"), (DJANGO, "label:swebench"), (SYMPY, None)]
    reasons = dict(
        lake.sql(
            f"SELECT task_id, json_extract_string(details, '$.status') FROM labels "
            f"WHERE run_id = '{S3}'"
        ).rows()
    )
    assert reasons == {DJANGO: "empty_patch", ASTROPY: "error"}
    again = attach_labels(lake, evaluation)
    assert (again.added, again.duplicates) == (0, 7)


def test_results_json_verdicts_and_run_ids(tmp_path: Path) -> None:
    data = {
        "resolved": ["a"],
        "resolved_ids": ["b"],
        "error_ids": ["a", "c"],
        "incomplete_ids": ["d"],
    }
    path = _write_json(tmp_path / "run-9" / "results" / "results.json", data)
    labels = {label.task_id: label for label in read_labels(path)}
    assert {k: v.resolved for k, v in labels.items()} == {"a": True, "b": True, "c": False}
    assert {label.run_id for label in labels.values()} == {"run-9"}
    assert labels["c"].details == {"status": "error"} and labels["a"].source == "swebench"
    assert {label.run_id for label in read_labels(path, run_id="mine")} == {"mine"}
    # Deterministic ids: the same verdicts read again get the same label ids.
    assert {label.label_id for label in read_labels(path)} == {
        label.label_id for label in labels.values()
    }


def test_per_instance_reports(tmp_path: Path) -> None:
    tests = {"FAIL_TO_PASS": {"success": ["t1"], "failure": ["t2"]}, "PASS_TO_PASS": {}}
    flat = {"patch_is_None": False, "patch_exists": True, "resolved": False, "tests_status": tests}
    path = _write_json(tmp_path / "run-1" / "logs" / "x__y-1" / "report.json", flat)
    (label,) = read_labels(path)
    assert (label.task_id, label.run_id, label.resolved) == ("x__y-1", "run-1", False)
    assert label.details["tests"]["FAIL_TO_PASS"] == {"success": 1, "failure": 1, "failed": ["t2"]}
    nested = _write_json(tmp_path / "out" / "report.json", {"x__y-2": {"resolved": True}})
    (label,) = read_labels(nested, format="swebench-report")
    assert (label.task_id, label.run_id, label.resolved) == ("x__y-2", None, True)


def _mini_v1(instance: str) -> dict[str, Any]:
    # Synthetic mini-swe-agent-1 file (structure of corpus/FORMATS.md §2, made-up values).
    return {
        "info": {"exit_status": "Submitted", "submission": "diff", "mini_version": "1.15.0"},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": f"solve {instance}"},
            {"role": "assistant", "content": "THOUGHT: go\n\n```bash\nls\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
        ],
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": instance,
    }


def test_sb_cli_report_labels_a_mini_swe_agent_run(lake: tl.Lake, tmp_path: Path) -> None:
    trajs = tmp_path / "gemini3pro_run" / "trajs"
    for instance in ("a__a-1", "b__b-2", "c__c-3"):
        _write_json(trajs / instance / f"{instance}.traj.json", _mini_v1(instance))
    report = {
        "resolved_ids": ["a__a-1"], "unresolved_ids": ["b__b-2"], "error_ids": [],
        "completed_ids": ["a__a-1", "b__b-2"], "schema_version": 2,
    }  # fmt: skip
    _write_json(trajs / "sb-cli-reports" / "swe-bench_verified__test__gemini3pro_run.json", report)
    assert lake.ingest(tmp_path).added == 3
    labelled = attach_labels(lake, tmp_path)
    assert labelled.formats == {"sb-cli": 1} and labelled.matched == 2
    rows = lake.sql("SELECT task_id, resolved, outcome_source FROM outcomes ORDER BY 1").rows()
    assert rows == [
        ("a__a-1", True, "label:sb-cli"),
        ("b__b-2", False, "label:sb-cli"),
        ("c__c-3", None, None),
    ]


def _write_trajectories(lake: tl.Lake, rows: list[tuple[str, str, str | None]]) -> None:
    lake.write(
        {
            "trajectory_id": tid,
            "task_id": task,
            "run_id": run,
            "messages": [{"role": "user", "content": tid}, {"role": "assistant", "content": "ok"}],
        }
        for tid, task, run in rows
    )


def test_terminal_bench_run_and_trial_results(lake: tl.Lake, tmp_path: Path) -> None:
    run = tmp_path / "20250807_agent_model" / "2025-08-07__20-46-16"
    trials = [
        {"trial_name": "hello-world.1-of-1.2025-08-07__20-46-16", "task_id": "hello-world",
         "is_resolved": True, "failure_mode": "unset", "parser_results": {"test_a": "passed"}},
        {"trial_name": "extract-safely.1-of-1.2025-08-07__20-46-16", "task_id": "extract-safely",
         "is_resolved": None, "failure_mode": "agent_timeout"},
    ]  # fmt: skip
    _write_json(run / "results.json", {"id": "r1", "results": trials, "accuracy": 0.5})
    _write_json(run / "hello-world" / trials[0]["trial_name"] / "results.json", trials[0])
    _write_trajectories(lake, [("t1", "hello-world", run.name), ("t2", "extract-safely", run.name)])
    report = attach_labels(lake, run)
    assert report.formats == {"terminal-bench": 2}
    assert report.labels_read == 2  # the trial file repeats the run file's verdict
    rows = lake.sql("SELECT task_id, resolved FROM outcomes ORDER BY 1").rows()
    assert rows == [("extract-safely", False), ("hello-world", True)]
    details = lake.sql("SELECT details FROM labels WHERE task_id = 'extract-safely'").rows()
    assert json.loads(details[0][0])["failure_mode"] == "agent_timeout"


def test_jsonl_and_csv(lake: tl.Lake, tmp_path: Path) -> None:
    _write_trajectories(
        lake,
        [("t1", "task-a", "r1"), ("t2", "task-a", "r2"), ("t3", "task-b", None), ("t4", "c", None)],
    )
    jsonl = tmp_path / "judge.jsonl"
    jsonl.write_text(
        '{"trajectory_id": "t1", "resolved": true, "reward": 0.9, "judge": "gpt"}\n'
        '{"trajectory_id": "t1"}\n'
        "not json\n"
        '{"task_id": "task-b", "reward": 0.25}\n'
    )
    report = attach_labels(lake, jsonl)
    assert (report.labels_read, report.matched, len(report.problems)) == (2, 2, 2)
    assert report.formats == {"jsonl": 1}
    csv = tmp_path / "rewards.csv"
    csv.write_text("task_id,run_id,resolved,reward\ntask-a,r2,false,0.1\nc,,yes,\ntask-a,,1,\n")
    report = attach_labels(lake, csv)
    assert (report.labels_read, report.matched, report.ambiguous) == (3, 2, 1)
    rows = lake.sql("SELECT trajectory_id, resolved, reward FROM outcomes ORDER BY 1").rows()
    assert rows == [("t1", True, 0.9), ("t2", False, 0.1), ("t3", None, 0.25), ("t4", True, None)]
    judge = lake.sql("SELECT details FROM labels WHERE trajectory_id = 't1'").rows()[0][0]
    assert json.loads(judge) == {"judge": "gpt"}


def test_a_changed_verdict_is_a_newer_label(lake: tl.Lake, tmp_path: Path) -> None:
    _write_trajectories(lake, [("t1", "x", "run")])
    path = _write_json(tmp_path / "run" / "results" / "results.json", {"resolved": ["x"]})
    attach_labels(lake, path)
    _write_json(path, {"resolved": [], "unresolved_ids": ["x"]})
    assert attach_labels(lake, path).added == 1
    assert lake.sql("SELECT resolved FROM outcomes").rows() == [(False,)]
    assert lake.sql("SELECT count(*) FROM labels").rows() == [(2,)]


def test_formats_and_detection(tmp_path: Path) -> None:
    other = _write_json(tmp_path / "notes.json", {"hello": "world"})
    with pytest.raises(FormatDetectionError, match="pass --format"):
        read_labels(other)
    with pytest.raises(ValueError, match="unknown label format"):
        read_labels(other, format="nope")  # type: ignore[arg-type]
    preds = tmp_path / "all_preds.jsonl"  # predictions, not verdicts: skipped in folders
    preds.write_text('{"instance_id": "a", "model_patch": "diff"}\n')
    _write_json(tmp_path / "r" / "results.json", {"resolved": ["a"]})
    assert [(label.task_id, label.run_id) for label in read_labels(tmp_path)] == [("a", "r")]
    # In folders, an explicit format takes only files of that format.
    (label,) = read_labels(tmp_path, format="sb-cli")
    assert (label.task_id, label.source) == ("a", "sb-cli")
    with pytest.raises(FormatDetectionError):
        read_labels(tmp_path, format="jsonl")
