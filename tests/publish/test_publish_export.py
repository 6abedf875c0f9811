"""Publishing an existing export folder (SFT, RL groups): its shards and manifest as written,
a card whose one config has the export's splits, and a refusal when the folder changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.publish.conftest import SynthLake
from trajlake.export.groups import export_groups
from trajlake.export.sft import export_sft
from trajlake.publish import PublishError, publish

datasets = pytest.importorskip("datasets")


def _load(folder: Path, cache: Path) -> object:
    return datasets.load_dataset(str(folder), cache_dir=str(cache))


def test_an_sft_export_loads_with_its_splits(synth: SynthLake, tmp_path: Path) -> None:
    export = tmp_path / "sft"
    report = export_sft(synth.lake, str(export), format="trl", val_frac=0.5, seed=1)
    out = tmp_path / "ds"
    folder = publish(
        synth.lake, "me/sft", from_export=str(export), dry_run=str(out), license="mit"
    ).folder
    loaded = _load(out, tmp_path)
    assert loaded["train"].num_rows == report.splits["train"].samples
    assert loaded["validation"].num_rows == report.splits["val"].samples
    assert "messages" in loaded["train"].column_names
    # The export's manifest is published as written, and every shard byte for byte.
    assert (out / "manifest.json").read_bytes() == (export / "manifest.json").read_bytes()
    for name in folder.files[2:]:
        assert (out / name).read_bytes() == (export / name).read_bytes()
    hub = pytest.importorskip("huggingface_hub")
    card = hub.DatasetCard.load(out / "README.md")
    [config] = card.data.configs
    assert [s["split"] for s in config["data_files"]] == ["train", "validation"]
    assert card.data.license == "mit" and "sft" in card.data.tags
    assert "| `format` | `trl` |" in card.text
    # With the lake, the card lists the exported rollouts' sources and redactions.
    assert "1 placeholders in 1 trajectories" in card.text
    assert folder.commit_message() == (
        f"Publish trajlake export of lake snapshot {report.snapshot_id} (tags: gen-1)"
    )
    assert folder.delete_patterns == ["train-*", "val-*"]


def test_a_groups_export_publishes_without_the_lake(synth: SynthLake, tmp_path: Path) -> None:
    export = tmp_path / "groups"
    export_groups(synth.lake, str(export), size=4, max_rollouts=4, rho_min=0.25, rho_max=0.75)
    manifest = json.loads((export / "manifest.json").read_text())
    out = tmp_path / "ds"
    folder = publish(None, "me/groups", from_export=str(export), dry_run=str(out)).folder
    loaded = _load(out, tmp_path)
    assert loaded["train"].num_rows == manifest["splits"]["train"]["rollouts"] == 8
    assert folder.configs == {"default": {"rows": 8, "files": 1}}
    text = (out / "README.md").read_text()
    assert "groups" in text.split("---")[1] and "publish with `--lake` to add them" in text
    # The same folder again: an earlier publish is rewritten.
    publish(None, "me/groups", from_export=str(export), dry_run=str(out))


def test_a_changed_export_is_refused(synth: SynthLake, tmp_path: Path) -> None:
    export = tmp_path / "sft"
    export_sft(synth.lake, str(export), format="openai")
    shard = export / "train-00000.jsonl"
    shard.write_text(shard.read_text().replace("a", "b", 1))
    with pytest.raises(PublishError, match="the folder changed since its export"):
        publish(None, "me/sft", from_export=str(export), dry_run=str(tmp_path / "ds"))
    with pytest.raises(PublishError, match=r"has no manifest\.json"):
        publish(None, "me/sft", from_export=str(tmp_path), dry_run=str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="an export folder is published as it was exported"):
        publish(synth.lake, "me/sft", from_export=str(export), where="resolved", dry_run="unused")
    assert not (tmp_path / "ds").exists()
