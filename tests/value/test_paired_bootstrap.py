"""Paired task-bootstrap of a Best@k difference, checked against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from trajlake.value.metrics import best_at_k, bootstrap_ci, paired_best_at_k_difference

# Three tasks of two candidates. Best@2 per task, by hand:
#   t1 labels (1, 0): A ranks the success first → 1; B ranks it last → 0; d = +1
#   t2 labels (0, 1): A ties the two → mean label 0.5; B ranks the success first → 1; d = -0.5
#   t3 labels (1, 1): both models pick a success → 1; d = 0
TASKS = ["t1", "t1", "t2", "t2", "t3", "t3"]
LABELS = [1, 0, 0, 1, 1, 1]
SCORES_A = [0.9, 0.1, 0.5, 0.5, 0.3, 0.7]
SCORES_B = [0.1, 0.9, 0.2, 0.8, 0.6, 0.4]


def test_point_wins_and_losses_match_the_hand_computed_task_differences() -> None:
    diff = paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 2, n_boot=200)
    assert diff.point == pytest.approx((1.0 - 0.5 + 0.0) / 3)
    assert diff.point == pytest.approx(
        best_at_k(TASKS, SCORES_A, LABELS, 2) - best_at_k(TASKS, SCORES_B, LABELS, 2)
    )
    assert (diff.k, diff.n_tasks, diff.wins, diff.losses) == (2, 3, 1, 1)


def test_interval_reaches_the_extreme_resamples_of_three_tasks() -> None:
    # A resample of 3 tasks is all t2 (mean -0.5) or all t1 (mean +1) with P = 1/27 ≈ 3.7% each,
    # more than the 2.5% tails, so with many resamples the 95% interval is exactly [-0.5, 1].
    diff = paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 2, n_boot=20_000)
    assert diff.low == pytest.approx(-0.5)
    assert diff.high == pytest.approx(1.0)
    assert not diff.excludes_zero


def test_k1_is_random_pick_for_every_model_so_the_difference_is_exactly_zero() -> None:
    diff = paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 1, n_boot=500)
    assert (diff.point, diff.low, diff.high, diff.wins, diff.losses) == (0.0, 0.0, 0.0, 0, 0)


def test_a_model_better_on_every_task_excludes_zero() -> None:
    tasks = np.repeat(np.arange(10), 2)
    labels = np.tile([1, 0], 10)
    good = np.tile([0.8, 0.2], 10)
    bad = np.tile([0.2, 0.8], 10)
    diff = paired_best_at_k_difference(tasks, good, bad, labels, 2, n_boot=300)
    assert (diff.point, diff.low, diff.high, diff.wins) == (1.0, 1.0, 1.0, 10)
    assert diff.excludes_zero


def test_pairing_is_narrower_than_the_unpaired_intervals_when_tasks_are_shared() -> None:
    # Both models are equally good within a task; task difficulty (how many successes) varies a
    # lot, so each model's own Best@2 interval is wide but their difference is exactly 0.
    rng = np.random.default_rng(3)
    tasks = np.repeat(np.arange(40), 4)
    labels = (rng.random(160) < np.repeat(rng.random(40), 4)).astype(int)
    scores = rng.random(160)
    diff = paired_best_at_k_difference(tasks, scores, scores, labels, 2, n_boot=300)
    _, low, high = bootstrap_ci(
        lambda t, s, y: best_at_k(t, s, y, 2), tasks, scores, labels, n_boot=300
    )
    assert diff.high - diff.low == 0.0 < high - low


def test_same_seed_same_interval_and_bad_inputs_are_refused() -> None:
    first = paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 2, n_boot=100, seed=5)
    again = paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 2, n_boot=100, seed=5)
    assert first == again
    with pytest.raises(ValueError, match="equal lengths"):
        paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B[:-1], LABELS, 2)
    with pytest.raises(ValueError, match="finite"):
        paired_best_at_k_difference(TASKS, SCORES_A, [np.nan] * 6, LABELS, 2)
    with pytest.raises(ValueError, match="n_boot"):
        paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 2, n_boot=0)
    with pytest.raises(ValueError, match="k must"):
        paired_best_at_k_difference(TASKS, SCORES_A, SCORES_B, LABELS, 0)


def test_agrees_with_the_report_s_paired_difference_draw_for_draw() -> None:
    # `trajlake.value.report.paired_difference` (the floors of `trajlake eval value`) resamples
    # the same way with the same seed: two implementations, one answer.
    from trajlake.value.report import paired_difference

    rng = np.random.default_rng(1)
    tasks = np.repeat(np.arange(31), 8)
    labels = (rng.random(248) < 0.3).astype(int)
    a, b = rng.random(248), rng.random(248)
    mine = paired_best_at_k_difference(tasks, a, b, labels, 8, n_boot=400, seed=2)
    theirs = paired_difference(tasks, a, b, labels, k=8, n_boot=400, seed=2)["best_at_k"]
    assert theirs is not None
    assert (mine.point, mine.low, mine.high) == pytest.approx(
        (theirs["point"], theirs["low"], theirs["high"])
    )
