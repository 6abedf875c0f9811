"""The cross-fitted ensemble of value sources: weights by hand, weights that never saw the valued
task, bad names named, and runs through `trajlake credit` on synthetic and real trajectories."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import trajlake as tl
from tests.credit._corpus import CORPUS, ingest_labelled_corpus
from trajlake.cli.credit_cmd import credit
from trajlake.credit import (
    PrefixMCValues,
    TrajectoryTurns,
    Turn,
    load_turns,
    run_credit,
    value_source,
)
from trajlake.credit.ensemble import (
    EnsembleValues,
    LeaveOneOutPrefixMC,
    fit_nonnegative,
    parse_ensemble,
)
from trajlake.credit.evaluate import evaluate_credit
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate


class FixedValues:
    """A value source whose curves are given: V(s_t) = f(outcome, t) for t < T, V(s_T) = R."""

    def __init__(self, name: str, by_task: dict[str, tuple[float, float]]) -> None:
        self.name = name
        self.by_task = by_task
        """task → (a, b): V(s_t) = a + b·R."""

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        out = {}
        for t in trajectories:
            if t.outcome is None:
                continue
            a, b = self.by_task[t.task_id or ""]
            out[t.trajectory_id] = [a + b * t.outcome] * len(t.turns) + [t.outcome]
        return out


def trajectories(tasks: dict[str, list[int]], turns: int = 3) -> list[TrajectoryTurns]:
    """Rollouts of each task with the given outcomes, `turns` identical turns each."""
    out = []
    for task, outcomes in tasks.items():
        for i, r in enumerate(outcomes):
            tid = f"{task}-{i}"
            t = TrajectoryTurns(tid, task, float(r))
            t.turns = [Turn(tid, "main", u, "ls", ("bash",), False, None) for u in range(turns)]
            out.append(t)
    return out


def test_nonnegative_fit_by_hand() -> None:
    # y = 1 + 2·x1 − x2 unconstrained; with w ≥ 0 the x2 weight is 0 and y is refitted on x1.
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = 1 + 2 * x[:, 0] - x[:, 1]
    z = np.column_stack([np.ones(4), x])
    coef, sse = fit_nonnegative(z.T @ z, z.T @ y, float(y @ y))
    # On x1 alone: y = (1, 3, 0, 2) → intercept 0.5, slope 2 (means 0.5 and 2.5), SSE 4·0.25.
    assert coef.tolist() == pytest.approx([0.5, 2.0, 0.0])
    assert sse == pytest.approx(1.0)


def test_outcome_component_gets_all_the_weight() -> None:
    # `outcome` predicts the outcome exactly; prefix-MC does not: weights (1, 0), intercept 0.
    trajs = trajectories({"A": [1, 0, 1], "B": [0, 0, 1], "C": [1, 1, 0]})
    ens = value_source("ensemble:outcome+prefix-mc", folds=3)
    values = ens.values(trajs)
    for w in ens.fold_weights:
        assert w.intercept == pytest.approx(0.0, abs=1e-9)
        assert w.weights == pytest.approx({"outcome": 1.0, "prefix-mc": 0.0}, abs=1e-9)
        assert w.rows == 6 * 3  # two tasks × 3 rollouts × 3 states
    for t in trajs:
        assert values[t.trajectory_id] == pytest.approx([t.outcome] * 4)


def test_scaled_predictor_recovers_slope_and_intercept() -> None:
    # V_a = 0.25 + 0.5·R everywhere → R = 2·V_a − 0.5; the constant source gets weight 0.
    trajs = trajectories({"A": [1, 0], "B": [0, 1], "C": [1, 1, 0]})
    scaled = FixedValues("scaled", dict.fromkeys("ABC", (0.25, 0.5)))
    flat = FixedValues("flat", dict.fromkeys("ABC", (0.4, 0.0)))
    ens = EnsembleValues([scaled, flat], folds=3)
    values = ens.values(trajs)
    assert ens.name == "ensemble:scaled+flat"
    for w in ens.fold_weights:
        assert w.intercept == pytest.approx(-0.5)
        assert w.weights == pytest.approx({"scaled": 2.0, "flat": 0.0}, abs=1e-9)
    assert values["A-0"] == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_weights_never_come_from_the_valued_task() -> None:
    # Source `a` tracks the outcome on task P only, `b` on task Q only (anti-correlated
    # elsewhere). With one fold per task, P is valued with weights fitted on Q → all on `b`;
    # weights fitted in sample would have chosen `a` for P.
    trajs = trajectories({"P": [1, 0, 1, 0], "Q": [0, 1, 1, 0]})
    a = FixedValues("a", {"P": (0.0, 1.0), "Q": (1.0, -1.0)})
    b = FixedValues("b", {"P": (1.0, -1.0), "Q": (0.0, 1.0)})
    ens = EnsembleValues([a, b], folds=2, seed=0)
    values = ens.values(trajs)
    fold_p, fold_q = ens.fold_of_task["P"], ens.fold_of_task["Q"]
    assert fold_p != fold_q
    assert ens.train_tasks[fold_p] == {"Q"} and ens.train_tasks[fold_q] == {"P"}
    assert ens.fold_weights[fold_p].weights == pytest.approx({"a": 0.0, "b": 1.0}, abs=1e-9)
    assert ens.fold_weights[fold_q].weights == pytest.approx({"a": 1.0, "b": 0.0}, abs=1e-9)
    # So P's values are b's (1 − R): wrong on P, as an honest out-of-task fit must be.
    assert values["P-0"] == pytest.approx([0.0, 0.0, 0.0, 1.0])
    assert values["P-1"] == pytest.approx([1.0, 1.0, 1.0, 0.0])


def test_leave_one_out_prefix_mc_by_hand() -> None:
    # Task A: rollouts x (R=1) and y (R=0) share their first action, z (R=1) does not.
    trajs = trajectories({"A": [1, 0, 1]}, turns=2)
    z = trajs[2]
    z.turns[0] = Turn(z.trajectory_id, "main", 0, "cat", ("view",), False, None)
    values = LeaveOneOutPrefixMC(min_visits=1).values(trajs)
    # x: s_0 over {y, z}: (1 + 1)/(2 + 2) = 0.5; s_1 over {y}: (0 + 1)/(1 + 2) = 1/3.
    assert values["A-0"] == pytest.approx([0.5, 1 / 3, 1.0])
    # y: s_0 over {x, z}: (2 + 1)/(2 + 2); s_1 over {x}: (1 + 1)/(1 + 2).
    assert values["A-1"] == pytest.approx([0.75, 2 / 3, 0.0])
    # z: s_1 is its own alone (no other visit): held at s_0's value over {x, y}.
    assert values["A-2"] == pytest.approx([0.5, 0.5, 1.0])
    # In an ensemble, `prefix-mc` is this leave-one-out variant unless told otherwise.
    ens = value_source("ensemble:anchor+prefix-mc")
    assert isinstance(ens.sources[1], LeaveOneOutPrefixMC) and ens.sources[0].leave_one_out
    plain = value_source(
        "ensemble:anchor+prefix-mc", component_options={"prefix-mc": {"leave_one_out": False}}
    )
    assert type(plain.sources[1]) is PrefixMCValues


def test_unlabelled_and_missing_trajectories() -> None:
    trajs = trajectories({"A": [1, 0], "B": [0, 1], "C": [1, 0]})
    unknown = TrajectoryTurns("u", "A", None, turns=list(trajs[0].turns))
    ens = value_source("ensemble:outcome+anchor", folds=3)
    values = ens.values([*trajs, unknown])
    # `outcome` gives the unlabelled trajectory no values: it is left out, and said so.
    assert "u" not in values and ens.left_out == ["u"]
    assert set(values) == {t.trajectory_id for t in trajs}


def test_bad_names_and_options_are_named() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        value_source("ensemble:anchor+nope")
    with pytest.raises(ValueError, match="at least 2"):
        value_source("ensemble:anchor")
    with pytest.raises(ValueError, match="empty component"):
        value_source("ensemble:anchor++prefix-mc")
    with pytest.raises(ValueError, match="repeat"):
        parse_ensemble("ensemble:anchor+anchor")
    with pytest.raises(ValueError, match=r"'prefix-mc'.*min_visits"):
        value_source(
            "ensemble:anchor+prefix-mc", component_options={"prefix-mc": {"min_visits": 0}}
        )
    with pytest.raises(ValueError, match="name no component"):
        value_source("ensemble:anchor+prefix-mc", component_options={"group": {}})
    with pytest.raises(TrajlakeError, match="needs a lake"):
        value_source("ensemble:anchor+judge")
    broken = FixedValues("broken", dict.fromkeys("AB", (float("nan"), 0.0)))
    with pytest.raises(TrajlakeError, match="'broken' gave a non-finite value"):
        EnsembleValues([broken, value_source("outcome")]).values(trajectories({"A": [1], "B": [0]}))
    with pytest.raises(TrajlakeError, match="at least 2 tasks"):
        value_source("ensemble:outcome+anchor").values(trajectories({"A": [1, 0]}))


def test_cli_run_on_synthetic_tasks(lake: tl.Lake, tmp_path: Path) -> None:
    batch = generate(SynthConfig(seed=11, n_tasks=24, rollouts_per_task=4))
    batch.write_jsonl(tmp_path / "r.jsonl")
    batch.write_truth(tmp_path / "t.jsonl")
    lake.ingest(str(tmp_path / "r.jsonl"))
    name = "ensemble:crossfit:text+anchor+prefix-mc"
    result = CliRunner().invoke(
        credit,
        ["--lake", lake.uri, "--estimator", name, "--name", "ens", "-o", "json",
         "--source-option", "folds=4",
         "--source-option", 'component_options={"crossfit:text": {"folds": 4}}'],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["estimator"] == name
    assert report["rows_added"] == sum(len(t.turns) for t in load_turns(lake))
    ens = evaluate_credit(lake, "ens", tmp_path / "t.jsonl")
    broadcast = evaluate_credit(lake, "ens", tmp_path / "t.jsonl", signal="broadcast")
    assert ens.pooled_spearman is not None and broadcast.pooled_spearman is not None
    assert ens.pooled_spearman > broadcast.pooled_spearman + 0.1
    assert ens.interior_spearman is not None and ens.interior_spearman > 0.2


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_end_to_end(lake: tl.Lake, tmp_path: Path) -> None:
    ingest_labelled_corpus(lake, tmp_path)
    name = "ensemble:crossfit:text-td+anchor+prefix-mc"
    report = run_credit(lake, estimator=name, name="ens")
    turns = load_turns(lake)
    assert report.skipped == 0
    assert report.rows_added == sum(len(t.turns) for t in turns)
    rows = lake.sql(
        "SELECT c.value_before, tr.harness FROM credits c "
        "JOIN trajectories tr USING (trajectory_id) WHERE run_name = 'ens'"
    ).to_dicts()
    assert {r["harness"] for r in rows} == {"swe-agent", "mini-swe-agent", "tau-bench"}
    assert all(0.0 <= r["value_before"] <= 1.0 and math.isfinite(r["value_before"]) for r in rows)
