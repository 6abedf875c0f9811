"""Tiny hand-computable cases and brute-force checks for trajlake.value.metrics."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from trajlake.value.metrics import (
    auroc,
    auroc_per_task,
    best_at_k,
    bootstrap_ci,
    brier,
    ece,
    gap_closed,
    pass_at_k,
    random_at_k,
    reliability_bins,
    rerank_report,
)

# one task: scores [0.9, 0.5, 0.1], labels [0, 1, 1]
T3 = ["a", "a", "a"]
S3 = [0.9, 0.5, 0.1]
Y3 = [0, 1, 1]


def brute_best(scores: list[float], labels: list[int], k: int) -> float:
    """Mean over all k-subsets of the mean label of the subset's tied maxima."""
    values = []
    for sub in itertools.combinations(range(len(scores)), k):
        top = max(scores[i] for i in sub)
        values.append(np.mean([labels[i] for i in sub if scores[i] == top]))
    return float(np.mean(values))


def test_best_at_k_three_candidates_exact() -> None:
    # subsets {0,1} -> 0, {0,2} -> 0, {1,2} -> 1
    assert best_at_k(T3, S3, Y3, 2) == pytest.approx(1 / 3, abs=1e-15)
    assert best_at_k(T3, S3, Y3, 1) == pytest.approx(2 / 3)  # = Random@1
    assert best_at_k(T3, S3, Y3, 3) == 0.0  # global top is wrong


def test_best_at_1_and_n_and_clipping() -> None:
    ids = ["a"] * 4 + ["b"] * 3
    scores = [0.2, 0.7, 0.4, 0.1, 0.3, 0.9, 0.5]
    labels = [1, 0, 0, 1, 0, 1, 0]
    # Best@1 = random pick = mean pass rate: (2/4 + 1/3) / 2
    assert best_at_k(ids, scores, labels, 1) == pytest.approx((0.5 + 1 / 3) / 2)
    # Best@n = label of each task's global top: a -> 0 (0.7), b -> 1 (0.9)
    assert best_at_k(ids, scores, labels, 4) == pytest.approx(0.5)
    # k larger than a pool is clipped to the pool size
    assert best_at_k(ids, scores, labels, 16) == pytest.approx(0.5)


def test_best_at_k_ties_average_tied_maxima() -> None:
    # all tied: top pick is the mean label of the subset -> expectation c/n for every k
    ids, scores, labels = ["t"] * 4, [0.5] * 4, [1, 0, 0, 1]
    for k in range(1, 5):
        assert best_at_k(ids, scores, labels, k) == pytest.approx(0.5)
    scores2, labels2 = [0.9, 0.9, 0.2, 0.1], [1, 0, 0, 1]
    for k in range(1, 5):
        assert best_at_k(["t"] * 4, scores2, labels2, k) == pytest.approx(
            brute_best(scores2, labels2, k)
        )


def test_best_at_k_matches_brute_force_enumeration() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 8))
        scores = rng.permutation(n).astype(float).tolist()  # distinct: no ties
        labels = rng.integers(0, 2, size=n).tolist()
        for k in range(1, n + 1):
            exact = best_at_k(["x"] * n, scores, labels, k)
            assert exact == pytest.approx(brute_best(scores, labels, k), abs=1e-12)


def test_best_at_k_sampled_close_to_exact_and_seeded() -> None:
    ids = ["a"] * 6 + ["b"] * 5
    rng = np.random.default_rng(1)
    scores = rng.random(11)
    labels = [0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1]
    exact = best_at_k(ids, scores, labels, 3)
    sampled = best_at_k(ids, scores, labels, 3, n_draws=20000, seed=3)
    assert sampled == pytest.approx(exact, abs=0.02)
    assert sampled == best_at_k(ids, scores, labels, 3, n_draws=20000, seed=3)


def test_pass_random_gap_closed() -> None:
    assert pass_at_k(T3, Y3, 1) == pytest.approx(2 / 3)
    assert pass_at_k(T3, Y3, 2) == 1.0  # 1 - C(1,2)/C(3,2)
    assert random_at_k(T3, Y3) == pytest.approx(2 / 3)
    # (1/3 - 2/3) / (1 - 2/3) = -1
    assert gap_closed(T3, S3, Y3, 2) == pytest.approx(-1.0)
    assert gap_closed(T3, S3, Y3, 1) is None  # Pass@1 = Random@1
    labels = [1, 0, 0, 1, 0, 0, 0, 1]
    for k in range(1, 9):
        assert pass_at_k(["t"] * 8, labels, k) == pytest.approx(1 - comb(5, k) / comb(8, k))


