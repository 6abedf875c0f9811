"""The feature baseline: exact features, held-out discrimination, reranking, JSON round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trajlake as tl
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate
from trajlake.value.baseline import (
    NUMERIC_FEATURES,
    FeatureBaseline,
    evaluate_baseline,
    evaluate_model,
    trajectory_features,
)
from trajlake.value.dataset import load_examples, split_by_task


@pytest.fixture(scope="module")
def synth_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    lake = tl.open_lake(Path(tmp_path_factory.mktemp("synth")) / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=40, rollouts_per_task=8)).trajectories)
    return lake


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments, "type": "function"}


def _hand_made() -> dict[str, Any]:
    return {
        "trajectory_id": "hand-1",
        "task_id": "task-1",
        "harness": "h1",
        "policy_model": "p1",
        "status": "completed",
        "resolved": True,
        "total_tokens": 99,
        "final_output": "diff --git a/x.py b/x.py",
        "messages": [
            {"role": "system", "content": "be useful"},
            {"role": "user", "content": "fix the bug"},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [_call("c1", "bash", '{"command": "python -m pytest -x"}')],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "bash",
                "exit_code": 1,
                "content": "1 failed, 3 passed",
            },
            {
                "role": "assistant",
                "content": "edit",
                "tool_calls": [
                    _call("c2", "str_replace_editor", '{"command": "str_replace"}'),
                    _call("c3", "bash", '{"command": "ls"}'),
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c2",
                "name": "str_replace_editor",
                "content": "edited",
            },
            {
                "role": "tool",
                "tool_call_id": "c3",
                "name": "bash",
                "is_error": True,
                "content": "ls: cannot access",
            },
            {
                "role": "assistant",
                "content": "test again",
                "tool_calls": [_call("c4", "bash", '{"command": "pytest tests"}')],
            },
            {"role": "tool", "tool_call_id": "c4", "name": "bash", "content": "4 passed in 0.1s"},
            {"role": "assistant", "content": "done", "tool_calls": [_call("c5", "submit", "{}")]},
            {"role": "tool", "tool_call_id": "c5", "name": "submit", "content": "submitted"},
        ],
    }


def test_features_exact_on_hand_made_trajectory(lake: tl.Lake) -> None:
    other = {
        **_hand_made(),
        "trajectory_id": "hand-2",
        "harness": "h2",
        "policy_model": None,
        "status": "truncated",
        "final_output": "  ",
        "total_tokens": None,
        "messages": _hand_made()["messages"][:4],
    }
    lake.write([_hand_made(), other])
    x, names = trajectory_features(lake, ["hand-2", "hand-1"], top_n=1)
    assert x.shape == (2, len(NUMERIC_FEATURES) + 4)
    assert names[len(NUMERIC_FEATURES) :] == [
        "harness:h1",
        "harness:<other>",
        "policy:p1",
        "policy:<other>",
    ]
    row = dict(zip(names, x[1], strict=True))
    assert row["n_turns"] == 4
    assert row["log_total_tokens"] == pytest.approx(np.log(100))
    assert row["submitted"] == 1 and row["status_truncated"] == 0 and row["hit_limits"] == 0
    assert row["n_tool_calls"] == 5 and row["n_tool_errors"] == 2
    assert row["error_rate"] == pytest.approx(2 / 5)
    assert row["n_edits"] == 1 and row["n_test_runs"] == 2
    assert row["last_tests_passed"] == 1  # "4 passed" is the last report; "submitted" is not one
    assert row["harness:h1"] == 1 and row["policy:p1"] == 1
    short = dict(zip(names, x[0], strict=True))
    assert short["submitted"] == 0 and short["status_truncated"] == 1 and short["hit_limits"] == 1
    assert short["last_tests_passed"] == 0  # "1 failed, 3 passed"
    assert short["harness:<other>"] == 1 and short["policy:<other>"] == 1
    with pytest.raises(TrajlakeError, match="not in the lake"):
        trajectory_features(lake, ["hand-1", "nope"])


def test_features_of_a_trajectory_without_status(lake: tl.Lake) -> None:
    """Harnesses that record no status (τ-bench) read as not truncated / errored / timed out."""
    lake.write([{**_hand_made(), "status": None}])
    x, names = trajectory_features(lake, ["hand-1"])
    row = dict(zip(names, x[0], strict=True))
    assert np.isfinite(x).all()
    assert row["status_truncated"] == row["status_error"] == row["status_timeout"] == 0


def test_features_shape_on_synth(synth_lake: tl.Lake) -> None:
    ids = [e.trajectory_id for e in load_examples(synth_lake)]
    x, names = trajectory_features(synth_lake, ids)
    assert x.shape == (320, len(names)) and np.isfinite(x).all()


def test_baseline_beats_chance_on_held_out_tasks(synth_lake: tl.Lake) -> None:
    model, metrics = evaluate_baseline(synth_lake, test_frac=0.3, seed=0)
    train_tasks = {
        e.task_id
        for e in split_by_task(load_examples(synth_lake), val_frac=0.0, test_frac=0.3)["train"]
    }
    assert metrics["n_tasks"] >= 5 and model.coef is not None
    assert len(train_tasks) + metrics["n_tasks"] == 40
    # measured 0.72 (pooled) / 0.65 (per task) at seed 0; 0.72-0.82 pooled over split seeds 0-5
    assert metrics["auroc"] is not None and metrics["auroc"] > 0.6
    assert metrics["auroc_per_task"] is not None and metrics["auroc_per_task"] > 0.55
    assert 0.0 <= metrics["brier"] < 0.25 and 0.0 <= metrics["ece"] < 0.25
    assert set(metrics["rerank"]) == {1, 2, 4, 8}
    at4 = metrics["rerank"][4]["rerankable"]
    assert at4["n_tasks"] > 0 and at4["best_at_k"] is not None and at4["random_at_k"] is not None
    assert at4["best_at_k"] >= at4["random_at_k"]


def test_save_load_round_trip(synth_lake: tl.Lake, tmp_path: Path) -> None:
    examples = load_examples(synth_lake)
    splits = split_by_task(examples, val_frac=0.0, test_frac=0.3, seed=0)
    model = FeatureBaseline(l2=0.5).fit(splits["train"], synth_lake)
    model.save(tmp_path / "baseline.json")
    loaded = FeatureBaseline.load(tmp_path / "baseline.json")
    np.testing.assert_array_equal(
        model.predict_proba(splits["test"], synth_lake),
        loaded.predict_proba(splits["test"], synth_lake),
    )
    assert loaded.feature_names == model.feature_names
    assert evaluate_model(loaded, synth_lake, splits["test"]) == evaluate_model(
        model, synth_lake, splits["test"]
    )
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(TrajlakeError):
        FeatureBaseline.load(tmp_path / "bad.json")
    with pytest.raises(TrajlakeError, match="not fitted"):
        FeatureBaseline().predict_proba(examples, synth_lake)
