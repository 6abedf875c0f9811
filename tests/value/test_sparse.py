"""The sparse text value model: fitted from the floor and hybrid recipes on a synthetic lake
through the CLI, saved and loaded exactly, scoring lake rows and raw candidates alike; the
pairwise loss and the temperature on constructed cases; and the floors in `eval value`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _value_cli import MODELS, gen0_lake, run_cli

import trajlake as tl
from trajlake.errors import ModelFormatError
from trajlake.value import evaluate as evaluate_module
from trajlake.value._sparse_fit import FitOptions, Labelled, fit_sparse_model, fit_temperature
from trajlake.value.artifacts import load_model, model_kind, neural_model_dir
from trajlake.value.recipe import RecipeError, parse_recipe
from trajlake.value.serialize import as_conversation
from trajlake.value.sparse import SparseFeatures, SparseValueModel


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tagged synthetic lake with the floor and the hybrid recipe trained from the CLI."""
    root = tmp_path_factory.mktemp("sparse")
    lake_dir, batch = gen0_lake(root)
    out: dict[str, Any] = {"lake": lake_dir, "root": root, "batch": batch}
    for name in ("sparse", "hybrid"):
        result = run_cli(
            "train", "value", "--lake", lake_dir, "--config", str(MODELS / f"{name}.yaml"),
            "--at", "gen-0", "--out", str(root / name), "-o", "json",
        )  # fmt: skip
        out[name] = json.loads(result.stdout)
    return out


def test_recipes_train_sparse_models_that_rank_held_out_tasks(trained: dict[str, Any]) -> None:
    for name in ("sparse", "hybrid"):
        directory = Path(trained[name]["directory"])
        assert model_kind(directory) == "sparse"
        report = json.loads((directory / "eval" / "eval.json").read_text())
        head = report["headline"]
        # trajlake.synth leaves its outcome in the transcript: a text model must see it.
        assert head["auroc"] > 0.8
        assert head["best_at_k"] > head["random_at_k"]
    hybrid = SparseValueModel.load(trained["hybrid"]["directory"])
    assert len(hybrid.members) == 3
    assert len({m.seed for m in hybrid.members}) == 3
    assert hybrid.temperature != 1.0 and hybrid.features.scalars
    assert hybrid.info["loss"] == "pairwise" and hybrid.info["l2"] in (0.3, 1.0, 3.0)


def test_save_load_round_trip_gives_identical_scores(
    trained: dict[str, Any], tmp_path: Path
) -> None:
    model = SparseValueModel.load(trained["hybrid"]["directory"])
    raw = trained["batch"].trajectories[:20]
    model.save(tmp_path / "copy")
    again = SparseValueModel.load(tmp_path / "copy")
    np.testing.assert_array_equal(model.score(raw), again.score(raw))


def test_lake_rows_and_raw_candidates_score_identically(trained: dict[str, Any]) -> None:
    saved = load_model(trained["hybrid"]["directory"])
    lake = tl.open_lake(trained["lake"])
    raw = trained["batch"].trajectories[:24]
    ids = [t["trajectory_id"] for t in raw]
    from_lake = saved.score_lake(lake, lake.snapshot("gen-0").snapshot_id, ids)
    as_dicts = saved._impl.score(raw)
    as_messages = saved._impl.score(
        [{"messages": t["messages"], "final_output": t["final_output"]} for t in raw]
    )
    np.testing.assert_allclose(from_lake, as_dicts, rtol=0, atol=1e-12)
    np.testing.assert_allclose(from_lake, as_messages, rtol=0, atol=1e-12)
    assert len(set(np.round(from_lake, 6).tolist())) > 5  # real, varied scores


def test_plain_message_lists_score_like_lake_rows_without_a_final_output(
    trained: dict[str, Any],
) -> None:
    raw = trained["batch"].trajectories
    convs = [as_conversation(t) for t in raw]
    data = Labelled(convs, [int(t["resolved"]) for t in raw], [t["task_id"] for t in raw])
    features = SparseFeatures(fields=("actions", "observations", "issue", "recent"))
    model = fit_sparse_model(data, features, FitOptions())
    lake = tl.open_lake(trained["lake"])
    ids = [t["trajectory_id"] for t in raw[:16]]
    from_lake = model.score_lake(lake, lake.snapshot("gen-0").snapshot_id, ids)
    np.testing.assert_allclose(
        from_lake, model.score([t["messages"] for t in raw[:16]]), atol=1e-12
    )


def _candidate(task: int, tool: str) -> list[dict[str, Any]]:
    call = {"id": "c0", "type": "function", "function": {"name": tool, "arguments": "{}"}}
    return [
        {"role": "user", "content": f"fix issue number {task}"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "done"},
    ]


