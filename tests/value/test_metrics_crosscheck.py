"""The hand-written metrics against scipy and scikit-learn on random data.

trajlake computes its metrics with numpy alone (the base install has neither scipy nor
scikit-learn), so each formula is checked here against the reference implementation on many
random inputs, ties included: AUROC, Brier, ECE and reliability bins (value/metrics.py), ranks,
Spearman's ρ (plain, weighted, bootstrapped) and productive-turn detection (credit/evaluate.py),
the percentile bootstrap over tasks, and the Student-t quantile of the seeds report (loop/).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from trajlake.credit.evaluate import (
    bootstrap_spearman,
    detection,
    rankdata,
    spearman,
    weighted_spearman,
)
from trajlake.loop import mean_interval
from trajlake.loop._seeds import t_quantile
from trajlake.value.metrics import (
    auroc,
    auroc_per_task,
    bootstrap_ci,
    brier,
    ece,
    random_at_k,
    reliability_bins,
)

stats = pytest.importorskip("scipy.stats")
sk_metrics = pytest.importorskip("sklearn.metrics")
sk_calibration = pytest.importorskip("sklearn.calibration")

SEEDS = range(20)


def _scores_and_labels(seed: int, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    # Rounded, label-dependent scores: informative, with many ties (the hard case for ranks).
    scores = np.round(rng.normal(labels * 0.8, 1.0), 1)
    return scores, labels


@pytest.mark.parametrize("seed", SEEDS)
def test_auroc_equals_sklearn_roc_auc_with_ties(seed: int) -> None:
    scores, labels = _scores_and_labels(seed)
    assert auroc(scores, labels) == pytest.approx(sk_metrics.roc_auc_score(labels, scores))


def test_auroc_per_task_is_the_mean_of_sklearn_per_task() -> None:
    rng = np.random.default_rng(7)
    tasks = np.repeat(np.arange(12), 8)
    labels = rng.integers(0, 2, size=len(tasks))
    labels[tasks == 0] = 1  # a task with one class only is left out
    scores = np.round(rng.normal(labels * 0.5, 1.0), 1)
    expected = [
        sk_metrics.roc_auc_score(labels[tasks == t], scores[tasks == t])
        for t in range(12)
        if 0 < labels[tasks == t].sum() < 8
    ]
    mean, n = auroc_per_task(tasks, scores, labels)
    assert n == len(expected) == 11
    assert mean == pytest.approx(float(np.mean(expected)))


@pytest.mark.parametrize("seed", SEEDS)
def test_brier_equals_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    probs, labels = rng.random(50), rng.integers(0, 2, size=50)
    assert brier(probs, labels) == pytest.approx(sk_metrics.brier_score_loss(labels, probs))


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
def test_reliability_bins_and_ece_match_sklearn_calibration_curve(n_bins: int) -> None:
    rng = np.random.default_rng(n_bins)
    # Continuous probabilities (none on a bin edge, where the two conventions differ).
    probs = rng.beta(2.0, 3.0, size=400)
    labels = (rng.random(400) < probs**1.3).astype(int)
    frequency, mean_prob = sk_calibration.calibration_curve(
        labels, probs, n_bins=n_bins, strategy="uniform"
    )
    bins = [b for b in reliability_bins(probs, labels, n_bins) if b.count]
    assert [b.frequency for b in bins] == pytest.approx(list(frequency))
    assert [b.mean_prob for b in bins] == pytest.approx(list(mean_prob))
    counts, _ = np.histogram(probs, bins=np.linspace(0.0, 1.0, n_bins + 1))
    counts = counts[counts > 0]
    reference = float(np.sum(counts / len(probs) * np.abs(frequency - mean_prob)))
    assert ece(probs, labels, n_bins) == pytest.approx(reference)


@pytest.mark.parametrize("seed", SEEDS)
def test_rankdata_equals_scipy_average_ranks(seed: int) -> None:
    values = np.random.default_rng(seed).integers(0, 6, size=30).astype(float)
    assert rankdata(values) == pytest.approx(stats.rankdata(values, method="average"))


@pytest.mark.parametrize("seed", SEEDS)
def test_spearman_equals_scipy_spearmanr_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, size=25).astype(float)
    y = np.round(x + rng.normal(0, 2, size=25))
    assert spearman(list(x), list(y)) == pytest.approx(stats.spearmanr(x, y).statistic)


def test_spearman_is_none_where_scipy_is_nan() -> None:
    with pytest.warns(stats.ConstantInputWarning):
        reference = stats.spearmanr([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]).statistic
    assert math.isnan(reference)
    assert spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) is None


@pytest.mark.parametrize("seed", SEEDS)
def test_weighted_spearman_equals_scipy_on_the_expanded_multiset(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, size=20).astype(float)
    y = np.round(x + rng.normal(0, 2, size=20))
    weights = rng.integers(0, 4, size=20).astype(float)
    expected = stats.spearmanr(np.repeat(x, weights.astype(int)), np.repeat(y, weights.astype(int)))
    assert weighted_spearman(x, y, weights) == pytest.approx(expected.statistic)


def test_bootstrap_spearman_agrees_with_scipy_bootstrap_on_one_pair_per_cluster() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=80)
    y = x + rng.normal(0, 1.0, size=80)
    ours = bootstrap_spearman(list(x), list(y), list(range(80)), resamples=4000, seed=1)
    reference = stats.bootstrap(
        (x, y),
        lambda a, b: stats.spearmanr(a, b).statistic,
        paired=True,
        vectorized=False,
        n_resamples=4000,
        method="percentile",
        random_state=np.random.default_rng(2),
    ).confidence_interval
    assert ours is not None
    # Two Monte Carlo estimates of the same quantiles: equal up to resampling noise.
    assert ours[0] == pytest.approx(reference.low, abs=0.03)
    assert ours[1] == pytest.approx(reference.high, abs=0.03)


@pytest.mark.parametrize("seed", SEEDS)
def test_detection_equals_sklearn_precision_recall_f1(seed: int) -> None:
    rng = np.random.default_rng(seed)
    true, predicted = rng.normal(size=40), rng.normal(size=40)
    eps = 0.3
    got = detection(list(predicted), list(true), eps)
    p, r, f, _ = sk_metrics.precision_recall_fscore_support(
        true >= eps, predicted >= eps, average="binary", zero_division=0.0
    )
    assert (got.precision, got.recall, got.f1) == pytest.approx((p, r, f))


def test_bootstrap_ci_over_tasks_agrees_with_scipy_percentile_bootstrap() -> None:
    # One candidate per task: resampling tasks is resampling observations, as scipy does.
    rng = np.random.default_rng(11)
    labels = (rng.random(120) < 0.4).astype(int)
    tasks = np.arange(120)
    point, low, high = bootstrap_ci(
        lambda t, y: random_at_k(t, y), tasks, labels, n_boot=4000, seed=5
    )
    reference = stats.bootstrap(
        (labels,), np.mean, n_resamples=4000, method="percentile", random_state=6
    ).confidence_interval
    assert point == pytest.approx(labels.mean())
    assert low == pytest.approx(reference.low, abs=0.015)
    assert high == pytest.approx(reference.high, abs=0.015)
    # …and both agree with the normal approximation of a proportion's interval.
    half = 1.959964 * math.sqrt(point * (1 - point) / len(labels))
    assert (low, high) == pytest.approx((point - half, point + half), abs=0.02)


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 9, 30, 200])
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99])
def test_t_quantile_equals_scipy_t_ppf(dof: int, confidence: float) -> None:
    expected = stats.t.ppf(0.5 + confidence / 2, dof)
    assert t_quantile(confidence, dof) == pytest.approx(expected, rel=1e-9)


def test_mean_interval_equals_scipy_t_interval() -> None:
    values = [0.51, 0.55, 0.49, 0.58, 0.53, 0.50]
    got = mean_interval(values)
    low, high = stats.t.interval(
        0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values)
    )
    assert (got.low, got.high) == pytest.approx((low, high), rel=1e-9)
    assert got.sd == pytest.approx(float(np.std(values, ddof=1)))
