"""The cross-fitted sparse text value model: TD(λ) targets and base rates by hand, folds that
never hold the valued task, determinism, and runs through `trajlake credit` on synthetic and
real trajectories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import trajlake as tl
from tests.credit._corpus import CORPUS, ingest_labelled_corpus
from tests.credit._turns import traj
from trajlake.cli.credit_cmd import credit
from trajlake.credit import CrossFitTextValues, TrajectoryTurns, load_turns, value_source
from trajlake.credit.crossfit import lambda_targets
from trajlake.credit.evaluate import evaluate_credit
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate


def test_lambda_targets_by_hand() -> None:
    values = np.array([0.2, 0.6, 0.4, 1.0, 0.5, 0.0])
    starts = np.array([0, 4, 6])
    # λ = 0.5: G3 = 1, G2 = .5·1 + .5·1 = 1, G1 = .5·.4 + .5·1 = .7, G0 = .5·.6 + .5·.7 = .65.
    assert lambda_targets(values, starts, 0.5).tolist() == pytest.approx(
        [0.65, 0.7, 1.0, 1.0, 0.0, 0.0]
    )
    assert lambda_targets(values, starts, 0.0).tolist() == pytest.approx(
        [0.6, 0.4, 1.0, 1.0, 0.0, 0.0]
    )
    assert lambda_targets(values, starts, 1.0).tolist() == pytest.approx([1, 1, 1, 1, 0, 0])


def test_each_task_is_valued_by_the_other_tasks_base_rate() -> None:
    # Every turn reads the same, so the model can only learn the success rate of the tasks it
    # was fitted on; with one fold per task, V(s_t) of task X is the mean outcome of the others.
    outcomes = {"A": [1, 1], "B": [0, 0], "C": [1, 0], "D": [1, 1]}
    obs: dict = {}
    trajs = [
        traj(f"{task}{i}", task, float(r), ["1 passed"], obs)
        for task, rs in outcomes.items()
        for i, r in enumerate(rs)
    ]
    source = CrossFitTextValues(folds=4, l2=1e-9, iterations=200, observations=obs)
    values = source.values(trajs)
    others = {"A": 3 / 6, "B": 5 / 6, "C": 4 / 6, "D": 3 / 6}
    for t in trajs:
        v0, v1 = values[t.trajectory_id]
        assert v0 == pytest.approx(others[t.task_id], abs=1e-3)
        assert v1 == t.outcome  # V(s_T) is the outcome
    assert all(t not in source.train_tasks[source.fold_of_task[t]] for t in outcomes)


def _pattern_tasks(obs: dict, twins: int) -> list[TrajectoryTurns]:
    """Tasks where 'zebra' marks success and 'yak' failure (`twins` of them) among tasks where
    the words say nothing."""
    trajs = []
    for k in range(twins):
        trajs.append(traj(f"z{k}", f"pattern{k}", 1.0, ["zebra found", "done"], obs))
        trajs.append(traj(f"y{k}", f"pattern{k}", 0.0, ["yak found", "done"], obs))
    for k in range(6):
        for i, r in enumerate([1.0, 0.0, 1.0, 0.0]):
            trajs.append(
                traj(f"n{k}-{i}", f"noise{k}", r, ["alpha beta" if i % 2 else "gamma", "done"], obs)
            )
    return trajs


def test_a_task_never_trains_the_model_that_values_it() -> None:
    obs: dict = {}
    trajs = _pattern_tasks(obs, twins=1)
    source = CrossFitTextValues(folds=3, observations=obs)
    values = source.values(trajs)
    f = source.fold_of_task["pattern0"]
    assert "pattern0" not in source.train_tasks[f]
    assert source.train_tasks[f] == {t for t, g in source.fold_of_task.items() if g != f}
    # Its words were never seen by that model: both rollouts get exactly the same values.
    assert values["z0"][:-1] == values["y0"][:-1]
    # Once another task with the same pattern trains the model, the words carry over.
    obs = {}
    trajs = _pattern_tasks(obs, twins=2)
    values = CrossFitTextValues(folds=8, l2=1e-3, observations=obs).values(trajs)
    assert values["z0"][1] > values["y0"][1] + 0.05 and values["z1"][1] > values["y1"][1] + 0.05


def test_same_seed_same_values_other_seed_other_folds() -> None:
    obs: dict = {}
    trajs = _pattern_tasks(obs, twins=2)
    first = CrossFitTextValues("td", folds=3, seed=1, observations=obs)
    again = CrossFitTextValues("td", folds=3, seed=1, observations=obs)
    assert first.values(trajs) == again.values(trajs)
    assert first.fold_of_task == again.fold_of_task
    other = CrossFitTextValues("td", folds=3, seed=2, observations=obs)
    other.values(trajs)
    assert other.fold_of_task != first.fold_of_task


def test_bad_input_is_named() -> None:
    obs: dict = {}
    one_task = [traj(f"t{i}", "only", float(i % 2), ["x"], obs) for i in range(4)]
    with pytest.raises(TrajlakeError, match="at least 2 tasks"):
        CrossFitTextValues(observations=obs).values(one_task)
    with pytest.raises(ValueError, match="folds"):
        CrossFitTextValues(folds=1)
    with pytest.raises(ValueError, match="target"):
        CrossFitTextValues("bogus")  # type: ignore[arg-type]
    assert value_source("crossfit:text-td", folds=3).name == "crossfit:text-td"


def test_cli_run_on_synthetic_tasks_beats_the_broadcast(lake: tl.Lake, tmp_path: Path) -> None:
    batch = generate(SynthConfig(seed=11, n_tasks=24, rollouts_per_task=4))
    batch.write_jsonl(tmp_path / "r.jsonl")
    batch.write_truth(tmp_path / "t.jsonl")
    lake.ingest(str(tmp_path / "r.jsonl"))
    result = CliRunner().invoke(
        credit,
        ["--lake", lake.uri, "--estimator", "crossfit:text", "--name", "cf", "-o", "json",
         "--source-option", "folds=4"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["params"]["source"] == {"folds": 4}
    assert report["rows_added"] == sum(len(t.turns) for t in load_turns(lake))
    ev = evaluate_credit(lake, "cf", tmp_path / "t.jsonl")
    # 96 rollouts of 24 tasks; each valued by a model fitted on the other ~19 tasks.
    assert ev.pooled_spearman is not None and ev.pooled_spearman > 0.4
    assert ev.interior_spearman is not None and ev.interior_spearman > 0.2


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_end_to_end(lake: tl.Lake, tmp_path: Path) -> None:
    ingest_labelled_corpus(lake, tmp_path)
    runner = CliRunner()
    for estimator in ("crossfit:text-td", "crossfit:text-task"):
        result = runner.invoke(
            credit,
            ["--lake", lake.uri, "--estimator", estimator, "--name", estimator, "-o", "json"],
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        turns = load_turns(lake)
        assert report["skipped"] == 0
        assert report["rows_added"] == sum(len(t.turns) for t in turns)
        rows = lake.sql(
            "SELECT c.value_before, c.value_after, c.turn, o.resolved, o.reward, tr.harness "
            "FROM credits c JOIN outcomes o USING (trajectory_id) "
            f"JOIN trajectories tr USING (trajectory_id) WHERE run_name = '{estimator}'"
        ).to_dicts()
        assert {r["harness"] for r in rows} == {"swe-agent", "mini-swe-agent", "tau-bench"}
        assert all(
            0.0 <= r["value_before"] <= 1.0 and math.isfinite(r["value_before"]) for r in rows
        )
