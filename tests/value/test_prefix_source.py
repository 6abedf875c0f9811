"""`value-model:<model dir>`: a trained prefix value model as a credit value source, found
through the `trajlake.value_sources` entry point (credit does not import it) and scoring every
turn boundary from the lake's messages."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.credit import load_turns, run_credit, value_source
from trajlake.errors import ModelFormatError
from trajlake.synth import SynthConfig, generate

pytest.importorskip("torch")

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def prefix_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A synthetic lake and a prefix value model trained on it (one round, short inputs, a
    smaller backbone than the recipe's: the test checks plumbing, not accuracy)."""
    root = tmp_path_factory.mktemp("prefix")
    lake_dir = str(root / "lake")
    lake = tl.open_lake(lake_dir, create=True)
    lake.write(generate(SynthConfig(seed=2, n_tasks=16, rollouts_per_task=4)).trajectories)
    args = ["train", "value", "--lake", lake_dir, "--config", str(MODELS / "tiny-prefix.yaml")]
    args += ["--out", str(root / "model"), "-o", "json"]
    small = ("prefix.rounds=1", "serializer.max_tokens=64", "serializer.observation_max_tokens=16")
    small += ("backbone.config.hidden_size=32", "backbone.config.intermediate_size=64")
    for setting in (*small, "backbone.tokenizer.train_vocab_size=500"):
        args += ["--set", setting]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {"lake": lake_dir, "model": json.loads(result.stdout)["directory"]}


def test_a_prefix_model_directory_values_every_turn_boundary(prefix_model: dict[str, Any]) -> None:
    lake = tl.open_lake(prefix_model["lake"])
    estimator = f"value-model:{prefix_model['model']}"
    report = run_credit(lake, estimator=estimator, mask="all")
    turns = {t.trajectory_id: t for t in load_turns(lake)}
    assert report.trajectories == len(turns) and report.turns > 0
    rows = lake.sql(
        "SELECT trajectory_id, turn, value_before, value_after FROM credits ORDER BY 1, 2"
    ).rows()
    by_traj: dict[str, list[tuple[float, float]]] = {}
    for tid, _, before, after in rows:
        by_traj.setdefault(tid, []).append((before, after))
    priors = {pairs[0][0] for pairs in by_traj.values()}
    assert len(priors) == 1 and 0.0 < priors.pop() < 1.0  # V(s_0): the training success rate
    for tid, pairs in by_traj.items():
        assert pairs[-1][1] == turns[tid].outcome  # V(s_T): the known outcome
        assert all(0.0 <= v <= 1.0 for pair in pairs for v in pair)
        assert all(a == b for (_, a), (b, _) in itertools.pairwise(pairs))


def test_a_directory_goes_to_the_neural_source_and_is_checked(
    prefix_model: dict[str, Any], tmp_path: Path
) -> None:
    # Credit's own `value-model:` would read a JSON file; a directory is the value package's.
    lake = tl.open_lake(prefix_model["lake"])
    with pytest.raises(ModelFormatError, match="not a trajlake model directory"):
        value_source(f"value-model:{tmp_path}", lake=lake)
