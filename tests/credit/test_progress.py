"""The progress regressor: the ridge fit and the per-turn layout by hand, contributions that sum
to the outcome, folds that never hold the valued task, determinism, bad options, and runs
through `trajlake credit` on synthetic and real trajectories."""

from __future__ import annotations

import itertools
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
from trajlake.credit import TrajectoryTurns, load_turns, value_source
from trajlake.credit._sparse_logit import N_SCALARS, PrefixDesign
from trajlake.credit.evaluate import evaluate_credit
from trajlake.credit.progress import ProgressValues, endpoints, fit_ridge, turn_design
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate


def _hand_design() -> PrefixDesign:
    """Two trajectories of 2 and 1 turns over 3 buckets (block A) and 2 (block B)."""
    # Rows: traj 0 = s_0, s_1, s_2 (rows 0–2); traj 1 = s_0, s_1 (rows 3–4).
    scalars = np.zeros((5, N_SCALARS))
    scalars[:, 0] = [0.0, 0.5, 1.0, 0.0, 0.5]  # budget fraction of the state
    scalars[:, 3] = [0.0, 1.0, 0.0, 0.0, 0.0]  # the turn before the state failed
    return PrefixDesign(
        3, 2, np.array([0, 3, 5]), scalars,
        np.array([0, 2, 1]), np.array([1.0, -1.0, 1.0]), np.array([1, 2, 4]),
        np.array([0, 1, 0]), np.array([1.0, 1.0, -1.0]), np.array([1, 2, 4]),
    )  # fmt: skip


def test_turn_design_accumulates_each_turns_features() -> None:
    d = turn_design(_hand_design())
    assert (d.a_size, d.b_size) == (5, 0)
    # Per-turn scalars (a turn, failed, budget fraction, failed × fraction), summed along.
    assert d.scalars.tolist() == [
        [0, 0, 0, 0], [1, 1, 0.5, 0.5], [2, 1, 1.5, 0.5], [0, 0, 0, 0], [1, 0, 0.5, 0],
    ]  # fmt: skip
    w = np.zeros(d.n_weights)
    w[0] = 0.25  # bias = V(s_0)
    w[1] = 0.1  # each turn
    w[1 + N_SCALARS : 1 + N_SCALARS + 5] = [1.0, 2.0, 4.0, 8.0, 16.0]
    # traj 0: turn 0 = +A0 +B0 → 1 + 8; turn 1 = −A2 +B1 → −4 + 16; traj 1: +A1 −B0 → 2 − 8.
    assert d.scores(w).tolist() == pytest.approx(
        [0.25, 0.25 + 0.1 + 9, 0.25 + 0.2 + 9 + 12, 0.25, 0.25 + 0.1 - 6]
    )
    ends = endpoints(d)
    assert ends.row_start.tolist() == [0, 2, 4]
    assert ends.scores(w).tolist() == pytest.approx([0.25, 0.25 + 0.2 + 21, 0.25, 0.25 + 0.1 - 6])


def test_fit_ridge_is_weighted_least_squares() -> None:
    d = turn_design(_hand_design())
    target = np.array([0.0, 0.3, 1.0, 0.5, 0.2])
    weight = np.array([1.0, 0.5, 1.0, 2.0, 1.0])
    w = fit_ridge(d, target, weight, l2=0.1, iterations=100)
    # The same problem dense: X has a column per weight (bias, scalars, buckets).
    x = np.stack([d.scores(e) for e in np.eye(d.n_weights)], axis=1)
    penalty = np.full(d.n_weights, 0.1)
    penalty[0] = 0.0
    exact = np.linalg.solve(x.T @ (weight[:, None] * x) + np.diag(penalty), x.T @ (weight * target))
    assert w == pytest.approx(exact, abs=1e-8)


def _zebra_tasks(obs: dict, n_tasks: int, where: int) -> list[TrajectoryTurns]:
    """Tasks of 4 rollouts of 3 turns, 1–3 of them successes; a success alone has a 'zebra'
    observation (at turn `where`), every other turn reads 'done'."""
    trajs = []
    for k in range(n_tasks):
        wins = 1 + k % 3
        for i in range(4):
            texts = ["done"] * 3
            if i < wins:
                texts[where] = "zebra"
            trajs.append(traj(f"t{k}-{i}", f"task{k}", float(i < wins), texts, obs))
    return trajs


