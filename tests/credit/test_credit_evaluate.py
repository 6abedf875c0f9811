"""Evaluation of credit runs against ground truth: Spearman with ties, F1, bootstrap intervals,
task splits, the outcome broadcast floor, synth end to end, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.credit_eval_cmd import credit_eval
from trajlake.credit.evaluate import (
    bootstrap_spearman,
    detection,
    evaluate_credit,
    load_truth,
    rankdata,
    spearman,
    split_tasks,
    weighted_spearman,
)
from trajlake.credit.runs import run_credit
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate


def test_rankdata_averages_ties() -> None:
    assert rankdata([10.0, 20.0, 20.0, 5.0]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert rankdata([1.0, 1.0, 1.0]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_hand_computed() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ranks x = (1, 2.5, 2.5, 4), y = (1, 2, 3, 4); centred dot 4.5, norms² 4.5 and 5.
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))
    # Ties on both sides: x ranks (1.5, 1.5, 3), y ranks (1, 2.5, 2.5); dot 0.75, norms² 1.5.
    assert spearman([0, 0, 1], [0, 1, 1]) == pytest.approx(0.5)
    # Monotone but non-linear: rank correlation 1 where Pearson is not.
    assert spearman([1, 2, 3], [1, 10, 1000]) == pytest.approx(1.0)


def test_spearman_undefined_and_bad_input() -> None:
    assert spearman([0, 0, 0], [1, 2, 3]) is None
    assert spearman([1], [2]) is None
    with pytest.raises(ValueError, match="length"):
        spearman([1, 2], [1])


def test_spearman_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    x = [0.1, 0.4, 0.4, -0.2, 0.0, 0.0, 0.9, 0.4]
    y = [1, 3, 2, 0, 0, 1, 5, 3]
    assert spearman(x, y) == pytest.approx(float(stats.spearmanr(x, y).statistic))


def test_detection_hand_computed() -> None:
    true = [0.5, 0.0, 0.2, -0.3, 0.05]
    pred = [0.1, 0.3, 0.0, -0.1, 0.05]
    # True productive at eps 0.05: turns 0, 2, 4; predicted: turns 0, 1, 4 → TP 2.
    d = detection(pred, true, 0.05)
    assert (d.true_productive, d.predicted_productive, d.true_positives) == (3, 3, 2)
    assert d.precision == pytest.approx(2 / 3) and d.recall == pytest.approx(2 / 3)
    assert d.f1 == pytest.approx(2 / 3)
    none = detection([0.0] * 5, true, 0.05)
    assert (none.precision, none.recall, none.f1) == (0.0, 0.0, 0.0)
    assert detection([1.0, 0.0], [1.0, 0.0], 0.5).f1 == 1.0


@pytest.fixture(scope="module")
def synth_lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[tl.Lake, Path]:
    root = tmp_path_factory.mktemp("synth")
    batch = generate(SynthConfig(seed=11, n_tasks=20, rollouts_per_task=4))
    batch.write_jsonl(root / "rollouts.jsonl")
    batch.write_truth(root / "truth.jsonl")
    lake = tl.open_lake(root / "lake", create=True)
    lake.ingest(root / "rollouts.jsonl")
    run_credit(lake, estimator="outcome", name="outcome")
    run_credit(lake, estimator="prefix-mc", name="prefix-mc")
    return lake, root / "truth.jsonl"


def test_outcome_vs_prefix_mc_on_synth(synth_lake: tuple[tl.Lake, Path]) -> None:
    lake, truth_path = synth_lake
    truth = load_truth(truth_path)
    outcome = evaluate_credit(lake, "outcome", truth_path)
    prefix = evaluate_credit(lake, "prefix-mc", truth)
    n_turns = sum(len(t["credits"]) for t in truth.values())
    for ev in (outcome, prefix):
        assert ev.trajectories == 80 and ev.turns == n_turns
        assert ev.without_truth == ev.length_mismatch == 0
        assert ev.true_productive > 0
    # By construction: outcome broadcast gives credit 0 on every turn, so no rank correlation
    # of credit is defined, nothing is predicted productive and F1 is 0.
    assert outcome.pooled_spearman is None and outcome.within_trajectories == 0
    assert outcome.interior_spearman is None
    assert outcome.predicted_productive == 0 and outcome.f1 == 0.0
    assert outcome.value_spearman is not None  # V = outcome still ranks the states
    # Prefix-MC's last turn of a success gets 1 − V(s_{T-1}) ≥ eps, and that is truly productive.
    assert prefix.true_positives > 0 and prefix.f1 > outcome.f1
    assert prefix.pooled_spearman is not None and prefix.pooled_spearman > 0
    assert json.loads(json.dumps(prefix.to_dict()))["run_name"] == "prefix-mc"


def test_truth_subset_and_mismatch(synth_lake: tuple[tl.Lake, Path]) -> None:
    lake, truth_path = synth_lake
    truth = load_truth(truth_path)
    ids = sorted(truth)
    subset = {tid: truth[tid] for tid in ids[:10]}
    cut = dict(truth[ids[10]], credits=truth[ids[10]]["credits"][:-1])
    subset[ids[10]] = cut
    ev = evaluate_credit(lake, "prefix-mc", subset)
    assert ev.trajectories == 10 and ev.length_mismatch == 1 and ev.without_truth == 69
    with pytest.raises(TrajlakeError, match="no credit run"):
        evaluate_credit(lake, "nope", truth)
    with pytest.raises(TrajlakeError, match="matching truth"):
        evaluate_credit(lake, "prefix-mc", {})
    with pytest.raises(ValueError, match="signal"):
        evaluate_credit(lake, "prefix-mc", truth, signal="value")  # type: ignore[arg-type]


def test_cli_json_and_text(synth_lake: tuple[tl.Lake, Path]) -> None:
    lake, truth_path = synth_lake
    runner = CliRunner()
    args = ["prefix-mc", "--truth", str(truth_path), "--lake", str(lake.uri)]
    result = runner.invoke(credit_eval, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == evaluate_credit(lake, "prefix-mc", truth_path).to_dict()
    text = runner.invoke(credit_eval, [*args, "--signal", "advantage"])
    assert text.exit_code == 0, text.output
    assert "signal" in text.output and "advantage" in text.output and "f1" in text.output


def test_weighted_spearman_is_spearman_of_the_expanded_multiset() -> None:
    x = np.array([0.3, 0.1, 0.1, 0.7, -0.2, 0.3])
    y = np.array([1.0, 0.0, 2.0, 3.0, 0.0, 1.0])
    w = np.array([2.0, 0.0, 1.0, 3.0, 1.0, 1.0])
    expanded_x = [v for v, k in zip(x, w, strict=True) for _ in range(int(k))]
    expanded_y = [v for v, k in zip(y, w, strict=True) for _ in range(int(k))]
    assert weighted_spearman(x, y, w) == pytest.approx(spearman(expanded_x, expanded_y))
    assert weighted_spearman(x, y, np.ones(6)) == pytest.approx(spearman(list(x), list(y)))
    # Only one distinct x value drawn: undefined, as for the expanded lists.
    assert weighted_spearman(x, y, np.array([0.0, 2.0, 1.0, 0.0, 0.0, 0.0])) is None


def test_bootstrap_interval_over_clusters() -> None:
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(30), 5)
    x = rng.normal(size=150)
    y = x + rng.normal(scale=0.8, size=150)
    point = spearman(list(x), list(y))
    ci = bootstrap_spearman(x.tolist(), y.tolist(), clusters.tolist(), resamples=500, seed=3)
    assert ci is not None and point is not None
    assert ci[0] < point < ci[1] and ci[1] - ci[0] < 0.4
    again = bootstrap_spearman(x.tolist(), y.tolist(), clusters.tolist(), resamples=500, seed=3)
    assert again == ci  # seeded: reproducible
    assert bootstrap_spearman([1.0] * 10, list(range(10)), [0] * 5 + [1] * 5) is None
    with pytest.raises(ValueError, match="length"):
        bootstrap_spearman([1.0], [1.0, 2.0], [0])


def test_split_tasks_is_seeded_disjoint_and_complete() -> None:
    ids = [f"t{i}" for i in range(10)] * 3  # repeats are one task
    a = split_tasks(ids, test_fraction=0.3, seed=4)
    assert a == split_tasks(reversed(ids), test_fraction=0.3, seed=4)
    assert len(a.test) == 3 and len(a.train) == 7
    assert set(a.test) | set(a.train) == set(ids) and not set(a.test) & set(a.train)
    assert split_tasks(ids, test_fraction=0.3, seed=5).test != a.test
    assert "7 train / 3 held-out" in a.describe()
    with pytest.raises(ValueError, match="test_fraction"):
        split_tasks(ids, test_fraction=1.0)
    with pytest.raises(ValueError, match="2 distinct"):
        split_tasks(["only"])


def test_outcome_broadcast_floor(synth_lake: tuple[tl.Lake, Path]) -> None:
    lake, truth_path = synth_lake
    truth = load_truth(truth_path)
    ev = evaluate_credit(lake, "outcome", truth, signal="broadcast", bootstrap=200)
    # Each turn scored with its trajectory's outcome, computed here from the truth alone.
    scores = [float(t["success"]) for t in truth.values() for _ in t["credits"]]
    c_star = [c for t in truth.values() for c in t["credits"]]
    assert ev.pooled_spearman == pytest.approx(spearman(scores, c_star))
    assert ev.pooled_ci_low is not None and ev.pooled_ci_high is not None
    assert ev.pooled_ci_low <= ev.pooled_spearman <= ev.pooled_ci_high
    # Constant within each trajectory: no within-trajectory ranking exists.
    assert ev.within_spearman is None and ev.within_trajectories == 0
    # Every turn of a success is "predicted productive" (outcome 1 ≥ eps).
    assert ev.predicted_productive == sum(1 for s in scores if s == 1.0)
    assert ev.tasks == 20 and ev.bootstrap == 200
    # V(s_T) is the outcome for every source: the broadcast does not depend on the run.
    other = evaluate_credit(lake, "prefix-mc", truth, signal="broadcast", bootstrap=200)
    assert other.pooled_spearman == ev.pooled_spearman and other.f1 == ev.f1


def test_held_out_tasks_only(synth_lake: tuple[tl.Lake, Path]) -> None:
    lake, truth_path = synth_lake
    truth = load_truth(truth_path)
    split = split_tasks((t["task_id"] for t in truth.values()), seed=7)
    ev = evaluate_credit(lake, "prefix-mc", truth, tasks=split.test, bootstrap=0)
    assert ev.tasks == len(split.test) == 10 and ev.trajectories == 40
    assert ev.without_truth == 40  # the train tasks' trajectories are left out
    assert ev.pooled_ci_low is None and ev.bootstrap == 0
    runner = CliRunner()
    args = ["prefix-mc", "--truth", str(truth_path), "--lake", str(lake.uri)]
    result = runner.invoke(
        credit_eval, [*args, "--held-out-seed", "7", "--bootstrap", "0", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["split"]["test"] == list(split.test) and data["split"]["seed"] == 7
    assert data["trajectories"] == 40 and data["pooled_spearman"] == ev.pooled_spearman
    text = runner.invoke(credit_eval, [*args, "--held-out-seed", "7", "--signal", "broadcast"])
    assert text.exit_code == 0, text.output
    assert "10 train / 10 held-out tasks" in text.output and "pooled_ci_low" in text.output
