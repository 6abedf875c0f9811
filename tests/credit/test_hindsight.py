"""The hindsight source: values from Δ by hand, the sign of Δ under an LM trained so the outcome
decides the next action (loaded by path through `from_pretrained`), batching and prefix reuse
equal to one-by-one scoring, truncation, clear errors, cross-fitting, the CLI and real data."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from click.testing import CliRunner

import trajlake as tl
from tests.credit._corpus import CORPUS, ingest_labelled_corpus
from trajlake.cli.credit_cmd import credit
from trajlake.credit import TrajectoryTurns, Turn, load_turns, value_source
from trajlake.credit._text_features import Observation
from trajlake.errors import TrajlakeError
from trajlake.synth import SynthConfig, generate
from trajlake.value._hindsight_lm import (
    TuneConfig,
    fine_tune,
    load_causal_lm,
    score,
    segments,
    tiny_lm,
    units,
)
from trajlake.value._neural_tokenizers import train_tokenizer
from trajlake.value.hindsight import HindsightValues, values_from_deltas


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """These models are tiny: one thread is as fast, and far faster on a loaded machine
    (several threads contending for busy cores spin instead of computing)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def rollout(tid: str, task: str, success: bool, obs: dict) -> TrajectoryTurns:
    """Three turns: the same look-around, then `apply_fix` (successes) or `apply_hack`
    (failures), then the same submit; observations say nothing about the outcome."""
    t = TrajectoryTurns(tid, task, 1.0 if success else 0.0)
    actions = ["open_file main", "apply_fix now" if success else "apply_hack now", "submit done"]
    for u, text in enumerate(actions):
        t.turns.append(Turn(tid, "main", u, text, (), False, None))
        obs[(tid, "main", u)] = Observation("ok", False)
    return t