def test_contributions_sum_to_the_outcome() -> None:
    obs: dict = {}
    trajs = _zebra_tasks(obs, 9, where=1)
    # Unlabelled rollouts of an unseen task: V(s_T) is the model's own sum.
    trajs.append(traj("new-win", "new", None, ["done", "zebra", "done"], obs))
    trajs.append(traj("new-loss", "new", None, ["done", "done", "done"], obs))
    source = ProgressValues(folds=3, l2=1e-6, iterations=500, observations=obs)
    values = source.values(trajs)
    for f, tasks in enumerate(source.train_tasks):
        # V(s_0) = the bias = the success rate of the rollouts that trained the fold's model.
        rate = np.mean([t.outcome for t in trajs if t.task_id in tasks])
        valued = [t for t in trajs if source.fold_of_task[t.task_id] == f]
        assert all(values[t.trajectory_id][0] == pytest.approx(rate, abs=1e-4) for t in valued)
    win, loss = values["new-win"], values["new-loss"]
    assert win[-1] == pytest.approx(1.0, abs=1e-3) and loss[-1] == pytest.approx(0.0, abs=1e-3)
    # The turns before the zebra read the same: same values; all the gap is the zebra turn's.
    # (equal up to float rounding: BLAS sums the two rollouts' feature rows in its own order)
    assert win[:2] == pytest.approx(loss[:2], abs=1e-12)
    credit = [b - a for a, b in itertools.pairwise(win)]
    assert credit[1] == max(credit) and credit[1] > 0.5
    for t in trajs[:-2]:
        assert values[t.trajectory_id][-1] == t.outcome  # V(s_T) is the known outcome
        assert all(0.0 <= v <= 1.0 for v in values[t.trajectory_id])


def test_last_turn_zebra_is_the_whole_difference() -> None:
    obs: dict = {}
    trajs = _zebra_tasks(obs, 6, where=2)
    trajs.append(traj("new-win", "new", None, ["done", "done", "zebra"], obs))
    trajs.append(traj("new-loss", "new", None, ["done", "done", "done"], obs))
    values = ProgressValues(folds=2, l2=1e-6, iterations=500, observations=obs).values(trajs)
    win, loss = values["new-win"], values["new-loss"]
    assert win[:3] == loss[:3]
    assert win[3] - loss[3] == pytest.approx(1.0, abs=1e-3)


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


@pytest.mark.parametrize("name", ["progress", "progress-td"])
def test_a_task_never_trains_the_model_that_values_it(name: str) -> None:
    obs: dict = {}
    source = value_source(name, folds=3, observations=obs)
    values = source.values(_pattern_tasks(obs, twins=1))
    assert isinstance(source, ProgressValues)
    f = source.fold_of_task["pattern0"]
    assert "pattern0" not in source.train_tasks[f]
    assert source.train_tasks[f] == {t for t, g in source.fold_of_task.items() if g != f}
    # Its words were never seen by that model: both rollouts get exactly the same values.
    assert values["z0"][:-1] == values["y0"][:-1]
    # Once another task with the same pattern trains the model, the words carry over.
    obs = {}
    values = value_source(name, folds=8, l2=1e-3, observations=obs).values(
        _pattern_tasks(obs, twins=2)
    )
    assert values["z0"][1] > values["y0"][1] + 0.05 and values["z1"][1] > values["y1"][1] + 0.05


def test_row_weights_and_td_refits() -> None:
    d = turn_design(_hand_design())  # trajectories of 2 and 1 turns
    assert ProgressValues().row_weights(d).tolist() == [1, 0, 1, 1, 1]
    assert ProgressValues("td").row_weights(d).tolist() == [1, 3, 1, 1, 1]  # m / (T − 1) = 3
    assert ProgressValues(mc_weight=2).row_weights(d).tolist() == [1, 2, 1, 1, 1]
    obs: dict = {}
    trajs = _pattern_tasks(obs, twins=2)
    spa = ProgressValues(folds=3, mc_weight=3, observations=obs).values(trajs)
    td = ProgressValues("td", folds=3, observations=obs).values(trajs)
    assert td != spa and all(0.0 <= v <= 1.0 for c in td.values() for v in c)


