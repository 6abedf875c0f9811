"""Publish fixtures: a synthetic lake with every trajectory table filled (messages, labels by id
and by task + run, a credit run, a redacted secret, named rewards) and a tag on its snapshot."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.synth import SynthConfig, generate

SECRET = "sk-proj-" + "Zq7xW2mN9pL4vR8tK3yH6jB1cF5gD0sA" * 2
"""An OpenAI-style key: ingest replaces it with a placeholder."""


@dataclass(frozen=True)
class SynthLake:
    """The lake and what the tests compare against."""

    lake: tl.Lake
    ids: list[str]
    tasks: list[str]
    run_id: str


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> SynthLake:
    """24 synthetic rollouts (6 tasks × 4), ingested, labelled, credited and tagged `gen-1`."""
    root = tmp_path_factory.mktemp("synth")
    rows = generate(SynthConfig(seed=5, n_tasks=6, rollouts_per_task=4)).trajectories
    rows[0]["rewards"] = {"tests": 0.5, "lint": 1.0}
    rows[1]["messages"][1]["content"] += f"\nexport OPENAI_API_KEY={SECRET}\n"
    source = root / "rollouts.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lake = tl.open_lake(root / "lake", create=True)
    lake.ingest(str(source), workers=1)
    ids = sorted(r["trajectory_id"] for r in rows)
    tasks = sorted({r["task_id"] for r in rows})
    run_id = rows[0]["run_id"]
    labels = root / "labels.csv"
    # Two labels by trajectory id, one by task + run id (it matches all 4 rollouts of task 2).
    labels.write_text(
        "trajectory_id,task_id,run_id,resolved\n"
        f"{ids[0]},,,true\n{ids[5]},,,false\n,{tasks[2]},{run_id},true\n"
    )
    lake.label(str(labels))
    run_credit(lake, estimator="prefix-mc", mask="rise", name="pmc")
    lake.tag("gen-1", note="publish tests")
    return SynthLake(lake, ids, tasks, run_id)


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No stored Hub token, datasets cache in the test's folder, no Xet (the fake Hub has none)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    # huggingface_hub reads HF_HUB_DISABLE_XET once, at import: set the constant it consults.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    return tmp_path