def _confounded() -> Labelled:
    """Within mixed tasks `alpha` wins over `beta`; but many all-fail tasks use only `alpha` and
    many all-pass tasks only `beta`, so pooled over tasks `beta` looks like the better word."""
    convs, labels, tasks = [], [], []
    for task in range(30):
        kind = task % 3
        pool = {0: [("alpha", 1), ("beta", 0)], 1: [("alpha", 0)] * 4, 2: [("beta", 1)] * 4}[kind]
        for tool, label in pool:
            convs.append(as_conversation(_candidate(task, tool)))
            labels.append(label)
            tasks.append(f"t{task}")
    return Labelled(convs, labels, tasks)


def test_pairwise_loss_ranks_within_tasks_where_pointwise_is_confounded() -> None:
    data = _confounded()
    features = SparseFeatures(fields=("actions",), buckets=1024)
    held_out = [as_conversation(_candidate(99, "alpha")), as_conversation(_candidate(99, "beta"))]
    pointwise = fit_sparse_model(data, features, FitOptions(l2=0.1))
    pairwise = fit_sparse_model(data, features, FitOptions(l2=0.1, loss="pairwise"))
    point_alpha, point_beta = pointwise.score_conversations(held_out)
    pair_alpha, pair_beta = pairwise.score_conversations(held_out)
    assert point_alpha < point_beta
    assert pair_alpha > pair_beta


def test_temperature_changes_calibration_not_ranking(trained: dict[str, Any]) -> None:
    raw = trained["batch"].trajectories
    by_task = sorted({t["task_id"] for t in raw})
    val_tasks = set(by_task[::4])

    def split(in_val: bool) -> Labelled:
        rows = [t for t in raw if (t["task_id"] in val_tasks) == in_val]
        return Labelled(
            [as_conversation(t) for t in rows],
            [int(t["resolved"]) for t in rows],
            [t["task_id"] for t in rows],
        )

    train, val = split(False), split(True)
    plain = fit_sparse_model(train, SparseFeatures(), FitOptions(l2=0.01), val)
    scaled = fit_sparse_model(train, SparseFeatures(), FitOptions(l2=0.01, temperature=True), val)
    assert plain.temperature == 1.0 and scaled.temperature != 1.0
    p, q = plain.score_conversations(val.convs), scaled.score_conversations(val.convs)
    assert not np.allclose(p, q)
    np.testing.assert_array_equal(np.argsort(p, kind="stable"), np.argsort(q, kind="stable"))
    y = np.asarray(val.labels)

    def log_loss(probs: np.ndarray) -> float:
        probs = np.clip(probs, 1e-12, 1 - 1e-12)
        return float(-np.mean(y * np.log(probs) + (1 - y) * np.log(1 - probs)))

    assert log_loss(q) < log_loss(p)


def test_fit_temperature_recovers_a_known_scale() -> None:
    rng = np.random.default_rng(0)
    true_logits = rng.normal(0, 2, 20000)
    labels = (rng.random(20000) < 1 / (1 + np.exp(-true_logits))).astype(int).tolist()
    assert fit_temperature(3 * true_logits, labels) == pytest.approx(3.0, rel=0.05)


def test_sparse_recipe_needs_no_backbone_and_checks_its_fields() -> None:
    recipe = parse_recipe({"name": "s", "kind": "sparse", "sparse": {"loss": "pairwise"}})
    assert recipe.backbone is None and recipe.sparse.loss == "pairwise"
    with pytest.raises(RecipeError, match=r"sparse\.fields"):
        parse_recipe({"name": "s", "kind": "sparse", "sparse": {"fields": ["nope"]}})


def test_the_neural_scorer_refuses_a_sparse_directory(trained: dict[str, Any]) -> None:
    with pytest.raises(ModelFormatError, match="sparse text model"):
        neural_model_dir(trained["sparse"]["directory"])


def _eval(trained: dict[str, Any], name: str, out: str, *extra: str) -> Any:
    return run_cli(
        "eval", "value", trained[name]["directory"], "--lake", trained["lake"],
        "--at", "gen-0", "--out", str(trained["root"] / out), "--n-boot", "200", *extra,
    )  # fmt: skip


def test_eval_reports_the_floors_with_intervals(trained: dict[str, Any]) -> None:
    result = _eval(trained, "hybrid", "eval-hybrid", "-o", "json")
    report = json.loads(result.stdout)
    floors = report["floors"]
    assert set(floors) == {"sparse-floor", "fewer-steps", "exit-status"}
    for name, floor in floors.items():
        assert floor["n_examples"] == report["n_examples"], name
        ci = floor["ci"]["best_at_k"]
        assert ci["low"] <= floor["headline"]["best_at_k"] <= ci["high"]
        delta = floor["model_minus_floor"]["best_at_k"]
        assert delta["point"] == pytest.approx(
            report["headline"]["best_at_k"] - floor["headline"]["best_at_k"]
        )
        assert delta["low"] <= delta["point"] <= delta["high"]
    # The floor fitted at evaluation reproduces the floor model trained from sparse.yaml.
    trained_floor = json.loads(
        (Path(trained["sparse"]["directory"]) / "eval" / "eval.json").read_text()
    )
    assert floors["sparse-floor"]["headline"]["auroc"] == pytest.approx(
        trained_floor["headline"]["auroc"]
    )
    markdown = (trained["root"] / "eval-hybrid" / "eval.md").read_text()
    assert "## Floors" in markdown and "| exit-status |" in markdown
    saved = json.loads((trained["root"] / "eval-hybrid" / "eval.json").read_text())
    assert set(saved["floors"]) == set(floors)


