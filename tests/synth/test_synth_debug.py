"""The multi-bug debugging environment: exact V* by hand and by Monte Carlo, credits, ingest."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.credit import load_turns, run_credit
from trajlake.synth_debug import (
    ACTIONS,
    OBSERVATIONS,
    DebugConfig,
    DebugDynamics,
    DebugPolicy,
    exact_values,
    generate,
    make_task,
    observe,
    rollout_setup,
    simulate,
    states,
)

SMALL = DebugConfig(seed=5, n_tasks=10, rollouts_per_task=4)


def _table(**probs: float) -> dict[str, tuple[float, ...]]:
    """The same action distribution in every observation (hand-computable values)."""
    row = tuple(probs.get(a, 0.0) for a in ACTIONS)
    return dict.fromkeys(OBSERVATIONS, row)


def test_hand_computed_values_on_a_one_bug_task() -> None:
    dyn = DebugDynamics(n_bugs=1, p_search=0.5, p_read=0.2, p_fix=0.6, p_break=0.25, p_trace=0.3)
    u, e, noise = 0.4, 0.6, dyn.verifier_noise
    values = exact_values(dyn, _table(submit=u, edit=e), 2)
    done = (2, 0, 0, 0, 3)  # the bug fixed, no regression, the visible suite passed
    assert values[0][done] == 0.0  # out of turns without a submit: failure
    assert values[1][done] == pytest.approx(u * (1 - noise))
    # Editing a fixed bug changes nothing but may break the helper (then only noise can win).
    assert values[2][done] == pytest.approx(
        u * (1 - noise) + e * ((1 - 0.25) * u * (1 - noise) + 0.25 * u * noise)
    )
    # Located, unfixed: submit now (noise) or edit (fix 0.6, break 0.25 independently).
    located = (1, 0, 0, 0, 0)
    fixed_ok = 0.6 * 0.75 * u * (1 - noise)
    rest = (1 - 0.6 * 0.75) * u * noise
    assert values[2][located] == pytest.approx(u * noise + e * (fixed_ok + rest))


def test_revert_undoes_a_regression_and_nothing_else() -> None:
    dyn = DebugDynamics(n_bugs=2, p_search=0.3, p_read=0.1, p_fix=0.5, p_break=0.2, p_trace=0.4)
    assert dyn.transitions((2, 0, 1, 1, 2), "revert") == [(1.0, (2, 0, 1, 0, 0))]
    assert dyn.transitions((2, 0, 1, 0, 3), "revert") == [(1.0, (2, 0, 1, 0, 3))]
    assert not dyn.complete((2, 0, 1, 1, 2)) and dyn.complete((2, 0, 1, 0, 0))
    # The visible suite passes with the secondary bug still unfixed: a misleading pass.
    assert dyn.transitions((2, 1, 0, 0, 0), "test") == [(1.0, (2, 1, 0, 0, 3))]
    assert not dyn.complete((2, 1, 0, 0, 3))


@pytest.mark.parametrize("n_bugs", [1, 2, 3])
def test_transitions_are_distributions_over_states(n_bugs: int) -> None:
    dyn = DebugDynamics(n_bugs, p_search=0.3, p_read=0.15, p_fix=0.55, p_break=0.2, p_trace=0.35)
    space = set(states(n_bugs))
    for s in space:
        for a in ACTIONS[:-1]:
            options = dyn.transitions(s, a)
            assert sum(p for p, _ in options) == pytest.approx(1.0)
            assert {nxt for _, nxt in options} <= space
    assert len(space) == 3 * {1: 1, 2: 3, 3: 6}[n_bugs] * 2 * 4


@pytest.mark.parametrize(
    ("state", "left"), [((0, 0, 0, 0, 0), 30), ((1, 1, 0, 0, 1), 12), ((2, 0, 1, 1, 2), 6)]
)
def test_exact_value_matches_monte_carlo(state: tuple[int, int, int, int, int], left: int) -> None:
    config = DebugConfig(seed=2)
    task = next(make_task(config, i) for i in range(50) if make_task(config, i).n_bugs == 3)
    setup = rollout_setup(config, task, random.Random("mc-check"))
    table = DebugPolicy.default().table(setup.temperature)
    exact = exact_values(setup.dynamics, table, left)[left][state]
    rng = random.Random(3)
    n = 6000
    wins = sum(simulate(setup.dynamics, table, left, rng, start=state).success for _ in range(n))
    # Standard error <= 0.0065, so 0.03 is over four of them.
    assert wins / n == pytest.approx(exact, abs=0.03)


def test_same_seed_same_records_other_seed_differs() -> None:
    a, b = generate(SMALL), generate(SMALL)
    assert a.trajectories == b.trajectories and a.truth == b.truth
    other = generate(DebugConfig(seed=6, n_tasks=10, rollouts_per_task=4))
    assert [t["actions"] for t in other.truth] != [t["actions"] for t in a.truth]


def test_credits_telescope_to_outcome_minus_initial_value() -> None:
    batch = generate(SMALL)
    for traj, truth in zip(batch.trajectories, batch.truth, strict=True):
        values, credits = truth["values"], truth["credits"]
        assert values[-1] == (1.0 if truth["success"] else 0.0) == traj["reward"]
        assert sum(credits) == pytest.approx(values[-1] - values[0], abs=1e-12)
        assert credits == pytest.approx([b - a for a, b in itertools.pairwise(values)])
        turns = [m for m in traj["messages"] if m["role"] == "assistant"]
        assert [m["attrs"]["synth_debug"]["state"] for m in turns] == truth["observations"]
        assert len(turns) == len(truth["actions"]) == len(credits)


def test_the_dynamics_show_up_in_generated_rollouts() -> None:
    batch = generate(DebugConfig(seed=1, n_tasks=40, rollouts_per_task=4))
    truth = batch.truth
    assert {t["task"]["n_bugs"] for t in truth} == {1, 2, 3}
    # Misleading tests: a submit after a visible pass that the hidden verifier rejects.
    early = [
        t for t in truth
        if t["submitted"] and "tests=pass" in t["states"][-1] and "located=0" not in t["states"][-1]
    ]  # fmt: skip
    assert early
    # Reversible mistakes: a break (credit < 0) later undone by a restore (credit > 0).
    reverts = [
        (t, i) for t in truth for i, a in enumerate(t["actions"])
        if a == "revert" and "broken=1" in t["states"][i]
    ]  # fmt: skip
    assert reverts and any(t["credits"][i] > 0 for t, i in reverts)
    # Long exploration: many rollouts need 5 or more turns before anything is found.
    slow = [t for t in truth if all(o.startswith("unknown/0") for o in t["observations"][:5])]
    assert len(slow) >= len(truth) // 5
    assert 0.1 < batch.success_rate < 0.5


def test_rollouts_ingest_through_the_normal_path(tmp_path: Path) -> None:
    batch = generate(SMALL)
    batch.write_jsonl(tmp_path / "rollouts.jsonl")
    batch.write_truth(tmp_path / "truth.jsonl")
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.ingest(tmp_path / "rollouts.jsonl")
    n = lake.sql("SELECT count(*) AS n FROM trajectories").to_dicts()[0]["n"]
    assert n == len(batch.truth) == 40
    turns = {t.trajectory_id: t for t in load_turns(lake)}
    for truth in batch.truth:
        traj = turns[truth["trajectory_id"]]
        assert len(traj.turns) == len(truth["credits"])
        assert traj.outcome == (1.0 if truth["success"] else 0.0)
        assert traj.task_id == truth["task_id"]
    report = run_credit(lake, estimator="prefix-mc", name="pmc")
    assert report.trajectories == 40 and report.turns == sum(len(t["credits"]) for t in batch.truth)
    assert observe((0, 0, 0, 0, 0)) == "unknown/0/untested"