def test_rerank_report_subsets_and_counts() -> None:
    ids = ["a"] * 3 + ["b"] * 2 + ["c"] * 2
    scores = [0.9, 0.5, 0.1, 0.3, 0.2, 0.8, 0.1]
    labels = [0, 1, 1, 1, 1, 0, 0]  # a rerankable, b all pass, c all fail
    report = rerank_report(ids, scores, labels, ks=(1, 2, 4))
    r2 = report[2]["rerankable"]
    assert r2["n_tasks"] == 1 and r2["n_tasks_short"] == 0
    assert r2["best_at_k"] == pytest.approx(1 / 3)
    assert r2["random_at_k"] == pytest.approx(2 / 3)
    assert r2["pass_at_k"] == 1.0
    assert r2["gap_closed"] == pytest.approx(-1.0)
    a2 = report[2]["all"]
    assert a2["n_tasks"] == 3
    assert a2["best_at_k"] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert a2["random_at_k"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert a2["pass_at_k"] == pytest.approx(2 / 3)
    assert a2["gap_closed"] == pytest.approx(-1.0)
    assert report[4]["all"]["n_tasks_short"] == 3
    assert report[1]["all"]["gap_closed"] is None
    assert a2["best_at_k"] == best_at_k(ids, scores, labels, 2)
    assert r2["best_at_k"] == best_at_k(ids, scores, labels, 2, subset="rerankable")


def test_rerank_report_empty_rerankable_subset() -> None:
    report = rerank_report(["a", "a"], [0.1, 0.2], [1, 1], ks=(1,))
    assert report[1]["rerankable"]["n_tasks"] == 0
    assert report[1]["rerankable"]["best_at_k"] is None
    with pytest.raises(ValueError, match="no tasks"):
        best_at_k(["a", "a"], [0.1, 0.2], [1, 1], 1, subset="rerankable")


def test_auroc_with_ties() -> None:
    # pairs (pos, neg): (0.5,0.5)x2 -> 0.5 each, (0.9,0.5)x2 -> 1 each: 3/4
    assert auroc([0.5, 0.5, 0.5, 0.9], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auroc([0.1, 0.2, 0.3], [0, 1, 1]) == 1.0
    assert auroc([0.3, 0.2, 0.1], [0, 1, 1]) == 0.0
    assert auroc([0.3, 0.2], [1, 1]) is None


def test_auroc_per_task() -> None:
    ids = ["a"] * 4 + ["b"] * 2 + ["c"] * 2
    scores = [0.5, 0.5, 0.5, 0.9, 0.2, 0.1, 0.4, 0.3]
    labels = [0, 0, 1, 1, 1, 0, 1, 1]  # c has one class -> skipped
    mean, count = auroc_per_task(ids, scores, labels)
    assert count == 2
    assert mean == pytest.approx((0.75 + 1.0) / 2)
    assert auroc_per_task(["a"], [0.1], [1]) == (None, 0)


def test_brier_ece_reliability() -> None:
    probs, labels = [0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1]
    assert brier(probs, labels) == pytest.approx((0.04 + 0.64 + 0.04 + 0.04) / 4)
    # bin 2: |0.5 - 0.2| * 2/4 = 0.15; bin 8: |1.0 - 0.8| * 2/4 = 0.1
    assert ece(probs, labels) == pytest.approx(0.25)
    bins = reliability_bins(probs, labels)
    assert len(bins) == 10 and sum(b.count for b in bins) == 4
    assert bins[2].mean_prob == pytest.approx(0.2) and bins[2].frequency == 0.5
    assert bins[8].count == 2 and bins[8].frequency == 1.0
    assert bins[0].count == 0 and bins[0].mean_prob is None
    assert reliability_bins([1.0, 0.0], [1, 0], n_bins=4)[3].count == 1  # p = 1 -> last bin
    assert ece([0.0, 1.0], [0, 1]) == 0.0


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        best_at_k(["a", "a"], [0.1], [1, 0], 1)
    with pytest.raises(ValueError, match="0 or 1"):
        auroc([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(["a"], [1], 0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        brier([1.5], [1])
    with pytest.raises(ValueError, match="finite"):
        auroc([float("nan"), 0.1], [0, 1])


def _synthetic(n_tasks: int = 30, seed: int = 0) -> tuple[list[int], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = [t for t in range(n_tasks) for _ in range(6)]
    labels = rng.integers(0, 2, size=len(ids))
    scores = labels * 0.3 + rng.random(len(ids))
    return ids, scores, labels


def test_bootstrap_ci_contains_point_and_is_seeded() -> None:
    ids, scores, labels = _synthetic()

    def best4(t: np.ndarray, s: np.ndarray, y: np.ndarray) -> float:
        return best_at_k(t, s, y, 4)

    point, low, high = bootstrap_ci(best4, ids, scores, labels, n_boot=200, seed=5)
    assert point == best_at_k(ids, scores, labels, 4)
    assert low <= point <= high and low < high
    assert bootstrap_ci(best4, ids, scores, labels, n_boot=200, seed=5) == (point, low, high)
    assert bootstrap_ci(best4, ids, scores, labels, n_boot=200, seed=6) != (point, low, high)


def test_bootstrap_resamples_whole_tasks() -> None:
    # each task's pool must stay intact: every resample sees pools of exactly 6 candidates
    ids, scores, labels = _synthetic(n_tasks=5)
    sizes: set[int] = set()

    def pool_sizes(t: np.ndarray, s: np.ndarray, y: np.ndarray) -> float:
        sizes.update(np.unique(t, return_counts=True)[1].tolist())
        assert len(np.unique(t)) == 5
        return 0.0

    bootstrap_ci(pool_sizes, ids, scores, labels, n_boot=50)
    assert sizes == {6}