def test_eval_text_output_prints_the_floors_beside_the_model(trained: dict[str, Any]) -> None:
    output = _eval(trained, "hybrid", "eval-hybrid-text").output
    assert "floors on the same candidates" in output
    for name in ("this model", "sparse-floor", "fewer-steps", "exit-status"):
        assert f"  {name} " in output
    assert "model − floor, gap closed:" in output


def test_no_floors_skips_them(trained: dict[str, Any]) -> None:
    report = json.loads(_eval(trained, "hybrid", "eval-bare", "--no-floors", "-o", "json").output)
    assert "floors" not in report


def test_the_floor_model_is_not_fitted_twice(
    trained: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the floor was fitted again")

    monkeypatch.setattr(evaluate_module, "sparse_floor_scores", refuse)
    report = json.loads(_eval(trained, "sparse", "eval-floor", "-o", "json").output)
    delta = report["floors"]["sparse-floor"]["model_minus_floor"]["gap_closed"]
    assert delta == {"point": 0.0, "low": 0.0, "high": 0.0}


def test_heuristic_floors_read_turns_and_exit_status(trained: dict[str, Any]) -> None:
    lake = tl.open_lake(trained["lake"])
    raw = trained["batch"].trajectories[:12]
    ids = [t["trajectory_id"] for t in raw]
    scores = evaluate_module.heuristic_scores(lake, lake.snapshot("gen-0").snapshot_id, ids)
    turns = [sum(m["role"] == "assistant" for m in t["messages"]) for t in raw]
    np.testing.assert_array_equal(scores["fewer-steps"], -np.asarray(turns, dtype=float))
    clean = [float(bool(t["final_output"]) and t["status"] == "completed") for t in raw]
    np.testing.assert_array_equal(scores["exit-status"], clean)


def test_rerank_orders_each_task_by_the_sparse_model(trained: dict[str, Any]) -> None:
    result = run_cli(
        "rerank", trained["hybrid"]["directory"], "--lake", trained["lake"], "--at", "gen-0",
        "-o", "json",
    )  # fmt: skip
    rankings = json.loads(result.stdout)
    assert len(rankings) == 30
    saved = load_model(trained["hybrid"]["directory"])
    raw = {t["trajectory_id"]: t for t in trained["batch"].trajectories}
    for ranking in rankings[:3]:
        scores = [c["score"] for c in ranking["candidates"]]
        assert scores == sorted(scores, reverse=True)
        ids = [c["trajectory_id"] for c in ranking["candidates"]]
        np.testing.assert_allclose(saved._impl.score([raw[i] for i in ids]), scores, atol=1e-9)


def test_trajlake_serve_ranks_candidates_with_a_sparse_model(trained: dict[str, Any]) -> None:
    import threading

    import requests

    from trajlake.serve import SparseReranker, load_reranker, run_server

    reranker = load_reranker(trained["hybrid"]["directory"])
    assert isinstance(reranker, SparseReranker)
    raw = trained["batch"].trajectories[:6]  # one task's candidates
    candidates = [{"messages": t["messages"], "final_output": t["final_output"]} for t in raw]
    expected = SparseValueModel.load(trained["hybrid"]["directory"]).score(raw)
    stop, started, bound = threading.Event(), threading.Event(), []

    def ready(host: str, port: int) -> None:
        bound.append(port)
        started.set()

    server = threading.Thread(
        target=run_server,
        args=(reranker,),
        kwargs={"host": "127.0.0.1", "port": 0, "ready": ready, "stop": stop},
        daemon=True,
    )
    server.start()
    try:
        assert started.wait(10)
        url = f"http://127.0.0.1:{bound[0]}"
        health = requests.get(f"{url}/health", timeout=10).json()
        assert health["model"] == reranker.model_id and health["info"]["kind"] == "sparse"
        out = requests.post(f"{url}/v1/rerank", json={"candidates": candidates}, timeout=10).json()
        np.testing.assert_allclose(out["scores"], expected, atol=1e-9)
        assert out["best"] == int(np.argmax(expected))
        assert out["order"] == sorted(range(6), key=lambda i: (-expected[i], i))
    finally:
        stop.set()
        server.join(10)
