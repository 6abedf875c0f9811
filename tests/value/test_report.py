"""Evaluation reports: hand-computed reranking values, task-bootstrap CIs, files and tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from trajlake.value.metrics import (
    auroc,
    auroc_per_task,
    best_at_k,
    brier,
    ece,
    pass_at_k,
    random_at_k,
)
from trajlake.value.report import comparison_table, evaluation_report, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# 3 tasks x 4 candidates. a: c=2, the positives score highest; b: c=0; c: c=1, the positive
# scores lowest. So task a is reranked perfectly, c as badly as possible.
IDS = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
SCORES = [0.9, 0.8, 0.3, 0.2, 0.6, 0.5, 0.4, 0.1, 0.7, 0.6, 0.5, 0.2]
LABELS = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]


def _by_k(report: dict[str, Any], subset: str = "all") -> dict[int, dict[str, Any]]:
    return {row["k"]: row for row in report["rerank"][subset]}


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    return evaluation_report(IDS, SCORES, LABELS, model_id="m-small", n_boot=200)


def test_counts_and_default_ks(small: dict[str, Any]) -> None:
    assert small["n_examples"] == 12 and small["n_tasks"] == 3
    assert small["n_rerankable_tasks"] == 2
    assert small["positive_rate"] == pytest.approx(3 / 12)
    assert small["ks"] == [1, 2, 3, 4] and small["k_max"] == 4


def test_rerank_values_by_hand(small: dict[str, Any]) -> None:
    rows = _by_k(small)
    # Random@k = mean(c/n) = (1/2 + 0 + 1/4)/3 for every k
    assert all(r["random_at_k"] == pytest.approx(0.75 / 3) for r in rows.values())
    # Pass@2: a 1 - C(2,2)/C(4,2) = 5/6, b 0, c 1 - C(3,2)/C(4,2) = 1/2
    assert rows[2]["pass_at_k"] == pytest.approx((5 / 6 + 0.5) / 3)
    # Best@2: a picks a positive unless both drawn are negatives (1 - 1/6); c only wins when
    # its positive is drawn with... nothing (it always loses to any other candidate): 0
    assert rows[2]["best_at_k"] == pytest.approx((5 / 6) / 3)
    # Best@4 = top-1 of the whole pool: a right, b and c wrong
    assert rows[4]["best_at_k"] == pytest.approx(1 / 3)
    assert rows[4]["pass_at_k"] == pytest.approx(2 / 3)
    assert rows[4]["gap_closed"] == pytest.approx((1 / 3 - 0.25) / (2 / 3 - 0.25))
    rr = _by_k(small, "rerankable")
    assert rr[4]["n_tasks"] == 2
    assert rr[4]["best_at_k"] == pytest.approx(0.5)
    assert rr[4]["random_at_k"] == pytest.approx(0.375)
    assert rr[4]["pass_at_k"] == pytest.approx(1.0)


def test_report_matches_metric_functions(small: dict[str, Any]) -> None:
    for k, row in _by_k(small).items():
        assert row["best_at_k"] == best_at_k(IDS, SCORES, LABELS, k)
        assert row["pass_at_k"] == pass_at_k(IDS, LABELS, k)
        assert row["random_at_k"] == random_at_k(IDS, LABELS)
    per_task, n_used = auroc_per_task(IDS, SCORES, LABELS)
    assert small["auroc"] == auroc(SCORES, LABELS)
    assert (small["auroc_per_task"], small["n_auroc_tasks"]) == (per_task, n_used) == (0.5, 2)
    assert small["brier"] == brier(SCORES, LABELS)
    assert small["ece"] == ece(SCORES, LABELS)
    assert sum(b["count"] for b in small["reliability_bins"]) == 12
    assert small["notes"] == []


def _noisy(seed: int = 3) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    ids = np.repeat(np.arange(40), 6)
    labels = rng.integers(0, 2, size=ids.size)
    scores = np.clip(0.35 * labels + 0.65 * rng.random(ids.size), 0.0, 1.0)
    return evaluation_report(ids, scores, labels, model_id="m", n_boot=300, seed=seed)


def test_ci_brackets_point() -> None:
    report = _noisy()
    ci = report["ci"]
    assert ci["k"] == 6 and ci["level"] == 0.95
    keys = ["best_at_k", "random_at_k", "pass_at_k", "gap_closed", "gap_closed_rerankable"]
    for key in [*keys, "auroc", "auroc_per_task", "brier", "ece"]:
        interval = ci[key]
        assert interval["low"] <= interval["point"] <= interval["high"], key
        if key != "pass_at_k":  # Pass@6 is 1 on every resample of these tasks
            assert interval["low"] < interval["high"], key
    assert ci["best_at_k"]["point"] == report["rerank"]["all"][-1]["best_at_k"]
    assert ci["ece"]["point"] == report["ece"]


def test_identical_tasks_give_degenerate_intervals() -> None:
    # every resample draws copies of the same task, so each resampled metric equals the point:
    # checks the bootstrap's own Brier / ECE / AUROC formulas against the metric functions
    one_ids, one_scores, one_labels = ["t"] * 4, [0.9, 0.35, 0.3, 0.05], [1, 0, 1, 0]
    ids = [f"{i}{t}" for i in range(5) for t in one_ids]
    report = evaluation_report(
        ids, one_scores * 5, one_labels * 5, model_id="m", n_boot=50, n_bins=4
    )
    for key, interval in report["ci"].items():
        if isinstance(interval, dict):
            assert interval["low"] == pytest.approx(interval["point"]), key
            assert interval["high"] == pytest.approx(interval["point"]), key


def test_bradley_terry_scores_null_calibration() -> None:
    scores = [3.0 * s - 1.0 for s in SCORES]  # any monotone map: reranking is unchanged
    report = evaluation_report(IDS, scores, LABELS, model_id="bt", n_boot=50, probabilities=False)
    assert report["brier"] is None and report["ece"] is None
    assert report["reliability_bins"] is None
    assert report["ci"]["brier"] is None and report["ci"]["ece"] is None
    assert any("not probabilities" in note for note in report["notes"])
    assert report["rerank"] == evaluation_report(IDS, SCORES, LABELS, model_id="p")["rerank"]
    with pytest.raises(ValueError, match="probabilities=False"):
        evaluation_report(IDS, scores, LABELS, model_id="bt")


def test_deterministic_and_seeded(small: dict[str, Any]) -> None:
    again = evaluation_report(IDS, SCORES, LABELS, model_id="m-small", n_boot=200)
    assert json.dumps(again, sort_keys=True) == json.dumps(small, sort_keys=True)
    first, other = _noisy(seed=3), _noisy(seed=9)
    assert other["rerank"] == first["rerank"] and other["ece"] == first["ece"]
    assert other["ci"]["auroc"]["point"] == first["ci"]["auroc"]["point"]
    assert other["ci"]["auroc"]["low"] != first["ci"]["auroc"]["low"]


def test_ks_override_and_extra() -> None:
    report = evaluation_report(
        IDS, SCORES, LABELS, model_id="m", ks=[2, 1], n_boot=20, extra={"split": "test"}
    )
    assert report["ks"] == [1, 2] and report["k_max"] == 2 and report["ci"]["k"] == 2
    assert report["extra"] == {"split": "test"}


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="equal length"):
        evaluation_report(IDS, SCORES[:-1], LABELS, model_id="m")
    with pytest.raises(ValueError, match="0 or 1"):
        evaluation_report(IDS, SCORES, [2] * 12, model_id="m")
    with pytest.raises(ValueError, match="n_boot"):
        evaluation_report(IDS, SCORES, LABELS, model_id="m", n_boot=0)


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE and path.stat().st_size > 0
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_write_report_files(small: dict[str, Any], tmp_path: Path) -> None:
    paths = write_report(small, tmp_path / "out")
    assert {p.name for p in paths.values()} == {
        "eval.json",
        "eval.md",
        "best_at_k.png",
        "reliability.png",
    }
    text = paths["json"].read_text()
    assert json.loads(text) == json.loads(json.dumps(small))
    assert text == json.dumps(small, indent=2, sort_keys=True) + "\n"
    _assert_png(paths["best_at_k"])
    _assert_png(paths["reliability"])
    markdown = paths["markdown"].read_text()
    assert markdown.startswith("# Evaluation: m-small")
    assert "| Best@4 | 0.333 | [" in markdown and "| ECE |" in markdown


def test_write_report_skips_reliability_without_probabilities(tmp_path: Path) -> None:
    report = evaluation_report(IDS, SCORES, LABELS, model_id="bt", n_boot=20, probabilities=False)
    paths = write_report(report, tmp_path, name="bt")
    assert set(paths) == {"json", "markdown", "best_at_k"}
    assert paths["best_at_k"].name == "bt_best_at_k.png"
    _assert_png(paths["best_at_k"])
    assert "| Brier | – | – |" in paths["markdown"].read_text()


def test_comparison_table(small: dict[str, Any]) -> None:
    bt = evaluation_report(IDS, SCORES, LABELS, model_id="bt", n_boot=20, probabilities=False)
    lines = comparison_table({"small": small, "bt": bt}).splitlines()
    assert lines[0].startswith("| model | n | Best@n | Random@n | Pass@n | gap closed")
    assert len(lines) == 4
    assert lines[2] == (
        "| small | 4 | 0.333 | 0.250 | 0.667 | 0.200 / 0.200 | "
        f"{small['auroc']:.3f} | {small['ece']:.3f} |"
    )
    assert lines[3].startswith("| bt | 4 | 0.333 |") and lines[3].endswith(" | – |")
    with pytest.raises(ValueError):
        comparison_table({})
