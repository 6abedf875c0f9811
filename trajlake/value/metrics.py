"""Evaluation metrics for value and reranking models (pure numpy; methods.md §7).

Reranking metrics (Best@k, Random@k, Pass@k, gap closed) are computed per task and averaged over
tasks; discrimination (AUROC) and calibration (Brier, ECE, reliability bins) work on candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import comb
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

Subset = Literal["all", "rerankable"]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class RerankMetrics(TypedDict):
    """Task-averaged reranking metrics at one k on one subset of tasks (None when it is empty)."""

    best_at_k: float | None
    random_at_k: float | None
    pass_at_k: float | None
    gap_closed: float | None
    n_tasks: int
    n_tasks_short: int  # tasks with fewer than k candidates (k is clipped to their pool size)


class RerankAtK(TypedDict):
    """Reranking metrics at one k on all tasks and on the rerankable subset (0 < c < n)."""

    all: RerankMetrics
    rerankable: RerankMetrics


@dataclass(frozen=True)
class ReliabilityBin:
    """One equal-width bin of a reliability diagram: [lower, upper), the last bin closed."""

    lower: float
    upper: float
    mean_prob: float | None
    frequency: float | None
    count: int


# --------------------------------------------------------------------------- validation, grouping


def _as_scores(scores: npt.ArrayLike, name: str = "scores") -> FloatArray:
    arr = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    return arr


def _as_labels(labels: npt.ArrayLike) -> IntArray:
    arr = np.asarray(labels).reshape(-1)
    if arr.size and not np.all((arr == 0) | (arr == 1)):
        raise ValueError("labels must be 0 or 1")
    return arr.astype(np.int64)


def _as_probs(probs: npt.ArrayLike) -> FloatArray:
    arr = _as_scores(probs, "probs")
    if np.any((arr < 0.0) | (arr > 1.0)):
        raise ValueError("probs must lie in [0, 1]")
    return arr


def _check_lengths(**arrays: npt.NDArray[Any]) -> None:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs must have equal lengths, got {lengths}")
    if 0 in lengths.values():
        raise ValueError("inputs must not be empty")


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")


def _groups(task_ids: npt.ArrayLike) -> list[IntArray]:
    """Candidate indices of each task (tasks in sorted id order, candidates in input order)."""
    ids = np.asarray(task_ids).reshape(-1)
    _, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    return [g.astype(np.int64) for g in np.split(order, bounds)]


def _prepare(
    task_ids: npt.ArrayLike, scores: npt.ArrayLike, labels: npt.ArrayLike
) -> tuple[list[IntArray], FloatArray, IntArray]:
    ids = np.asarray(task_ids).reshape(-1)
    s, y = _as_scores(scores), _as_labels(labels)
    _check_lengths(task_ids=ids, scores=s, labels=y)
    return _groups(ids), s, y


def _select(groups: list[IntArray], labels: IntArray, subset: Subset) -> list[IntArray]:
    if subset == "all":
        return groups
    if subset == "rerankable":
        return [g for g in groups if 0 < int(labels[g].sum()) < len(g)]
    raise ValueError(f"subset must be 'all' or 'rerankable', got {subset!r}")


def _mean_or_raise(values: list[float], subset: Subset) -> float:
    if not values:
        raise ValueError(f"no tasks in subset {subset!r}")
    return float(np.mean(values))


# --------------------------------------------------------------------------- per-task formulas


def _task_pass(y: IntArray, k: int) -> float:
    n, c = len(y), int(y.sum())
    k = min(k, n)
    # int / int true division rounds correctly even when the binomials are huge, and at k = 1 it
    # gives exactly the float of c/n, so Pass@1 - Random@1 is 0.0 rather than rounding noise
    total = comb(n, k)
    return (total - comb(n - c, k)) / total


def _task_best_exact(s: FloatArray, y: IntArray, k: int) -> float:
    """Exact E[label of the top-scored candidate in a uniformly random k-subset].

    Ties are resolved by averaging the labels of the tied maxima inside the subset (R2E-Gym), which
    equals a uniformly random tie-break. A tie group of m candidates below a strictly higher ones
    supplies the pick iff no higher one is drawn and at least one member is:
    P = (C(n-a, k) - C(n-a-m, k)) / C(n, k); given that, the pick's expected label is the group mean
    by symmetry. Without ties this is C(n-r, k-1)/C(n, k) for the candidate of rank r.
    """
    n = len(s)
    k = min(k, n)
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    total = comb(n, k)
    best = 0.0
    start = 0
    while start < n and n - start >= k:
        end = start + 1
        while end < n and s_sorted[end] == s_sorted[start]:
            end += 1
        p_group = (comb(n - start, k) - comb(n - end, k)) / total
        best += p_group * float(y_sorted[start:end].mean())
        start = end
    return best


def _task_best_sampled(
    s: FloatArray, y: IntArray, k: int, n_draws: int, rng: np.random.Generator
) -> float:
    k = min(k, len(s))
    subsets = rng.random((n_draws, len(s))).argsort(axis=1)[:, :k]
    sub_scores = s[subsets]
    is_max = sub_scores == sub_scores.max(axis=1, keepdims=True)
    picked = (y[subsets] * is_max).sum(axis=1) / is_max.sum(axis=1)
    return float(picked.mean())


# --------------------------------------------------------------------------- reranking metrics


def best_at_k(
    task_ids: npt.ArrayLike,
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    k: int,
    *,
    subset: Subset = "all",
    n_draws: int | None = None,
    seed: int = 0,
) -> float:
    """Expected success when the model picks the top-scored of k random candidates per task.

    Args:
        task_ids: Task id of each candidate.
        scores: Model score of each candidate (higher is better).
        labels: 1 if the candidate succeeds, else 0.
        k: Subset size; clipped to a task's pool size when the pool is smaller.
        subset: ``"all"`` tasks or only ``"rerankable"`` ones (0 < c < n).
        n_draws: None (default) computes the expectation exactly by combinatorics; an int instead
            averages over that many random k-subsets per task (SWE-Gym style Monte Carlo).
        seed: Seed for the Monte Carlo draws.

    Returns:
        Best@k averaged over tasks. Tied maxima in a subset score the mean of their labels.
    """
    _check_k(k)
    groups, s, y = _prepare(task_ids, scores, labels)
    groups = _select(groups, y, subset)
    if n_draws is None:
        values = [_task_best_exact(s[g], y[g], k) for g in groups]
    else:
        if n_draws < 1:
            raise ValueError(f"n_draws must be >= 1, got {n_draws}")
        rng = np.random.default_rng(seed)
        values = [_task_best_sampled(s[g], y[g], k, n_draws, rng) for g in groups]
    return _mean_or_raise(values, subset)


def random_at_k(task_ids: npt.ArrayLike, labels: npt.ArrayLike, *, subset: Subset = "all") -> float:
    """Expected success of a uniformly random pick (mean over tasks of c/n; independent of k)."""
    ids, y = np.asarray(task_ids).reshape(-1), _as_labels(labels)
    _check_lengths(task_ids=ids, labels=y)
    groups = _select(_groups(ids), y, subset)
    return _mean_or_raise([float(y[g].mean()) for g in groups], subset)


def pass_at_k(
    task_ids: npt.ArrayLike, labels: npt.ArrayLike, k: int, *, subset: Subset = "all"
) -> float:
    """Oracle Pass@k = 1 - C(n-c, k)/C(n, k) (unbiased estimator), averaged over tasks."""
    _check_k(k)
    ids, y = np.asarray(task_ids).reshape(-1), _as_labels(labels)
    _check_lengths(task_ids=ids, labels=y)
    groups = _select(_groups(ids), y, subset)
    return _mean_or_raise([_task_pass(y[g], k) for g in groups], subset)


def _gap(best: float, rand: float, oracle: float) -> float | None:
    denom = oracle - rand
    # a denominator at rounding-noise level (Pass@k = Random@k mathematically) would give garbage
    return None if abs(denom) <= 1e-12 else (best - rand) / denom


def gap_closed(
    task_ids: npt.ArrayLike,
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    k: int,
    *,
    subset: Subset = "all",
) -> float | None:
    """(Best@k - Random@k) / (Pass@k - Random@k) of the task averages; None if Pass@k = Random@k."""
    best = best_at_k(task_ids, scores, labels, k, subset=subset)
    rand = random_at_k(task_ids, labels, subset=subset)
    return _gap(best, rand, pass_at_k(task_ids, labels, k, subset=subset))


def _subset_metrics(s: FloatArray, y: IntArray, groups: list[IntArray], k: int) -> RerankMetrics:
    if not groups:
        return RerankMetrics(
            best_at_k=None,
            random_at_k=None,
            pass_at_k=None,
            gap_closed=None,
            n_tasks=0,
            n_tasks_short=0,
        )
    best = float(np.mean([_task_best_exact(s[g], y[g], k) for g in groups]))
    rand = float(np.mean([y[g].mean() for g in groups]))
    oracle = float(np.mean([_task_pass(y[g], k) for g in groups]))
    return RerankMetrics(
        best_at_k=best,
        random_at_k=rand,
        pass_at_k=oracle,
        gap_closed=_gap(best, rand, oracle),
        n_tasks=len(groups),
        n_tasks_short=sum(len(g) < k for g in groups),
    )


def rerank_report(
    task_ids: npt.ArrayLike,
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    ks: Sequence[int] = (1, 2, 4, 8, 16),
) -> dict[int, RerankAtK]:
    """Best@k, Random@k, Pass@k and gap closed (exact) for each k, on all and rerankable tasks."""
    for k in ks:
        _check_k(k)
    groups, s, y = _prepare(task_ids, scores, labels)
    rerankable = _select(groups, y, "rerankable")
    return {
        k: RerankAtK(
            all=_subset_metrics(s, y, groups, k),
            rerankable=_subset_metrics(s, y, rerankable, k),
        )
        for k in ks
    }


# --------------------------------------------------------------------------- discrimination


def _average_ranks(values: FloatArray) -> FloatArray:
    """1-based ranks with ties given their average rank (like scipy.stats.rankdata)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts).astype(np.float64)
    avg = ends - (counts - 1) / 2.0
    return avg[inverse]