def rollouts(n_tasks: int = 4, per_task: int = 4) -> tuple[list[TrajectoryTurns], dict]:
    obs: dict = {}
    trajs = [
        rollout(f"t{k}-{i}", f"task{k}", i % 2 == 0, obs)
        for k in range(n_tasks)
        for i in range(per_task)
    ]
    return trajs, obs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 fine-tuned so the outcome prefix decides fix vs hack, saved to disk."""
    trajs, obs = rollouts()
    source = HindsightValues(None, fit=True)
    tokenizer = train_tokenizer(
        [
            source.success_text,
            source.failure_text,
            "open_file main apply_fix apply_hack now",
            "submit done ok ### action observation",
        ],
        vocab_size=200,
        kind="wordpiece",
    )
    config = TuneConfig(steps=120, batch_size=16, lr=3e-3, n_embd=32, n_layer=1, n_head=2)
    lm = tiny_lm(tokenizer, 128, config, "cpu")
    ok, bad = source.prefixes(tokenizer)
    todo = units(segments(tokenizer, trajs, obs, 16), budget=64, include_observation=True)
    fine_tune(lm, [(ok if trajs[u.index].outcome else bad, u) for u in todo], config)
    path = tmp_path_factory.mktemp("hindsight-lm")
    lm.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_values_from_deltas_by_hand() -> None:
    # logit 0.5 = 0; + log 3 → σ = 0.75; + 0 → 0.75; − log 3 → back to 0.5.
    got = values_from_deltas([math.log(3), 0.0, -math.log(3)], 0.5, 1.0)
    assert got == pytest.approx([0.5, 0.75, 0.75, 0.5])
    # β halves the log-odds steps: σ(log 3 / 2) = √3 / (1 + √3).
    assert values_from_deltas([math.log(3)], 0.5, 0.5)[1] == pytest.approx(
        math.sqrt(3) / (1 + math.sqrt(3))
    )


def test_outcome_prefix_gives_the_expected_sign(model_dir: Path) -> None:
    trajs, obs = rollouts(n_tasks=1)
    source = value_source(f"hindsight:{model_dir}", observations=obs, score="action")
    values = source.values(trajs)
    deltas = source.deltas  # type: ignore[attr-defined]
    for t in trajs:
        d = deltas[t.trajectory_id]
        if t.outcome:  # apply_fix is likelier once success is known
            assert d[1] > 1.0
        else:
            assert d[1] < -1.0
        assert abs(d[0]) < abs(d[1])  # the shared first action says little
        v = values[t.trajectory_id]
        assert len(v) == 4 and v[-1] == t.outcome
        assert (v[2] > v[1]) if t.outcome else (v[2] < v[1])


def test_batching_and_prefix_reuse_equal_one_by_one(model_dir: Path) -> None:
    lm = load_causal_lm(model_dir)
    trajs, obs = rollouts(n_tasks=2)
    todo = units(segments(lm.tokenizer, trajs, obs, 16), budget=40, include_observation=True)
    prefix = HindsightValues(model_dir).prefixes(lm.tokenizer)[0]
    single = score(lm, prefix, todo, batch_size=1, reuse_prefix=False)
    batched = score(lm, prefix, todo, batch_size=7, reuse_prefix=True)
    assert batched == pytest.approx(single, abs=1e-4)
    assert all(v < 0 for v in single)  # log-probabilities of ≥ 1 token


def test_truncation_keeps_the_budget_and_the_latest_history(model_dir: Path) -> None:
    lm = load_causal_lm(model_dir)
    trajs, obs = rollouts(n_tasks=1, per_task=1)
    segs = segments(lm.tokenizer, trajs, obs, 16)
    full = units(segs, budget=1000, include_observation=False)
    cut = units(segs, budget=12, include_observation=False)
    assert all(len(u.context) + len(u.target) <= 12 for u in cut)
    for a, b in zip(full, cut, strict=True):
        assert a.target == b.target
        assert a.context[len(a.context) - len(b.context) :] == b.context  # a tail of it
    assert len(cut[2].context) < len(full[2].context)
    small = HindsightValues(model_dir, max_tokens=12, observations=obs).values(trajs)
    big = HindsightValues(model_dir, max_tokens=1000, observations=obs).values(trajs)
    assert small != big and all(0.0 <= v <= 1.0 for v in small["t0-0"])


def test_bad_model_names_are_clear_errors(tmp_path: Path) -> None:
    trajs, obs = rollouts(n_tasks=1)
    with pytest.raises(TrajlakeError, match="no model directory"):
        value_source(f"hindsight:{tmp_path / 'missing'}").values(trajs)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrajlakeError, match="could not load a causal LM"):
        value_source(f"hindsight:{tmp_path / 'empty'}").values(trajs)
    with pytest.raises(ValueError, match="score must be"):
        HindsightValues(tmp_path, score="tokens")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fit=True"):
        HindsightValues(None)
    with pytest.raises(TrajlakeError, match="at least 2 tasks"):
        HindsightValues(None, fit=True, observations=obs).values(trajs)


def test_cross_fitted_fine_tune_finds_the_sign_out_of_fold() -> None:
    trajs, obs = rollouts(n_tasks=4)
    source = value_source(
        "hindsight:fit", observations=obs, score="action", steps=120, lr=3e-3, folds=2,
        n_embd=32, n_layer=1, max_tokens=64, segment_tokens=16,
    )  # fmt: skip
    values = source.values(trajs)
    assert isinstance(source, HindsightValues)
    for f, tasks in enumerate(source.train_tasks):  # no fold's model saw the tasks it valued
        held = {k for k, g in source.fold_of_task.items() if g == f}
        assert held and not held & tasks
    for t in trajs:
        d = source.deltas[t.trajectory_id]
        assert (d[1] > 0) if t.outcome else (d[1] < 0)
        assert values[t.trajectory_id][0] == pytest.approx(0.5)  # the training folds' rate


@pytest.fixture
def synth_lake(tmp_path: Path) -> tl.Lake:
    batch = generate(SynthConfig(seed=1, n_tasks=4, rollouts_per_task=3))
    batch.write_jsonl(tmp_path / "rollouts.jsonl")
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.ingest(tmp_path / "rollouts.jsonl")
    return lake


def test_cli_runs_both_names(synth_lake: tl.Lake, model_dir: Path) -> None:
    runner = CliRunner()
    n_turns = sum(len(t.turns) for t in load_turns(synth_lake))
    for estimator, options in (
        (f"hindsight:{model_dir}", ["batch_size=5"]),
        ("hindsight:fit", ["steps=5", "folds=2", "n_embd=16", "n_layer=1", "max_tokens=64"]),
    ):
        args = ["--lake", synth_lake.uri, "--estimator", estimator, "-o", "json"]
        for option in options:
            args += ["--source-option", option]
        result = runner.invoke(credit, args)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["rows_added"] == n_turns and report["skipped"] == 0
        rows = synth_lake.sql(
            "SELECT value_before FROM credits WHERE run_name = ?", params=[report["run_name"]]
        ).rows()
        assert all(0.0 <= v <= 1.0 for (v,) in rows)


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")
def test_real_corpus_end_to_end(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    ingest_labelled_corpus(lake, tmp_path)
    args = ["--lake", lake.uri, "--estimator", "hindsight:fit", "--name", "hs", "-o", "json"]
    for option in ("steps=10", "n_embd=16", "n_layer=1", "max_tokens=128", "vocab_size=500"):
        args += ["--source-option", option]
    result = CliRunner().invoke(credit, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["skipped"] == 0
    assert report["rows_added"] == sum(len(t.turns) for t in load_turns(lake))
    rows = lake.sql(
        "SELECT c.value_before, tr.harness FROM credits c "
        "JOIN trajectories tr USING (trajectory_id) WHERE run_name = 'hs'"
    ).to_dicts()
    assert {r["harness"] for r in rows} == {"swe-agent", "mini-swe-agent", "tau-bench"}
    assert all(0.0 <= r["value_before"] <= 1.0 and math.isfinite(r["value_before"]) for r in rows)
