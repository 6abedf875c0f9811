"""`publish --dry-run`: the dataset folder of a snapshot loads with `datasets` config by config
with the lake's rows, its card loads with huggingface_hub, its manifest's sha256 are the files',
and `--where` filters every table the same way."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.publish.conftest import SECRET, SynthLake
from trajlake.errors import OutputInsideLake
from trajlake.publish import PublishError, publish, write_snapshot_folder

datasets = pytest.importorskip("datasets")


def _load(folder: Path, config: str | None, cache: Path) -> Any:
    return datasets.load_dataset(str(folder), config, split="train", cache_dir=str(cache))


def _lake_ids(synth: SynthLake, table: str, where: str = "TRUE") -> list[Any]:
    query = f"SELECT trajectory_id FROM {table} WHERE {where} ORDER BY ALL"
    return [r["trajectory_id"] for r in synth.lake.sql(query).to_dicts()]


@pytest.fixture(scope="module")
def folder(synth: SynthLake, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("published") / "ds"
    publish(synth.lake, "me/rollouts", dry_run=str(out), license="Apache-2.0")
    return out


def test_every_config_loads_with_the_rows_of_the_lake(
    synth: SynthLake, folder: Path, tmp_path: Path
) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    # The default tables that hold rows; the empty ones are listed, not written.
    assert list(manifest["tables"]) == ["trajectories", "messages", "labels", "credits"]
    assert manifest["empty_tables"] == ["calls", "scores"]
    assert (
        "Not published, as they hold no rows in this selection: `calls`, `scores`."
        in (folder / "README.md").read_text()
    )
    for table in manifest["tables"]:
        loaded = _load(folder, table, tmp_path)
        assert loaded.num_rows == manifest["tables"][table]["rows"]
        expected = synth.lake.sql(f"SELECT count(*) AS n FROM {table}").to_dicts()[0]["n"]
        assert loaded.num_rows == expected
        got = sorted(loaded["trajectory_id"], key=lambda v: (v is None, v or ""))
        assert got == sorted(_lake_ids(synth, table), key=lambda v: (v is None, v or ""))
    # Without a config name, the default one (trajectories) loads.
    assert sorted(_load(folder, None, tmp_path)["trajectory_id"]) == synth.ids


def test_rows_keep_their_values(synth: SynthLake, folder: Path, tmp_path: Path) -> None:
    trajectories = {r["trajectory_id"]: r for r in _load(folder, "trajectories", tmp_path)}
    # Map columns become lists of {key, value}: datasets has no map feature.
    rewards = trajectories[synth.ids[0]]["rewards"]
    assert sorted((e["key"], e["value"]) for e in rewards) == [("lint", 1.0), ("tests", 0.5)]
    assert trajectories[synth.ids[1]]["rewards"] is None
    assert json.loads(trajectories[synth.ids[0]]["tools"])[0]["type"] == "function"
    lake_row = synth.lake.sql(
        "SELECT final_output, reward FROM trajectories WHERE trajectory_id = ?", [synth.ids[3]]
    ).to_dicts()[0]
    assert trajectories[synth.ids[3]]["final_output"] == lake_row["final_output"]
    assert trajectories[synth.ids[3]]["reward"] == lake_row["reward"]
    contents = [m["content"] or "" for m in _load(folder, "messages", tmp_path)]
    assert not any(SECRET in c for c in contents)
    assert sum("<SECRET:openai" in c for c in contents) == 1


def test_card_loads_with_huggingface_hub(synth: SynthLake, folder: Path) -> None:
    hub = pytest.importorskip("huggingface_hub")
    card = hub.DatasetCard.load(folder / "README.md", ignore_metadata_errors=False)
    data = card.data.to_dict()
    assert data["license"] == "apache-2.0"
    assert "trajlake" in data["tags"] and data["size_categories"] == ["n<1K"]
    configs = {c["config_name"]: c for c in data["configs"]}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert list(configs) == list(manifest["tables"])
    assert configs["trajectories"]["default"] is True
    for name, config in configs.items():
        [split] = config["data_files"]
        assert split["split"] == "train"
        assert split["path"] == [f["path"] for f in manifest["tables"][name]["files"]]
        assert all((folder / p).is_file() for p in split["path"])
    snapshot = synth.lake.snapshot()
    assert f"lake snapshot **{snapshot.snapshot_id}**" in card.text and "`gen-1`" in card.text
    assert "1 placeholders in 1 trajectories" in card.text
    assert "| pmc | prefix-mc |" in card.text
    for files in manifest["tables"].values():
        assert all(f["sha256"] in card.text for f in files["files"])


def test_manifest_records_provenance_and_each_shards_sha256(synth: SynthLake, folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    snapshot = synth.lake.snapshot()
    assert manifest["snapshot"]["id"] == snapshot.snapshot_id
    assert manifest["snapshot"]["tags"] == ["gen-1"]
    assert manifest["snapshot"]["table_versions"] == dict(sorted(snapshot.tables.items()))
    provenance = manifest["provenance"]
    assert provenance["redactions"] == {"placeholders": 1, "trajectories_redacted": 1}
    assert provenance["sources"][0]["trajectories"] == 24
    assert [r["run_name"] for r in provenance["credit_runs"]] == ["pmc"]
    assert provenance["label_sources"] == [{"source": "csv", "labels": 3}]
    for table in manifest["tables"].values():
        for entry in table["files"]:
            data = (folder / entry["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
            assert len(data) == entry["bytes"]
            metadata = pq.read_metadata(folder / entry["path"])
            assert metadata.num_rows == entry["rows"]
            assert metadata.row_group(0).column(0).compression == "ZSTD"


def test_where_filters_every_table_consistently(synth: SynthLake, tmp_path: Path) -> None:
    where = f"task_id IN ('{synth.tasks[0]}', '{synth.tasks[2]}')"
    out = tmp_path / "ds"
    report = publish(synth.lake, "me/two-tasks", where=where, dry_run=str(out))
    selected = set(_lake_ids(synth, "trajectories", where))
    assert len(selected) == 8
    assert sorted(_load(out, "trajectories", tmp_path)["trajectory_id"]) == sorted(selected)
    for table in ("messages", "credits"):
        loaded = _load(out, table, tmp_path)
        assert set(loaded["trajectory_id"]) == selected
        assert loaded.num_rows == len(
            _lake_ids(
                synth,
                table,
                f"trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE {where})",
            )
        )
    labels = _load(out, "labels", tmp_path)
    # The label by id of a selected rollout, and the task + run label of task 2; not ids[5]'s.
    assert labels.num_rows == 2
    assert set(labels["task_id"]) == {None, synth.tasks[2]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["where"] == where
    # The redacted rollout (ids[1]) is one of task 0's.
    assert manifest["provenance"]["redactions"] == {"placeholders": 1, "trajectories_redacted": 1}
    assert report.folder.configs["trajectories"]["rows"] == 8


def test_the_same_snapshot_writes_the_same_bytes(synth: SynthLake, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        write_snapshot_folder(synth.lake, out, at="gen-1", repo_id="me/x")
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for relative in files:
        assert (first / relative).read_bytes() == (second / relative).read_bytes()
    # An earlier publish folder is rewritten: its stale shards go.
    stale = first / "data" / "messages" / "train-00009.parquet"
    stale.write_bytes(b"old")
    write_snapshot_folder(synth.lake, first, tables=["trajectories"])
    assert not stale.exists() and not list((first / "data" / "messages").glob("*.parquet"))
    assert sorted(p.name for p in first.rglob("*.parquet")) == ["train-00000.parquet"]


def test_shards_roll_over_by_size(synth: SynthLake, tmp_path: Path) -> None:
    out = tmp_path / "small"
    folder = write_snapshot_folder(synth.lake, out, tables=["messages"], shard_mb=0.001)
    manifest = json.loads((out / "manifest.json").read_text())
    files = manifest["tables"]["messages"]["files"]
    assert len(files) > 1 and folder.configs["messages"]["files"] == len(files)
    assert [f["path"] for f in files] == [
        f"data/messages/train-{i:05d}.parquet" for i in range(len(files))
    ]
    assert _load(out, "messages", tmp_path).num_rows == 396 == sum(f["rows"] for f in files)


def test_tables_without_rows_are_reported_not_written(synth: SynthLake, tmp_path: Path) -> None:
    out = tmp_path / "empty"
    folder = write_snapshot_folder(synth.lake, out, tables=["trajectories", "scores"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["tables"]) == ["trajectories"] and manifest["empty_tables"] == ["scores"]
    assert list(folder.configs) == ["trajectories"] and not (out / "data" / "scores").exists()
    with pytest.raises(PublishError, match="nothing to publish: trajectories, messages hold no"):
        write_snapshot_folder(
            synth.lake,
            tmp_path / "none",
            where="task_id = 'none'",
            tables=["trajectories", "messages"],
        )
    assert not (tmp_path / "none").exists()


def test_bad_requests_are_refused_before_anything_is_written(
    synth: SynthLake, tmp_path: Path
) -> None:
    out = tmp_path / "never"
    with pytest.raises(ValueError, match="models has no trajectory_id"):
        publish(synth.lake, "me/x", where="resolved", tables=["models"], dry_run=str(out))
    with pytest.raises(ValueError, match="unknown table"):
        publish(synth.lake, "me/x", tables=["nope"], dry_run=str(out))
    with pytest.raises(ValueError, match="public dataset needs a licence"):
        publish(synth.lake, "me/x", private=False, dry_run=str(out))
    with pytest.raises(ValueError, match="invalid Hugging Face repo id"):
        publish(synth.lake, "me/x/y", dry_run=str(out))
    with pytest.raises(OutputInsideLake):
        publish(synth.lake, "me/x", dry_run=str(Path(synth.lake.uri) / "ds"))
    with pytest.raises(Exception, match="SQL error"):
        publish(synth.lake, "me/x", where="no_such_column = 1", dry_run=str(out))
    assert not out.exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(PublishError, match="not empty"):
        publish(synth.lake, "me/x", dry_run=str(foreign))
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_building_a_folder_imports_no_hub_client() -> None:
    code = (
        "import sys, trajlake, trajlake.publish, trajlake.cli.publish_cmd; "
        "print(sorted(m for m in ('huggingface_hub', 'datasets', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
