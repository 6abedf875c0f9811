"""`trajlake train value` / `eval value` / `score` / `rerank` end to end on a synthetic lake: the
feature baseline and a tiny transformer trained from recipes, cards with lineage, `models` rows,
reports with plots, stored scores, and models from another format version refused clearly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _value_cli import MODELS, gen0_lake, run_cli
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.synth import SynthConfig, generate

pytest.importorskip("torch")

FAST = ("--set", "train.epochs=2", "--set", "serializer.max_tokens=256")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tagged synthetic lake with a baseline and a tiny neural model trained from the CLI."""
    root = tmp_path_factory.mktemp("value")
    lake_dir, _ = gen0_lake(root)
    out: dict[str, Any] = {"lake": lake_dir, "root": root}
    for name, recipe, extra in (
        ("baseline", "baseline.yaml", ()),
        ("tiny", "tiny.yaml", FAST),
    ):
        result = run_cli(
            "train",
            "value",
            "--lake",
            lake_dir,
            "--config",
            str(MODELS / recipe),
            "--at",
            "gen-0",
            "--out",
            str(root / name),
            "-o",
            "json",
            *extra,
        )
        out[name] = json.loads(result.stdout)
    return out


@pytest.mark.parametrize("name", ["baseline", "tiny"])
def test_training_writes_card_report_and_registers_the_model(
    trained: dict[str, Any], name: str
) -> None:
    info = trained[name]
    directory = Path(info["directory"])
    card = json.loads((directory / "model_card.json").read_text())
    assert card["model_id"] == info["model_id"]
    lineage = card["lineage"]
    assert lineage["tags"] == ["gen-0"]
    assert lineage["generations"] == [0]
    assert lineage["lake_uri"] == tl.open_lake(trained["lake"]).uri
    counts = card["split"]["counts"]
    assert counts["test"]["tasks"] > 0 and counts["train"]["positives"] > 0
    report = json.loads((directory / "eval" / "eval.json").read_text())
    assert report["n_examples"] == counts["test"]["examples"]
    assert (directory / "eval" / "best_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    head = report["headline"]
    assert head["random_at_k"] <= head["pass_at_k"]
    assert 0.0 <= head["best_at_k"] <= head["pass_at_k"]
    assert "Lineage" in (directory / "README.md").read_text()
    rows = (
        tl.open_lake(trained["lake"])
        .sql(
            "SELECT kind, training_snapshot, training_tag, artifact_uri FROM models "
            f"WHERE model_id = '{info['model_id']}'"
        )
        .rows()
    )
    assert rows == [(card["kind"], lineage["snapshot_id"], "gen-0", str(directory.resolve()))]


def test_neural_model_is_saved_as_safetensors_only(trained: dict[str, Any]) -> None:
    directory = Path(trained["tiny"]["directory"])
    names = {p.name for p in directory.iterdir()}
    assert {"model.safetensors", "value_net.json", "model_card.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pkl"))]


def test_tiny_model_learns_something(trained: dict[str, Any]) -> None:
    """Two epochs on 30 tasks: better than chance on held-out tasks (the full recipe does more)."""
    report = json.loads((Path(trained["tiny"]["directory"]) / "eval" / "eval.json").read_text())
    assert report["auroc"] > 0.6


@pytest.mark.parametrize("name", ["baseline", "tiny"])
def test_eval_value_reproduces_the_training_report(trained: dict[str, Any], name: str) -> None:
    directory = trained[name]["directory"]
    out = trained["root"] / f"eval-{name}"
    result = run_cli(
        "eval",
        "value",
        directory,
        "--lake",
        trained["lake"],
        "--at",
        "gen-0",
        "--out",
        str(out),
        "-o",
        "json",
    )
    report = json.loads(result.stdout)
    at_training = json.loads((Path(directory) / "eval" / "eval.json").read_text())
    assert report["headline"]["auroc"] == pytest.approx(at_training["headline"]["auroc"])
    assert report["extra"]["tasks_seen_in_training"] == 0
    assert (out / "eval.json").is_file() and (out / "reliability.png").is_file()


