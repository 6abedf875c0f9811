"""`torchrun -m trajlake train value`: two CPU processes train one model data-parallel (DDP over
gloo): each optimizer step sees a batch per rank, so an epoch takes half the steps of one
process, and rank 0 alone writes the model."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.synth import SynthConfig, generate

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.long
def test_torchrun_trains_one_model_data_parallel_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(generate(SynthConfig(seed=1, n_tasks=20, rollouts_per_task=3)).trajectories)
    out = tmp_path / "model"
    command = [torchrun, "--nproc_per_node", "2", "-m", "trajlake", "train", "value"]
    command += ["--lake", str(tmp_path / "lake"), "--config", str(MODELS / "tiny.yaml")]
    command += ["--set", "train.epochs=1", "--no-register", "--out", str(out), "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["directory"] == str(out)  # rank 0 reports, once
    card = json.loads((out / "model_card.json").read_text())
    examples = card["split"]["counts"]["train"]["examples"]
    batch = card["recipe"]["train"]["batch_size"]
    steps = card["training"]["history"][-1]["step"]
    assert math.ceil(examples / (2 * batch)) == steps < math.ceil(examples / batch)
    assert (out / "model.safetensors").is_file()
