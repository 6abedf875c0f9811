"""The synthetic environment: determinism, exact V* versus Monte Carlo, ingest, cloning."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.synth import (
    OBSERVATIONS,
    PolicyParams,
    SynthConfig,
    exact_success,
    generate,
    make_task,
    success_rate,
    synth_turns,
    turn_examples,
)
from trajlake.synth._generate import rollout_setup
from trajlake.synth._model import exact_values, policy_table, simulate

SMALL = SynthConfig(seed=3, n_tasks=12, rollouts_per_task=4)


def test_same_seed_same_records_other_seed_differs() -> None:
    a, b = generate(SMALL), generate(SMALL)
    assert a.trajectories == b.trajectories
    assert a.truth == b.truth
    other = generate(SynthConfig(seed=4, n_tasks=12, rollouts_per_task=4))
    assert [t["actions"] for t in other.truth] != [t["actions"] for t in a.truth]


def test_shape_ids_and_terminal_value_is_the_outcome() -> None:
    batch = generate(SMALL)
    assert len(batch.trajectories) == len(batch.truth) == 48
    assert {t["group_id"] for t in batch.trajectories} == {f"synth-repo-{i:04d}" for i in range(12)}
    for traj, truth in zip(batch.trajectories, batch.truth, strict=True):
        turns = [m for m in traj["messages"] if m["role"] == "assistant"]
        assert len(turns) == len(truth["actions"]) == len(truth["values"]) - 1
        assert truth["values"][-1] == (1.0 if truth["success"] else 0.0)
        assert traj["resolved"] is truth["success"]
        assert traj["status"] == ("completed" if truth["submitted"] else "truncated")
        assert all(0.0 <= v <= 1.0 for v in truth["values"])
        # The turn's attrs carry exactly what the policy saw and did.
        assert synth_turns(traj["messages"]) == list(
            zip(truth["observations"], truth["actions"], strict=True)
        )


def test_credits_telescope_to_outcome_minus_initial_value() -> None:
    for truth in generate(SMALL).truth:
        values, credits = truth["values"], truth["credits"]
        assert sum(credits) == pytest.approx(values[-1] - values[0], abs=1e-12)
        assert credits == pytest.approx([b - a for a, b in itertools.pairwise(values)])


@pytest.mark.parametrize(
    ("state", "steps_left"), [((0, 0, 0), 16), ((1, 0, 0), 10), ((1, 1, 1), 6), ((0, 2, 0), 3)]
)
def test_exact_value_matches_monte_carlo(state: tuple[int, int, int], steps_left: int) -> None:
    config = SynthConfig(seed=1)
    task = make_task(config, 5)
    setup = rollout_setup(config, task, random.Random("mc-check"))
    table = policy_table(PolicyParams.default(), setup.temperature)
    exact = exact_values(setup.dynamics, table, 16)[steps_left][state]
    rng = random.Random(7)
    n = 6000
    wins = sum(
        simulate(setup.dynamics, table, steps_left, rng, start=state).success for _ in range(n)
    )
    # Standard error <= 0.0065, so 0.03 is over four of them.
    assert wins / n == pytest.approx(exact, abs=0.03)


def test_values_order_states_sensibly() -> None:
    config = SynthConfig(seed=2)
    setup = rollout_setup(config, make_task(config, 0), random.Random(0))
    v = exact_values(setup.dynamics, policy_table(PolicyParams.default(), 1.0), 8)[8]
    assert v[(1, 2, 2)] > v[(1, 1, 1)] > v[(0, 1, 1)]
    assert v[(1, 0, 0)] > v[(0, 0, 0)]


def test_jsonl_ingests_into_a_lake(tmp_path: Path) -> None:
    batch = generate(SMALL)
    path = tmp_path / "synth.jsonl"
    batch.write_jsonl(path)
    batch.write_truth(tmp_path / "truth.jsonl")
    truth = [json.loads(line) for line in (tmp_path / "truth.jsonl").read_text().splitlines()]
    assert truth == batch.truth

    lake = tl.open_lake(tmp_path / "lake", create=True)
    report = lake.ingest(path)
    assert report.added == 48 and report.quarantined == 0
    resolved = lake.sql("select count(*) from trajectories where resolved").rows()[0][0]
    assert resolved == sum(t["success"] for t in batch.truth)
    names = {r[0] for r in lake.sql("select distinct tool_name from tool_calls").rows()}
    assert "submit" in names and names <= {"grep", "read_file", "edit_file", "run_tests", "submit"}
    n_turns = lake.sql("select sum(n_turns) from trajectories").rows()[0][0]
    assert n_turns == sum(len(t["actions"]) for t in batch.truth)
    # Behaviour cloning can read (observation, action) back from the lake.
    rows = lake.sql("select role, attrs from messages order by trajectory_id, idx").to_dicts()
    assert len(synth_turns(rows)) == n_turns


def test_params_round_trip_and_validation() -> None:
    params = PolicyParams.default()
    assert PolicyParams.from_dict(json.loads(json.dumps(params.to_dict()))) == params
    assert set(params.logits) == set(OBSERVATIONS)
    with pytest.raises(ValueError, match="unknown action"):
        params.fit([(OBSERVATIONS[0], "dance", 1.0)])
    with pytest.raises(ValueError, match="smoothing"):
        params.fit([], smoothing=0)


def test_behaviour_cloning_on_successes_improves_the_policy() -> None:
    train = SynthConfig(seed=0, n_tasks=40, rollouts_per_task=8)
    held_out = SynthConfig(seed=9, n_tasks=40, rollouts_per_task=8)
    before = PolicyParams.default()
    fitted = before.fit(turn_examples(generate(train, before).trajectories))
    assert fitted.version == 1 and fitted.name == "synth-policy-v1"
    assert exact_success(fitted, held_out) > exact_success(before, held_out) + 0.1
    assert success_rate(fitted, held_out, 1500) > success_rate(before, held_out, 1500) + 0.08
    # Cloning failures instead makes it no better.
    failures = [t for t in generate(train, before).trajectories if not t["resolved"]]
    worse = before.fit(turn_examples(failures, resolved_only=False))
    assert exact_success(worse, held_out) < exact_success(before, held_out)