def test_same_seed_same_values_other_seed_other_folds() -> None:
    obs: dict = {}
    trajs = _pattern_tasks(obs, twins=2)
    first = ProgressValues("td", folds=3, seed=1, observations=obs)
    again = ProgressValues("td", folds=3, seed=1, observations=obs)
    assert first.values(trajs) == again.values(trajs)
    assert first.fold_of_task == again.fold_of_task
    other = ProgressValues("td", folds=3, seed=2, observations=obs)
    other.values(trajs)
    assert other.fold_of_task != first.fold_of_task
    logit = ProgressValues(link="logit", folds=3, seed=1, observations=obs).values(trajs)
    assert logit == ProgressValues(link="logit", folds=3, seed=1, observations=obs).values(trajs)
    assert all(0.0 < v < 1.0 for c in logit.values() for v in c[:-1])


def test_bad_input_is_named() -> None:
    obs: dict = {}
    one_task = [traj(f"t{i}", "only", float(i % 2), ["x"], obs) for i in range(4)]
    with pytest.raises(TrajlakeError, match="progress needs labelled trajectories of at least 2"):
        ProgressValues(observations=obs).values(one_task)
    with pytest.raises(ValueError, match="target must be 'spa' or 'td'"):
        ProgressValues("mc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="link must be"):
        ProgressValues(link="probit")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mc_weight must be >= 0"):
        ProgressValues(mc_weight=-1)
    with pytest.raises(ValueError, match="link='logit'"):
        ProgressValues("td", link="logit")
    with pytest.raises(ValueError, match="folds"):
        value_source("progress", folds=1)
    with pytest.raises(TypeError, match="bogus"):
        value_source("progress-td", bogus=1)
    assert value_source("progress-td", folds=3).name == "progress-td"


def test_cli_run_on_synthetic_tasks_beats_the_broadcast(lake: tl.Lake, tmp_path: Path) -> None:
    batch = generate(SynthConfig(seed=11, n_tasks=24, rollouts_per_task=4))
    batch.write_jsonl(tmp_path / "r.jsonl")
    batch.write_truth(tmp_path / "t.jsonl")
    lake.ingest(str(tmp_path / "r.jsonl"))
    runner = CliRunner()
    result = runner.invoke(
        credit,
        ["--lake", lake.uri, "--estimator", "progress-td", "--name", "pg", "-o", "json",
         "--source-option", "folds=4"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["params"]["source"] == {"folds": 4}
    assert report["rows_added"] == sum(len(t.turns) for t in load_turns(lake))
    ev = evaluate_credit(lake, "pg", tmp_path / "t.jsonl")
    floor = evaluate_credit(lake, "pg", tmp_path / "t.jsonl", signal="broadcast")
    # 96 rollouts of 24 tasks; each valued by a model fitted on the other 18 tasks (measured:
    # pooled 0.56 vs 0.34 for the broadcast, interior 0.35).
    assert ev.pooled_spearman is not None and floor.pooled_spearman is not None
    assert ev.pooled_spearman > floor.pooled_spearman + 0.1
    assert ev.interior_spearman is not None and ev.interior_spearman > 0.15
    bad = runner.invoke(
        credit,
        ["--lake", lake.uri, "--estimator", "progress", "--name", "pg2",
         "--source-option", "link=\"probit\""],
    )  # fmt: skip
    assert bad.exit_code == 1 and isinstance(bad.exception, ValueError)
    assert "link must be 'linear' or 'logit', got 'probit'" in str(bad.exception)


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_end_to_end(lake: tl.Lake, tmp_path: Path) -> None:
    ingest_labelled_corpus(lake, tmp_path)
    runner = CliRunner()
    turns = load_turns(lake)
    for estimator in ("progress", "progress-td"):
        result = runner.invoke(
            credit,
            ["--lake", lake.uri, "--estimator", estimator, "--name", estimator, "-o", "json"],
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["skipped"] == 0
        assert report["rows_added"] == sum(len(t.turns) for t in turns)
        rows = lake.sql(
            "SELECT c.value_before, c.value_after, c.credit, tr.harness "
            "FROM credits c JOIN trajectories tr USING (trajectory_id) WHERE run_name = $name",
            params={"name": estimator},
        ).to_dicts()
        assert {r["harness"] for r in rows} == {"swe-agent", "mini-swe-agent", "tau-bench"}
        assert all(0.0 <= r["value_before"] <= 1.0 and math.isfinite(r["credit"]) for r in rows)
        assert len({round(r["value_before"], 6) for r in rows}) > 2  # the turns are told apart
