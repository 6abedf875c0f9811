"""One real-data value evaluation end to end: real SWE-bench Verified candidates (mini-swe-agent,
gemini-3-pro-preview) with the SWE-bench harness's verdicts → `ingest --labels` → `train value`
(feature baseline) → `eval value`, all through the CLI. Data and licence: tests/data/swe_real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli

DATA = Path(__file__).resolve().parents[1] / "data" / "swe_real"
RUN = "20251118_mini-v1.15.0_gemini-3-pro-preview-20251118"
BASELINE = Path(__file__).resolve().parents[2] / "models" / "baseline.yaml"
TRAIN = ("train", "value", "--config", str(BASELINE), "--set", "data.test_frac=0.4")
METRICS = ("best_at_k", "random_at_k", "pass_at_k", "auroc", "brier", "ece")


def _ok(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _ingest(lake: str) -> str:
    return _ok("ingest", "--lake", lake, "--create", str(DATA), "--labels", str(DATA))


def test_real_candidates_are_ingested_with_their_verdicts(tmp_path: Path) -> None:
    lake_dir = str(tmp_path / "lake")
    out = _ingest(lake_dir)
    assert "20 added" in out and "20 matched, 0 unmatched" in out
    lake = tl.open_lake(lake_dir)
    (counts,) = lake.sql(
        "SELECT count(*), count(DISTINCT task_id), count(resolved), "
        "count(*) FILTER (WHERE resolved) FROM outcomes"
    ).rows()
    assert counts == (20, 20, 20, 12)  # 20 tasks, one candidate each, 12 resolved (README)
    rows = lake.sql(
        "SELECT o.task_id, o.resolved, o.outcome_source, t.harness, t.run_id "
        "FROM outcomes o JOIN trajectories t USING (trajectory_id) "
        "WHERE o.task_id IN ('django__django-10999', 'django__django-16255') ORDER BY 1"
    ).rows()
    # Verdicts as each instance's report.json gives them (`"resolved": false` / `true`).
    assert rows == [
        ("django__django-10999", False, "label:swebench-report", "mini-swe-agent", RUN),
        ("django__django-16255", True, "label:swebench-report", "mini-swe-agent", RUN),
    ]


def _check_report(report: dict[str, Any]) -> None:
    head, ci = report["headline"], report["ci"]
    assert ci["level"] == 0.95
    for key in METRICS:
        assert head[key] is not None and 0.0 <= head[key] <= 1.0, key
        assert ci[key] is not None, key
        assert 0.0 <= ci[key]["low"] <= ci[key]["high"] <= 1.0, key
    # One candidate per task: picking among candidates cannot help, and nothing is rerankable.
    assert report["n_rerankable_tasks"] == 0
    assert head["best_at_k"] == head["random_at_k"] == head["pass_at_k"]
    assert head["gap_closed"] is None


def test_real_candidates_train_and_evaluate_through_the_cli(tmp_path: Path) -> None:
    lake_dir, model_dir = str(tmp_path / "lake"), tmp_path / "baseline"
    _ingest(lake_dir)
    trained = json.loads(_ok(*TRAIN, "--lake", lake_dir, "--out", str(model_dir), "-o", "json"))
    report = json.loads(
        _ok("eval", "value", str(model_dir), "--lake", lake_dir, "--n-boot", "200", "-o", "json")
    )
    assert report["n_tasks"] == trained["metrics"]["n_test_tasks"] == report["n_examples"]
    assert 0 < report["n_tasks"] < 20  # held-out tasks only
    # The held-out split holds both outcomes, so AUROC is defined on real verdicts.
    assert 0.0 < report["positive_rate"] < 1.0
    _check_report(report)
    assert report["headline"]["auroc"] == trained["metrics"]["auroc"]
    # The floors beside the model, on the same held-out candidates.
    floors = report["floors"]
    assert {"sparse-floor", "fewer-steps", "exit-status"} <= set(floors)
    for floor in floors.values():
        assert floor["n_examples"] == report["n_examples"]
        assert floor["ci"]["auroc"] is not None
        assert 0.0 <= floor["headline"]["auroc"] <= 1.0
    assert (model_dir / f"eval-s{report['extra']['snapshot_id']}-test" / "eval.md").is_file()