def _auroc(s: FloatArray, y: IntArray) -> float | None:
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = float(_average_ranks(s)[y == 1].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def auroc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float | None:
    """Pooled AUROC = P(s+ > s-) + P(s+ = s-)/2 (Mann-Whitney); None if a class is absent."""
    s, y = _as_scores(scores), _as_labels(labels)
    _check_lengths(scores=s, labels=y)
    return _auroc(s, y)


def auroc_per_task(
    task_ids: npt.ArrayLike, scores: npt.ArrayLike, labels: npt.ArrayLike
) -> tuple[float | None, int]:
    """Mean within-task AUROC over tasks with both classes, and how many such tasks there are."""
    groups, s, y = _prepare(task_ids, scores, labels)
    values = [v for g in groups if (v := _auroc(s[g], y[g])) is not None]
    return (float(np.mean(values)) if values else None), len(values)


# --------------------------------------------------------------------------- calibration


def brier(probs: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Brier score (1/N) Σ (p - y)²."""
    p, y = _as_probs(probs), _as_labels(labels)
    _check_lengths(probs=p, labels=y)
    return float(np.mean((p - y) ** 2))


def reliability_bins(
    probs: npt.ArrayLike, labels: npt.ArrayLike, n_bins: int = 10
) -> list[ReliabilityBin]:
    """Equal-width bins on [0, 1] with mean probability, positive frequency and count per bin.

    Bins are [i/n_bins, (i+1)/n_bins), the last one closed so p = 1 lands in it. Empty bins are
    kept (count 0, mean_prob and frequency None) so every diagram has n_bins bars.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    p, y = _as_probs(probs), _as_labels(labels)
    _check_lengths(probs=p, labels=y)
    index = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    bins = []
    for b in range(n_bins):
        mask = index == b
        count = int(mask.sum())
        bins.append(
            ReliabilityBin(
                lower=b / n_bins,
                upper=(b + 1) / n_bins,
                mean_prob=float(p[mask].mean()) if count else None,
                frequency=float(y[mask].mean()) if count else None,
                count=count,
            )
        )
    return bins


def ece(probs: npt.ArrayLike, labels: npt.ArrayLike, n_bins: int = 10) -> float:
    """Expected calibration error Σ_b (|B_b|/N)·|freq(B_b) - mean_p(B_b)| over equal-width bins."""
    bins = reliability_bins(probs, labels, n_bins)
    total = sum(b.count for b in bins)
    return float(
        sum(
            b.count / total * abs(b.frequency - b.mean_prob)
            for b in bins
            if b.frequency is not None and b.mean_prob is not None
        )
    )


# --------------------------------------------------------------------------- uncertainty


def bootstrap_ci(
    metric_fn: Callable[..., float | None],
    task_ids: npt.ArrayLike,
    *arrays: npt.ArrayLike,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Percentile bootstrap CI that resamples whole tasks with replacement.

    ``metric_fn(task_ids, *arrays)`` is called on the data and on each resample. A task drawn twice
    becomes two distinct tasks (resampled ids are 0..T-1), so per-task pools never merge. Resamples
    where the metric is None (e.g. AUROC with one class) are dropped.

    Returns:
        (point, low, high) with low/high the alpha/2 and 1 - alpha/2 quantiles.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    ids = np.asarray(task_ids).reshape(-1)
    cols = [np.asarray(a).reshape(-1) for a in arrays]
    _check_lengths(task_ids=ids, **{f"arrays[{i}]": c for i, c in enumerate(cols)})
    point = metric_fn(ids, *cols)
    if point is None:
        raise ValueError("metric_fn returned None on the full data")
    groups = _groups(ids)
    sizes = np.array([len(g) for g in groups])
    rng = np.random.default_rng(seed)
    stats: list[float] = []
    for _ in range(n_boot):
        drawn = rng.integers(0, len(groups), size=len(groups))
        index = np.concatenate([groups[t] for t in drawn])
        new_ids = np.repeat(np.arange(len(drawn)), sizes[drawn])
        value = metric_fn(new_ids, *(c[index] for c in cols))
        if value is not None:
            stats.append(value)
    if not stats:
        raise ValueError("metric_fn returned None on every bootstrap resample")
    low, high = np.quantile(stats, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(point), float(low), float(high)


@dataclass(frozen=True)
class PairedDifference:
    """Best@k of model A minus model B on the same tasks, with a paired task-bootstrap interval."""

    point: float
    low: float
    high: float
    k: int
    n_tasks: int
    wins: int  # tasks where A's Best@k is higher than B's
    losses: int  # tasks where it is lower

    @property
    def excludes_zero(self) -> bool:
        """Whether A beats B by more than the interval: the whole interval lies above 0."""
        return self.low > 0.0


def paired_best_at_k_difference(
    task_ids: npt.ArrayLike,
    scores_a: npt.ArrayLike,
    scores_b: npt.ArrayLike,
    labels: npt.ArrayLike,
    k: int,
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PairedDifference:
    """Best@k(A) - Best@k(B) on the same candidates, with a paired percentile bootstrap CI.

    Each task contributes d_t = Best@k_t(A) - Best@k_t(B) (exact, ties as in `best_at_k`); the
    point is the mean of d_t and each resample draws whole tasks with replacement and averages
    their d_t. Resampling the *difference* keeps the two models on the same tasks in every
    resample, so a hard task counts against both: the interval is the one to read when asking
    whether A beats B, and it is narrower than two separate intervals would suggest.

    Args:
        task_ids: Task id of each candidate.
        scores_a: Model A's score of each candidate (higher is better).
        scores_b: Model B's score of the same candidates, in the same order.
        labels: 1 if the candidate succeeds, else 0.
        k: Subset size (clipped to a task's pool size, as in `best_at_k`).
        n_boot: Bootstrap resamples of tasks.
        alpha: Two-sided level (0.05 gives a 95% interval).
        seed: Seed of the resampling.

    Returns:
        The mean difference, its interval, and how many tasks A wins and loses.
    """
    _check_k(k)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    groups, a, y = _prepare(task_ids, scores_a, labels)
    b = _as_scores(scores_b, "scores_b")
    _check_lengths(scores_a=a, scores_b=b)
    diff = np.array(
        [_task_best_exact(a[g], y[g], k) - _task_best_exact(b[g], y[g], k) for g in groups]
    )
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(diff), size=(n_boot, len(diff)))
    low, high = np.quantile(diff[drawn].mean(axis=1), [alpha / 2.0, 1.0 - alpha / 2.0])
    return PairedDifference(
        point=float(diff.mean()),
        low=float(low),
        high=float(high),
        k=k,
        n_tasks=len(diff),
        wins=int((diff > 0).sum()),
        losses=int((diff < 0).sum()),
    )
