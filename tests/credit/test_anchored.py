"""State-anchored values: normalised anchor states, values by hand (in-sample and leave-one-out),
the single-rollout fallback and its warning, and runs through `trajlake credit`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

import trajlake as tl
from tests.credit._corpus import CORPUS, ingest_labelled_corpus
from trajlake.cli.credit_cmd import credit
from trajlake.credit import AnchoredValues, TrajectoryTurns, Turn, load_turns, run_credit
from trajlake.credit._text_features import Observation
from trajlake.credit.anchored import state_key
from trajlake.credit.evaluate import evaluate_credit
from trajlake.synth import SynthConfig, generate


def traj(tid: str, task: str, outcome: float, texts: list[str], obs: dict) -> TrajectoryTurns:
    t = TrajectoryTurns(tid, task, outcome)
    for u, text in enumerate(texts):
        t.turns.append(Turn(tid, "main", u, 'bash({"command": "ls"})', ("bash",), False, None))
        obs[(tid, "main", u)] = Observation(text, False)
    return t


def turn() -> Turn:
    return Turn("t", "main", 0, 'bash({"command": "ls"})', ("bash",), False, None)


def test_anchor_states_ignore_numbers_paths_hashes_and_spacing() -> None:
    def key(text: str) -> str:
        return state_key(turn(), Observation(text, False))

    assert key("3 passed in 0.51s") == key("12 passed  in 2.04s")
    assert key("error in /repo/src/a/b.py line 7") == key("error in src/c.py line 99")
    assert key("HEAD is now at 3f2a9c81e") == key("HEAD is now at 0be77d1a2")
    assert key("1 failed, 2 passed") != key("3 passed")
    assert key("ok") != state_key(turn(), Observation("ok", True))  # a failure is another state
    assert state_key(turn(), None) == state_key(turn(), Observation("  ", False))


def rollouts(obs: dict) -> list[TrajectoryTurns]:
    fail2, fail5 = "1 failed, 2 passed in 0.7s", "1 failed, 5 passed in 1.2s"
    return [
        traj("r1", "A", 1.0, ["found bug at line 12", "3 passed in 0.5s", "submitted"], obs),
        traj("r2", "A", 0.0, ["found bug at line 40", fail2, "submitted"], obs),
        traj("r3", "A", 0.0, ["no match in /repo/a.py", fail5, "submitted"], obs),
    ]


def test_values_by_hand() -> None:
    # μ = 1/3, m = 1. "found bug at line N": r1, r2 (1 success) → (1 + 1/3)/3 = 4/9;
    # "N passed": r1 → (1 + 1/3)/2 = 2/3; "N failed, N passed": r2, r3 → (1/3)/3 = 1/9;
    # "no match in PATH": r3 → (1/3)/2 = 1/6.
    obs: dict = {}
    values = AnchoredValues(prior=1.0, observations=obs).values(rollouts(obs))
    assert values["r1"] == pytest.approx([1 / 3, 4 / 9, 2 / 3, 1.0])
    assert values["r2"] == pytest.approx([1 / 3, 4 / 9, 1 / 9, 0.0])
    assert values["r3"] == pytest.approx([1 / 3, 1 / 6, 1 / 9, 0.0])


def test_leave_one_out_values_by_hand() -> None:
    # Without its own outcome: r1 sees μ = 0 and no other success; r2 sees μ = 1/2, r1 through
    # "found bug" ((1 + 1/2)/2) and r3 through "failed" ((0 + 1/2)/2); r3: μ = 1/2, "no match"
    # seen by nobody else (the mean), "failed" by r2.
    obs: dict = {}
    values = AnchoredValues(prior=1.0, leave_one_out=True, observations=obs).values(rollouts(obs))
    assert values["r1"] == pytest.approx([0.0, 0.0, 0.0, 1.0])
    assert values["r2"] == pytest.approx([0.5, 0.75, 0.25, 0.0])
    assert values["r3"] == pytest.approx([0.5, 0.5, 0.25, 0.0])


def test_a_single_rollout_task_gets_its_mean_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    obs: dict = {}
    trajs = [*rollouts(obs), traj("alone", "B", 1.0, ["found bug at line 3", "done"], obs)]
    source = AnchoredValues(observations=obs)
    with caplog.at_level(logging.WARNING, logger="trajlake.credit.anchored"):
        values = source.values(trajs)
    assert values["alone"] == [1.0, 1.0, 1.0]
    assert source.single_rollout_tasks == 1
    assert "1 of 2 tasks have a single labelled rollout" in caplog.text


def test_run_reads_observations_and_beats_nothing(lake: tl.Lake, tmp_path: Path) -> None:
    batch = generate(SynthConfig(seed=5, n_tasks=20, rollouts_per_task=8))
    batch.write_jsonl(tmp_path / "r.jsonl")
    batch.write_truth(tmp_path / "t.jsonl")
    lake.ingest(str(tmp_path / "r.jsonl"))
    result = CliRunner().invoke(
        credit, ["--lake", lake.uri, "--estimator", "anchor", "--name", "an", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows_added"] == sum(len(t.turns) for t in load_turns(lake))
    stored = {
        (r["trajectory_id"], r["turn"]): r["value_before"]
        for r in lake.sql("SELECT * FROM credits WHERE run_name = 'an'").to_dicts()
    }
    # Without the lake the states fall back to actions: the run used the observations.
    actions_only = AnchoredValues().values(load_turns(lake))
    assert any(
        abs(stored[(tid, t)] - v[t]) > 1e-9
        for tid, v in actions_only.items()
        for t in range(len(v) - 1)
    )
    ev = evaluate_credit(lake, "an", tmp_path / "t.jsonl")
    assert ev.interior_spearman is not None and ev.interior_spearman > 0.1
    assert ev.pooled_spearman is not None and ev.pooled_spearman > 0.3


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_end_to_end(
    lake: tl.Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ingest_labelled_corpus(lake, tmp_path)
    with caplog.at_level(logging.WARNING, logger="trajlake.credit.anchored"):
        report = run_credit(lake, estimator="anchor", name="anchor")
    assert report.skipped == 0
    assert report.rows_added == sum(len(t.turns) for t in load_turns(lake))
    # SWE-agent demonstrations mostly have one rollout per task: they are counted and named.
    assert "tasks have a single labelled rollout" in caplog.text
    moved = lake.sql(
        "SELECT tr.harness, count(*) FILTER (WHERE c.turn > 0 AND c.credit <> 0) AS n "
        "FROM credits c JOIN trajectories tr USING (trajectory_id) "
        "WHERE run_name = 'anchor' GROUP BY 1"
    ).to_dicts()
    # τ-bench has 4 rollouts per task, so anchored states move values before the last turn.
    assert {r["harness"]: r["n"] for r in moved}["tau-bench"] > 0
