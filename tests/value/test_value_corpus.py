"""The value-model path on real rollouts: τ-bench airline trajectories (50 tasks × 4 trials, the
file's own rewards as labels) → ingest → train baseline and tiny model → eval → score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli

pytest.importorskip("torch")

TAU = (
    Path(__file__).resolve().parents[3]
    / "shared/corpus/06_eval_frameworks/tau_bench/historical_trajectories/gpt-4o-airline.json"
)
MODELS = Path(__file__).resolve().parents[2] / "models"

pytestmark = pytest.mark.skipif(not TAU.is_file(), reason="shared corpus not present")


def _ok(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_tau_bench_rollouts_train_evaluate_and_score(tmp_path: Path) -> None:
    lake_dir = str(tmp_path / "lake")
    _ok("init", "--lake", lake_dir)
    _ok("ingest", str(TAU), "--lake", lake_dir)
    _ok("tag", "tau-airline", "--lake", lake_dir)
    lake = tl.open_lake(lake_dir)
    (counts,) = lake.sql(
        "SELECT count(*), count(DISTINCT task_id), sum(CAST(resolved AS INT)) FROM outcomes"
    ).rows()
    assert counts == (200, 50, 84)  # the file's trials, tasks and rewards of 1.0

    trained = {}
    for name, recipe, extra in (
        ("baseline", "baseline.yaml", []),
        ("tiny", "tiny.yaml", ["--set", "train.epochs=1", "--set", "serializer.max_tokens=256"]),
    ):
        out = _ok(
            "train",
            "value",
            "--lake",
            lake_dir,
            "--config",
            str(MODELS / recipe),
            "--at",
            "tau-airline",
            "--out",
            str(tmp_path / name),
            "-o",
            "json",
            *extra,
        )
        trained[name] = json.loads(out)
        report = json.loads((tmp_path / name / "eval" / "eval.json").read_text())
        card = json.loads((tmp_path / name / "model_card.json").read_text())
        assert card["lineage"]["tags"] == ["tau-airline"]
        assert report["n_examples"] == card["split"]["counts"]["test"]["examples"] > 0
        assert report["k_max"] == 4 and report["auroc"] is not None

    evaluated = json.loads(
        _ok(
            "eval",
            "value",
            str(tmp_path / "tiny"),
            "--lake",
            lake_dir,
            "-o",
            "json",
            "--out",
            str(tmp_path / "eval-tiny"),
        )
    )
    assert evaluated["n_tasks"] == trained["tiny"]["metrics"]["n_test_tasks"]
    assert (tmp_path / "eval-tiny" / "best_at_k.png").stat().st_size > 0
    _ok("score", str(tmp_path / "tiny"), "--lake", lake_dir)
    (scored,) = lake.sql("SELECT count(DISTINCT trajectory_id) FROM scores").rows()
    assert scored == (200,)
    (models,) = lake.sql("SELECT count(*) FROM models WHERE training_tag = 'tau-airline'").rows()
    assert models == (2,)
