"""The `-task` variants of the cross-fitted text model: the leave-one-out task success rate by
hand, the scalars it adds to a design, and values that read a task's level from its sibling
rollouts without ever reading a trajectory's own outcome."""

from __future__ import annotations

import numpy as np
import pytest

from trajlake.credit import CrossFitTextValues, TrajectoryTurns, Turn, value_source
from trajlake.credit._sparse_logit import PrefixDesign
from trajlake.credit._text_features import Observation
from trajlake.credit.crossfit import task_rates, with_task_prior


def traj(tid: str, task: str | None, outcome: float | None, obs: dict) -> TrajectoryTurns:
    """Two `run_tests` turns whose observations read the same in every trajectory."""
    t = TrajectoryTurns(tid, task, outcome)
    for u, text in enumerate(["collected 3 items", "3 passed"]):
        t.turns.append(
            Turn(tid, "main", u, 'run_tests({"command": "pytest"})', ("run_tests",), False, None)
        )
        obs[(tid, "main", u)] = Observation(text, False)
    return t


def test_task_rates_leave_the_trajectory_out_by_hand() -> None:
    obs: dict = {}
    trajs = [
        traj("a0", "A", 1.0, obs),
        traj("a1", "A", 1.0, obs),
        traj("a2", "A", 0.0, obs),
        traj("a3", "A", None, obs),
        traj("b0", "B", 0.0, obs),
        traj("c0", "C", None, obs),
    ]
    # p = mean labelled outcome = 2/4; prior 2 adds 2 · 0.5 = 1 success in 2 pseudo-rollouts.
    # a0: others 1 of 2 → (1+1)/(2+2); a2: 2 of 2 → 3/4; a3 (unlabelled): 2 of 3 → 3/5;
    # b0: no other rollout → p; c0: no labelled rollout → p.
    assert task_rates(trajs).tolist() == pytest.approx([0.5, 0.5, 0.75, 0.6, 0.5, 0.5])
    assert task_rates(trajs, prior=0.5)[2] == pytest.approx((2 + 0.25) / 2.5)


def test_with_task_prior_appends_logit_and_its_product_with_the_budget_fraction() -> None:
    empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
    scalars = np.zeros((5, 4))
    scalars[:, 0] = [0.0, 0.5, 1.0, 0.0, 0.5]  # budget fraction of s_0 … s_2 and s_0 … s_1
    design = PrefixDesign(
        2, 2, np.array([0, 3, 5]), scalars, empty_i, empty_f, empty_i, empty_i, empty_f, empty_i
    )
    out = with_task_prior(design, np.array([0.5, 0.8]))
    assert out.n_scalars == 6 and out.n_weights == 1 + 6 + 2 + 2
    z = np.log(0.8 / 0.2)
    assert out.scalars[:, 4].tolist() == pytest.approx([0, 0, 0, z, z])
    assert out.scalars[:, 5].tolist() == pytest.approx([0, 0, 0, 0, 0.5 * z])
    w = np.zeros(out.n_weights)
    w[0], w[5], w[6] = 0.1, 2.0, 1.0  # bias, task logit, task logit × fraction
    assert out.scores(w).tolist() == pytest.approx([0.1, 0.1, 0.1, 0.1 + 2 * z, 0.1 + 2.5 * z])
    assert with_task_prior(design, None) is design
    with pytest.raises(ValueError, match="shape"):
        design.with_columns(np.zeros((4, 1)))


def test_task_level_comes_from_sibling_rollouts_never_the_own_outcome() -> None:
    # Every turn reads the same: text says nothing. Tasks H succeed 7 of 8, tasks L 1 of 8.
    # (With few rollouts the leave-one-out rate is anti-correlated with the own outcome inside
    # a task; at 8 rollouts and this spread between tasks the level dominates.)
    obs: dict = {}
    trajs = []
    for k in range(4):
        for name, rs in (("H", [1] * 7 + [0]), ("L", [0] * 7 + [1])):
            trajs += [traj(f"{name}{k}-{i}", f"{name}{k}", float(r), obs) for i, r in enumerate(rs)]
    plain = CrossFitTextValues(folds=3, observations=obs).values(trajs)
    task = value_source("crossfit:text-task", folds=3, observations=obs)
    assert task.name == "crossfit:text-task"
    values = task.values(trajs)
    for k in range(4):
        high, low = values[f"H{k}-0"][0], values[f"L{k}-7"][0]  # both succeeded
        assert high > low + 0.2  # the siblings of H succeed; those of L fail
        # Without the task's level its rollouts are valued alike (no text tells them apart).
        assert plain[f"H{k}-0"][0] == pytest.approx(plain[f"H{k}-7"][0])
        # The rollout that failed in H sees 7 successful siblings, one that succeeded sees 6
        # of 7: its own outcome never raises its value.
        assert values[f"H{k}-7"][0] > values[f"H{k}-0"][0]
        assert values[f"H{k}-0"][-1] == 1.0 and values[f"H{k}-7"][-1] == 0.0


def test_td_task_variant_is_registered() -> None:
    source = value_source("crossfit:text-td-task", folds=3)
    assert source.name == "crossfit:text-td-task"
    assert isinstance(source, CrossFitTextValues)
    assert source.target == "td" and source.task_prior
    assert not value_source("crossfit:text-td", folds=3).task_prior  # type: ignore[attr-defined]


def test_chunked_lake_gets_the_same_task_values() -> None:
    # Past `chunk` trajectories the designs are built per chunk: the task scalars must follow.
    obs: dict = {}
    trajs = [
        traj(f"{name}{k}-{i}", f"{name}{k}", float(r), obs)
        for k in range(3)
        for name, rs in (("H", [1, 1, 1, 0]), ("L", [0, 0, 0, 1]))
        for i, r in enumerate(rs)
    ]
    whole = CrossFitTextValues(folds=3, task_prior=True, observations=obs).values(trajs)
    chunked = CrossFitTextValues(folds=3, task_prior=True, chunk=5, observations=obs).values(trajs)
    assert chunked.keys() == whole.keys()
    for tid, curve in whole.items():
        assert chunked[tid] == pytest.approx(curve, abs=1e-9)