def test_eval_on_all_tasks_reports_the_leak(trained: dict[str, Any]) -> None:
    result = run_cli(
        "eval",
        "value",
        trained["baseline"]["directory"],
        "--lake",
        trained["lake"],
        "--split",
        "all",
        "--out",
        str(trained["root"] / "eval-all"),
    )
    assert "were in the model's training split" in result.output


def test_score_stores_one_row_per_selected_trajectory(trained: dict[str, Any]) -> None:
    lake_dir, model = trained["lake"], trained["tiny"]
    where = "t.task_id IN ('synth-repo-0001', 'synth-repo-0002')"
    run_cli("score", model["directory"], "--lake", lake_dir, "--where", where)
    lake = tl.open_lake(lake_dir)
    rows = lake.sql(
        "SELECT count(*), min(score) >= 0, max(score) <= 1, count(DISTINCT source_snapshot) "
        f"FROM scores WHERE model_id = '{model['model_id']}'"
    ).rows()
    assert rows == [(12, True, True, 1)]


def test_rerank_prints_each_task_best_first(trained: dict[str, Any]) -> None:
    result = run_cli(
        "rerank",
        trained["baseline"]["directory"],
        "--lake",
        trained["lake"],
        "--where",
        "t.task_id = 'synth-repo-0003'",
        "-o",
        "json",
    )
    (group,) = json.loads(result.stdout)
    scores = [c["score"] for c in group["candidates"]]
    assert group["group"] == "synth-repo-0003" and len(scores) == 6
    assert scores == sorted(scores, reverse=True)
    assert [c["rank"] for c in group["candidates"]] == [1, 2, 3, 4, 5, 6]


