"""A failed SFT export leaves no files: output is staged beside the folder and installed last."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.errors import SftSelfCheckFailed
from trajlake.export.sft import export_sft
from trajlake.sample import sample_trajectories


@pytest.fixture
def flat(lake: tl.Lake) -> tl.Lake:
    """Outcome credit under rise: unresolved trajectories have no trained turn."""
    lake.write(list(sample_trajectories(8)))
    run_credit(lake, estimator="outcome", mask="rise", name="flat")
    return lake


def _fail(lake: tl.Lake, out: str) -> None:
    with pytest.raises(SftSelfCheckFailed, match="no trained turn"):
        export_sft(lake, out, format="trl", credit="flat", require_trained=True)


def test_a_failed_export_leaves_no_folder_and_no_staging(flat: tl.Lake, tmp_path: Path) -> None:
    _fail(flat, str(tmp_path / "sft"))
    assert list(tmp_path.iterdir()) == [tmp_path / "lake"]


def test_a_failed_export_keeps_the_previous_one(flat: tl.Lake, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    export_sft(flat, str(out), format="trl", credit="flat")
    (out / "README.md").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _fail(flat, str(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake", "sft"]


def test_a_new_export_replaces_the_old_one_and_keeps_other_files(
    flat: tl.Lake, tmp_path: Path
) -> None:
    out = tmp_path / "sft"
    export_sft(flat, str(out), format="trl", val_frac=0.5, seed=3)
    (out / "README.md").write_text("mine")
    assert (out / "val-00000.jsonl").exists()
    export_sft(flat, str(out), format="trl")  # no val split this time
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "manifest.json",
        "train-00000.jsonl",
    ]
    assert (out / "README.md").read_text() == "mine"


def test_object_store_urls_stage_and_clean_up(flat: tl.Lake) -> None:
    fs = fsspec.filesystem("memory")
    _fail(flat, "memory://atomic/sft")
    assert not fs.exists("/atomic/sft") and fs.ls("/atomic", detail=False) == []
    export_sft(flat, "memory://atomic/sft", format="sharegpt", credit="flat")
    assert fs.ls("/atomic", detail=False) == ["/atomic/sft"]
    assert fs.exists("/atomic/sft/manifest.json") and fs.exists("/atomic/sft/train-00000.jsonl")
