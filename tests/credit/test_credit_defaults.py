"""The default estimator (`auto`) and the warnings of a credit run, on lakes built from synthetic
tasks and from the corpus; featurising over worker processes gives the serial design."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake._text_hashing import NgramHasher
from trajlake.cli.credit_cmd import credit
from trajlake.cli.main import cli
from trajlake.credit import CrossFitTextValues, TrajectoryTurns
from trajlake.credit._featurise_pool import (
    PooledFeaturiser,
    join_designs,
    pooled,
    same_design,
    shutdown_pool,
    usable_workers,
)
from trajlake.credit._text_features import Observation
from trajlake.credit.crossfit import TextFeaturiser
from trajlake.credit.runs import (
    AUTO_CROSSFIT,
    AUTO_GROUP,
    AUTO_MIN_TASKS,
    choose_estimator,
    run_credit,
)
from trajlake.credit.turns import load_turns
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"


def synth_records(n_tasks: int, rollouts: int, seed: int = 11) -> list[dict[str, Any]]:
    """Canonical records of `trajlake.synth` rollouts (task ids `…`, resolved set)."""
    batch = generate(SynthConfig(seed=seed, n_tasks=n_tasks, rollouts_per_task=rollouts))
    return [copy.deepcopy(r) for r in batch.trajectories]


def credits_of(lake: tl.Lake, run: str) -> dict[str, list[float]]:
    rows = lake.sql(
        "SELECT trajectory_id, credit FROM credits WHERE run_name = $run ORDER BY turn",
        params={"run": run},
    ).to_dicts()
    out: dict[str, list[float]] = {}
    for row in rows:
        out.setdefault(row["trajectory_id"], []).append(row["credit"])
    return out


# ------------------------------------------------------------------ the default choice


def test_auto_cross_fits_when_many_tasks_are_labelled(lake: tl.Lake) -> None:
    lake.write(synth_records(AUTO_MIN_TASKS + 2, 2))
    report = run_credit(lake, name="auto")
    assert report.estimator == AUTO_CROSSFIT
    assert report.estimator_choice is not None
    assert report.estimator_choice["name"] == AUTO_CROSSFIT
    assert f"{AUTO_MIN_TASKS + 2} tasks" in report.estimator_choice["reason"]
    assert report.warnings == []
    assert report.rows_added == sum(len(t.turns) for t in load_turns(lake)) > 0
    stored = lake.sql("SELECT DISTINCT estimator FROM credits WHERE run_name = 'auto'").rows()
    assert stored == [(AUTO_CROSSFIT,)]
    # The same choice on the same snapshot names the same run: re-running adds nothing.
    again = run_credit(lake)
    twice = run_credit(lake)
    assert twice.existing and twice.run_name == again.run_name


def test_auto_compares_rollouts_when_tasks_are_few(lake: tl.Lake) -> None:
    lake.write(synth_records(3, 4))
    report = run_credit(lake)
    assert report.estimator == AUTO_GROUP and report.run_name.startswith(AUTO_GROUP + "-")
    assert report.estimator_choice is not None
    assert "up to 4 rollouts per task" in report.estimator_choice["reason"]
    assert report.warnings == [] and report.rows_added > 0


def test_auto_with_one_rollout_on_few_tasks_cross_fits_and_warns_about_folds(
    lake: tl.Lake,
) -> None:
    lake.write(synth_records(3, 1))
    report = run_credit(lake)
    assert report.estimator == AUTO_CROSSFIT
    assert report.estimator_choice is not None
    assert "one rollout each" in report.estimator_choice["reason"]
    assert len(report.warnings) == 1
    assert "5 folds but there are only 3 labelled tasks" in report.warnings[0]


def test_auto_single_trajectory_is_the_outcome(lake: tl.Lake) -> None:
    lake.write(synth_records(1, 1))
    report = run_credit(lake)
    assert report.estimator == "outcome"
    assert report.estimator_choice is not None
    assert "single labelled trajectory" in report.estimator_choice["reason"]


def test_auto_without_outcomes_says_what_to_do(lake: tl.Lake) -> None:
    records = synth_records(4, 2)
    for r in records:
        r["resolved"] = r["reward"] = r["outcome_source"] = None
    lake.write(records)
    with pytest.raises(TrajlakeError, match="none of the 8 trajectories has an outcome") as info:
        run_credit(lake)
    assert "trajlake label" in str(info.value) and "--estimator judge" in str(info.value)
    result = CliRunner().invoke(cli, ["credit", "--lake", lake.uri])
    assert result.exit_code == 1
    assert "trajlake label" in result.output and "Traceback" not in result.output


def test_auto_on_an_empty_selection_stores_nothing(lake: tl.Lake) -> None:
    lake.write(synth_records(2, 2))
    report = run_credit(lake, where="task_id = 'nope'")
    assert report.estimator == "outcome" and report.rows_added == 0
    assert report.warnings and "no trajectories selected" in report.warnings[0]


def test_cli_default_prints_the_choice_and_json_carries_it(lake: tl.Lake) -> None:
    lake.write(synth_records(3, 3))
    runner = CliRunner()
    result = runner.invoke(credit, ["--lake", lake.uri, "--name", "d"])
    assert result.exit_code == 0, result.output
    assert f"estimator: {AUTO_GROUP} (" in result.output
    result = runner.invoke(credit, ["--lake", lake.uri, "--name", "d", "-o", "json"])
    data = json.loads(result.stdout)
    assert data["existing"] and data["estimator"] == AUTO_GROUP
    assert data["estimator_choice"]["name"] == AUTO_GROUP and data["warnings"] == []
    help_text = " ".join(runner.invoke(credit, ["--help"]).output.split())
    for name in ("auto", "progress-td", "hindsight:<model name|dir|fit>", "ensemble:<a>+<b>"):
        assert name in help_text


# ------------------------------------------------------------------ warnings


@pytest.mark.parametrize("estimator", ["prefix-mc", "group", "group:rloo", "anchor"])
def test_per_task_sources_warn_on_lone_rollouts(lake: tl.Lake, estimator: str) -> None:
    records = synth_records(3, 2) + synth_records(2, 1, seed=12)
    for i, r in enumerate(records[-2:]):
        r["task_id"] = f"alone-{i}"
    lake.write(records)
    report = run_credit(lake, estimator=estimator, name="r")
    lone = [w for w in report.warnings if "single labelled rollout" in w]
    assert len(lone) == 1 and lone[0].startswith("2 of 5 labelled tasks")
    # What the warning says: a lone rollout's credit is 0 on every turn but the last.
    alone = {r["trajectory_id"] for r in records[-2:]}
    for tid, credits in credits_of(lake, "r").items():
        if tid in alone:
            assert all(c == 0 for c in credits[:-1])


def test_crossfit_does_not_warn_on_lone_rollouts(lake: tl.Lake) -> None:
    lake.write(synth_records(6, 1))
    report = run_credit(lake, estimator="crossfit:text", name="cf")
    assert not any("single labelled rollout" in w for w in report.warnings)


def test_missing_and_blank_task_ids_are_counted_and_kept_apart(lake: tl.Lake) -> None:
    records = synth_records(1, 4)
    records[0]["task_id"] = ""
    records[1]["task_id"] = "   "
    records[2]["task_id"] = None
    lake.write(records)
    report = run_credit(lake, estimator="prefix-mc", name="pmc")
    assert any(w.startswith("3 of 4 trajectories have no task id") for w in report.warnings)
    assert any(w.startswith("4 of 4 labelled tasks have a single") for w in report.warnings)
    # Blank ids are tasks of their own, not one task '' shared by both: a lone rollout's
    # V(s_0) is (k + 1) / (1 + 2) for its own outcome k, whatever the other blank one did.
    rows = lake.sql(
        "SELECT c.trajectory_id, c.value_before, o.resolved FROM credits c "
        "JOIN outcomes o USING (trajectory_id) WHERE run_name = 'pmc' AND turn = 0"
    ).to_dicts()
    for row in rows:
        assert row["value_before"] == pytest.approx((int(row["resolved"]) + 1) / 3)


def test_partial_labels_say_who_gets_what(lake: tl.Lake) -> None:
    records = synth_records(6, 2)
    for r in records[:3]:
        r["resolved"] = r["reward"] = r["outcome_source"] = None
    lake.write(records)
    mc = run_credit(lake, estimator="prefix-mc", name="pmc")
    [note] = [w for w in mc.warnings if "outcome" in w]
    assert note.startswith("3 of 12 trajectories have no outcome")
    assert "3 get no credit rows" in note and "trajlake label" in note
    assert mc.skipped == 3
    cf = run_credit(lake, estimator="crossfit:text", name="cf")
    [note] = [w for w in cf.warnings if "outcome" in w]
    assert "3 are valued by crossfit:text with its own estimate as V(s_T)" in note
    assert cf.skipped == 0


def test_no_labels_with_an_explicit_source_warns(lake: tl.Lake) -> None:
    records = synth_records(2, 2)
    for r in records:
        r["resolved"] = r["reward"] = r["outcome_source"] = None
    lake.write(records)
    report = run_credit(lake, estimator="prefix-mc", name="pmc")
    assert report.rows_added == 0 and report.skipped == 4
    assert any(w.startswith("no trajectory has an outcome") for w in report.warnings)


def test_cli_prints_warnings(lake: tl.Lake) -> None:
    lake.write(synth_records(3, 1))
    args = ["--lake", lake.uri, "--estimator", "group", "--name", "g"]
    result = CliRunner().invoke(credit, args)
    assert result.exit_code == 0, result.output
    assert "warning: 3 of 3 labelled tasks have a single labelled rollout" in result.output
    data = json.loads(CliRunner().invoke(credit, [*args, "-o", "json"]).output)
    assert any("single labelled rollout" in w for w in data["warnings"])


def label_all_but_one(lake: tl.Lake, path: Path) -> list[TrajectoryTurns]:
    ids = [r["trajectory_id"] for r in lake.sql("SELECT trajectory_id FROM trajectories")]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trajectory_id", "resolved"])
        writer.writerows([tid, "true" if i % 2 else "false"] for i, tid in enumerate(ids[1:]))
    lake.label(str(path))
    return load_turns(lake)


@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_choice_and_warnings(lake: tl.Lake, tmp_path: Path) -> None:
    lake.ingest(str(CORPUS / "01_sweagent_traj"))
    with pytest.raises(TrajlakeError, match="trajlake label"):
        run_credit(lake)  # SWE-agent trajectories carry no outcome
    trajs = label_all_but_one(lake, tmp_path / "labels.csv")
    tasks = {t.task_id for t in trajs if t.outcome is not None}
    choice = choose_estimator(trajs)
    assert choice.name == (AUTO_CROSSFIT if len(tasks) >= AUTO_MIN_TASKS else AUTO_GROUP)
    report = run_credit(lake, estimator="prefix-mc", name="pmc")
    n = len(trajs)
    assert any(w.startswith(f"1 of {n} trajectories have no outcome") for w in report.warnings)
    assert any("single labelled rollout" in w for w in report.warnings)  # demonstrations
    assert report.skipped == 1


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_default_run(lake: tl.Lake, tmp_path: Path) -> None:
    lake.ingest(str(CORPUS / "01_sweagent_traj"))
    trajs = label_all_but_one(lake, tmp_path / "labels.csv")
    report = run_credit(lake)
    assert report.estimator_choice is not None
    assert report.estimator == choose_estimator(trajs).name
    assert report.turns == sum(len(t.turns) for t in trajs)  # the unlabelled one is valued too


# ------------------------------------------------------------------ featurising in processes


def synth_turns(n_tasks: int) -> tuple[list[TrajectoryTurns], dict[Any, Observation]]:
    """TrajectoryTurns and observations of synth rollouts, read back from a real lake."""
    batch = generate(SynthConfig(seed=3, n_tasks=n_tasks, rollouts_per_task=4))
    observations: dict[Any, Observation] = {}
    trajs: list[TrajectoryTurns] = []
    for r in batch.trajectories:
        t = TrajectoryTurns(r["trajectory_id"], r["task_id"], 1.0 if r["resolved"] else 0.0)
        from trajlake.credit._types import Turn

        msgs = r["messages"]
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            calls = m.get("tool_calls") or []
            text = "\n".join([m["content"], *(f"{c['name']}({c['arguments']})" for c in calls)])
            u = len(t.turns)
            t.turns.append(
                Turn(t.trajectory_id, "main", u, text, tuple(c["name"] for c in calls), False, None)
            )
            observations[(t.trajectory_id, "main", u)] = Observation(msgs[i + 1]["content"], False)
        trajs.append(t)
    return trajs, observations


def test_pooled_design_is_the_serial_design() -> None:
    trajs, obs = synth_turns(10)
    serial = TextFeaturiser(2**12, 16, obs, NgramHasher()).design(trajs)
    featuriser = pooled(TextFeaturiser(2**12, 16, obs, NgramHasher()), workers=2)
    assert isinstance(featuriser, PooledFeaturiser)
    featuriser.min_trajectories = 10
    try:
        parallel = featuriser.design(trajs)
    finally:
        shutdown_pool()
    assert featuriser._split_ok is True
    assert same_design(serial, parallel)
    # Joining slices by hand is the same design too (row numbers shifted per slice).
    plain = TextFeaturiser(2**12, 16, obs, NgramHasher())
    parts = [plain.design(trajs[:7]), plain.design(trajs[7:20]), plain.design(trajs[20:])]
    assert same_design(serial, join_designs(parts))
    assert not same_design(serial, plain.design(trajs[1:]))


def test_pooled_values_equal_serial_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trajs, obs = synth_turns(12)
    monkeypatch.setenv("TRAJLAKE_CREDIT_WORKERS", "1")
    serial = CrossFitTextValues("td", observations=obs).values(trajs)
    monkeypatch.delenv("TRAJLAKE_CREDIT_WORKERS")
    monkeypatch.setattr(PooledFeaturiser, "min_trajectories", 10)
    monkeypatch.setattr("trajlake.credit._featurise_pool.usable_workers", lambda: 2)
    try:
        parallel = CrossFitTextValues("td", observations=obs).values(trajs)
    finally:
        shutdown_pool()
    assert parallel == serial  # bit for bit


def test_a_design_that_does_not_split_is_built_serially() -> None:
    class Reversed(TextFeaturiser):
        def design(self, trajectories: Any) -> Any:
            d = super().design(trajectories)
            d.b_index, d.b_sign, d.b_row = d.b_index[::-1], d.b_sign[::-1], d.b_row[::-1]
            return d

    trajs, obs = synth_turns(3)
    featuriser = PooledFeaturiser(2**12, 16, obs, NgramHasher())
    featuriser.workers, featuriser.min_trajectories = 2, 2
    # Swap in the non-splitting design as the serial one (PooledFeaturiser's parent).
    featuriser.__class__ = type("P", (PooledFeaturiser, Reversed), {})
    out = featuriser.design(trajs)
    assert featuriser._split_ok is False
    expected = Reversed(2**12, 16, obs, NgramHasher()).design(trajs)
    assert np.array_equal(out.b_index, expected.b_index)


def test_workers_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLAKE_CREDIT_WORKERS", "1")
    assert usable_workers() == 1
    monkeypatch.setenv("TRAJLAKE_CREDIT_WORKERS", "zero")
    with pytest.raises(ValueError, match="TRAJLAKE_CREDIT_WORKERS"):
        usable_workers()
    monkeypatch.setenv("TRAJLAKE_CREDIT_WORKERS", "0")
    with pytest.raises(ValueError, match=">= 1"):
        usable_workers()
