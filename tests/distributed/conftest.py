"""Fixtures of the Ray tests: one local Ray cluster per test session (2 CPUs, no dashboard), a
synthetic lake with the models trained on it once, and a fresh copy of that lake per test (each
test commits scores or credits of its own)."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.credit import load_turns
from trajlake.credit.value_model import PrefixModelValues
from trajlake.synth import SynthConfig, generate

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster for the whole session; its address (for driver subprocesses)."""
    ray = pytest.importorskip("ray")
    with warnings.catch_warnings():
        # Ray's own deprecation notices about its defaults, raised while it starts.
        warnings.simplefilter("ignore", DeprecationWarning)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


def _train(lake_dir: str, recipe: str, out: Path) -> str:
    args = ["train", "value", "--lake", lake_dir, "--config", str(MODELS / recipe)]
    result = CliRunner().invoke(cli, [*args, "--out", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["directory"])


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A lake of 20 synthetic tasks × 3 rollouts, the sparse text model and the feature
    baseline trained on it, and credit's prefix value model (JSON) fitted on its turns."""
    root = tmp_path_factory.mktemp("ray-lake")
    lake_dir = str(root / "lake")
    lake = tl.open_lake(lake_dir, create=True)
    lake.write(generate(SynthConfig(seed=1, n_tasks=20, rollouts_per_task=3)).trajectories)
    prefix_json = root / "prefix-value.json"
    PrefixModelValues().fit(load_turns(lake)).save(prefix_json)
    return {
        "lake": lake_dir,
        "sparse": _train(lake_dir, "sparse.yaml", root / "sparse"),
        "baseline": _train(lake_dir, "baseline.yaml", root / "baseline"),
        "prefix_json": str(prefix_json),
        "trajectories": 60,
    }


@pytest.fixture
def lake_copy(trained: dict[str, Any], tmp_path: Path) -> tl.Lake:
    """A private copy of the trained lake (as it was before any scoring or credit)."""
    target = tmp_path / "lake"
    shutil.copytree(trained["lake"], target)
    return tl.open_lake(target)