def test_model_from_another_format_version_fails_clearly(
    trained: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "future-model"
    shutil.copytree(trained["tiny"]["directory"], copy)
    spec = json.loads((copy / "value_net.json").read_text())
    (copy / "value_net.json").write_text(json.dumps({**spec, "format": "trajlake.value-net/2"}))
    result = CliRunner().invoke(cli, ["rerank", str(copy), "--lake", trained["lake"]])
    assert result.exit_code == 1
    assert "trajlake.value-net/2" in result.output and "Traceback" not in result.output


def test_bad_recipe_names_the_field(trained: dict[str, Any], tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("name: x\nkind: value\ntrain: {epochs: 0}\n")
    result = CliRunner().invoke(
        cli, ["train", "value", "--lake", trained["lake"], "--config", str(recipe)]
    )
    assert result.exit_code == 1
    assert "bad.yaml" in result.output and "train.epochs" in result.output


def _candidates(lake_dir: str, task_id: str) -> list[dict[str, Any]]:
    from trajlake.export.jsonl import read_canonical

    return read_canonical(tl.open_lake(lake_dir), where=f"task_id = '{task_id}'")


def _openai_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for m in row["messages"]:
        message = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            message["tool_call_id"] = m["tool_call_id"]
        out.append(message)
    return out


def test_reranker_scores_every_candidate_shape_alike(trained: dict[str, Any]) -> None:
    from trajlake.schema import CanonicalTrajectory
    from trajlake.serve import Reranker

    reranker = Reranker.load(trained["tiny"]["directory"])
    rows = _candidates(trained["lake"], "synth-repo-0004")
    as_rows = reranker.score(rows)
    as_records = reranker.score([CanonicalTrajectory.model_validate(r) for r in rows])
    as_messages = reranker.score(
        [{"messages": _openai_messages(r), "final_output": r.get("final_output")} for r in rows]
    )
    assert as_rows == pytest.approx(as_records)
    assert as_rows == pytest.approx(as_messages)
    assert all(0.0 < s < 1.0 for s in as_rows) and len(set(as_rows)) > 1
    ranked = reranker.rank(rows)
    assert [r.index for r in ranked] == sorted(range(len(rows)), key=lambda i: -as_rows[i])
    best = reranker.best_of_n(rows)
    assert best.index == ranked[0].index and best.candidate is rows[best.index]


def test_hybrid_selection_follows_the_r2e_gym_rule() -> None:
    from trajlake.serve import hybrid_select

    scores = [0.9, 0.8, 0.7, 0.6, 0.1, 0.05]
    # Top max(3, 6 // 2) = 3 by score: 0, 1, 2; among them max regression (2 and 1), then max
    # testgen breaks the tie (1); the rest follow by score.
    signals = {"regression": [3, 5, 5, 9, 9, 9], "testgen": [0, 2, 1, 0, 0, 0]}
    assert hybrid_select(scores, signals) == [1, 2, 0, 3, 4, 5]
    assert hybrid_select(scores, {}) == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="regression"):
        hybrid_select(scores, {"regression": [1, 2]})


def test_http_endpoint_serves_the_trained_model(trained: dict[str, Any]) -> None:
    import requests

    from trajlake.serve import Reranker, serve_in_background

    reranker = Reranker.load(trained["tiny"]["directory"])
    rows = _candidates(trained["lake"], "synth-repo-0005")
    candidates = [_openai_messages(r) for r in rows]  # what a harness would send
    with serve_in_background(reranker) as base:
        health = requests.get(f"{base}/health", timeout=10).json()
        assert health["model"] == reranker.model_id
        reply = requests.post(
            f"{base}/v1/rerank", json={"candidates": candidates, "top_k": 2}, timeout=60
        ).json()
    expected = reranker.score(candidates)
    assert reply["scores"] == pytest.approx(expected)
    assert reply["best"] == max(range(len(expected)), key=lambda i: expected[i])
    assert reply["top_k"] == reply["order"][:2]
    with (
        pytest.raises(RuntimeError, match="did not start"),
        serve_in_background(reranker, host="0.0.0.0"),
    ):
        pass  # beyond loopback without a token: refused


@pytest.mark.gpu
def test_tiny_recipe_trains_in_bf16_and_serves_on_cuda(tmp_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from trajlake.serve import Reranker

    lake_dir = str(tmp_path / "lake")
    lake = tl.open_lake(lake_dir, create=True)
    lake.write(generate(SynthConfig(seed=4, n_tasks=20, rollouts_per_task=6)).trajectories)
    run_cli(
        "train",
        "value",
        "--lake",
        lake_dir,
        "--config",
        str(MODELS / "tiny.yaml"),
        "--out",
        str(tmp_path / "m"),
        "--set",
        "train.bf16=true",
        *FAST,
    )
    reranker = Reranker.load(tmp_path / "m")
    assert reranker.device == "cuda"
    rows = _candidates(lake_dir, "synth-repo-0001")
    scores = reranker.score(rows)
    assert len(scores) == 6 and all(0.0 < s < 1.0 for s in scores)


def test_lineage_names_the_input_snapshot_and_its_later_tags(tmp_path: Path) -> None:
    """A tag set after a commit that changed no input (a credit run) still names the data."""
    from trajlake.credit.runs import run_credit
    from trajlake.value.recipe import load_recipe
    from trajlake.value.train import train_value_model

    lake = tl.open_lake(tmp_path / "lake", create=True)
    written = lake.write(
        generate(SynthConfig(seed=5, n_tasks=20, rollouts_per_task=4)).trajectories
    )
    lake.tag("data-v1")
    run_credit(lake, estimator="outcome")
    lake.tag("with-credit")
    trained = train_value_model(
        lake, load_recipe(MODELS / "baseline.yaml"), at="with-credit", out=tmp_path / "m"
    )
    assert trained.card is not None
    assert trained.card.lineage.snapshot_id == written.snapshot_id
    assert trained.card.lineage.tags == ["with-credit", "data-v1"]
