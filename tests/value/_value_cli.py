"""What the value-model CLI tests share: running a command that must succeed, and a tagged
synthetic lake to train on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.synth import SynthBatch, SynthConfig, generate

MODELS = Path(__file__).resolve().parents[2] / "models"


def run_cli(*args: str) -> Result:
    """`trajlake ARGS`, asserted to exit 0 (the output is shown when it does not)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def gen0_lake(root: Path) -> tuple[str, SynthBatch]:
    """A lake under `root` holding 30 synthetic tasks × 6 rollouts as generation 0, tagged
    `gen-0`; its directory and the generated batch."""
    lake_dir = str(root / "lake")
    lake = tl.open_lake(lake_dir, create=True)
    batch = generate(SynthConfig(seed=1, n_tasks=30, rollouts_per_task=6))
    rows: list[dict[str, Any]] = [{**t, "generation": 0} for t in batch.trajectories]
    lake.write(rows)
    lake.tag("gen-0")
    return lake_dir, batch
