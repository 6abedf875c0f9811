"""Every SFT export is recorded in the lake's `exports` table, also in lakes older than it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.export.sft import export_sft
from trajlake.sample import sample_trajectories
from trajlake.schema import TABLES


@pytest.fixture
def credited(lake: tl.Lake) -> tl.Lake:
    lake.write(list(sample_trajectories(12)))
    run_credit(lake, estimator="outcome", mask="all", name="r")
    lake.tag("v1")
    return lake


def test_export_commits_one_row_with_its_manifest(credited: tl.Lake, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    report = export_sft(credited, str(out), format="trl", credit="r", val_frac=0.5, seed=5)
    head = credited.snapshot()
    assert (head.snapshot_id, head.operation) == (3, "export")
    assert head.summary["export_id"] == report.export_id
    assert head.summary["added"]["exports"] == 1
    assert report.to_dict()["export_id"] == report.export_id
    row = credited.sql("SELECT * FROM exports").to_dicts()[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert json.loads(row.pop("manifest")) == manifest
    assert json.loads(row.pop("counts")) == {
        "train": {k: v for k, v in manifest["splits"]["train"].items() if k != "files"},
        "val": {k: v for k, v in manifest["splits"]["val"].items() if k != "files"},
    }
    assert row.pop("created_at") is not None
    assert row == {
        "export_id": report.export_id,
        "format": "trl",
        "source_snapshot": 2,
        "source_tags": ["v1"],
        "credit_run": "r",
        "mask": "all",
        "selection_sql": None,
        "uri": str(out),
    }
    counts = report.splits
    assert manifest["splits"]["train"]["samples"] == counts["train"].samples > 0
    assert manifest["splits"]["val"]["trajectories"] == counts["val"].trajectories > 0


def test_reexport_is_a_no_op_and_reads_the_same_snapshot(credited: tl.Lake, tmp_path: Path) -> None:
    first = export_sft(credited, str(tmp_path / "a"), format="openai", credit="r")
    manifest = (tmp_path / "a" / "manifest.json").read_bytes()
    again = export_sft(credited, str(tmp_path / "a"), format="openai", credit="r")
    assert again.export_id == first.export_id
    # the export's own commit changes nothing an export reads: the head before it is read
    assert again.snapshot_id == first.snapshot_id == 2
    assert (tmp_path / "a" / "manifest.json").read_bytes() == manifest
    assert credited.snapshot().snapshot_id == 3
    other = export_sft(credited, str(tmp_path / "b"), format="openai", credit="r")
    narrower = export_sft(
        credited, str(tmp_path / "a"), format="openai", credit="r", where="attempt = 0"
    )
    ids = {first.export_id, other.export_id, narrower.export_id}
    assert len(ids) == 3
    stored = credited.sql("SELECT export_id, uri, selection_sql FROM exports").to_dicts()
    assert {r["export_id"] for r in stored} == ids
    assert {r["selection_sql"] for r in stored} == {None, "attempt = 0"}
    assert credited.snapshot().snapshot_id == 5
    # an explicit snapshot is read as given, even one that only recorded an export
    pinned = export_sft(credited, str(tmp_path / "c"), format="openai", credit="r", at=3)
    assert pinned.snapshot_id == 3


def _make_old(root: Path) -> None:
    """Turn a lake into one written before the `exports` table existed."""
    shutil.rmtree(root / "tables" / "exports")
    for entry in (root / "_trajlake" / "log").glob("0*.json"):
        snapshot = json.loads(entry.read_text())
        del snapshot["tables"]["exports"]
        entry.write_text(json.dumps(snapshot))
    config_path = root / "_trajlake" / "lake.json"
    config = json.loads(config_path.read_text())
    config.pop("tables", None)
    config_path.write_text(json.dumps(config))


def test_a_lake_older_than_the_table_opens_and_records_exports(tmp_path: Path) -> None:
    root = tmp_path / "old"
    lake = tl.open_lake(root, create=True)
    lake.write(list(sample_trajectories(8)))
    lake.tag("before")
    lake.close()
    _make_old(root)
    assert not (root / "tables" / "exports").exists()

    lake = tl.open_lake(root)
    assert json.loads((root / "_trajlake" / "lake.json").read_text())["tables"] == list(TABLES)
    assert lake.sql("SELECT count(*) FROM trajectories", at="before").rows() == [(8,)]
    assert lake.sql("SELECT count(*) FROM exports", at="before").rows() == [(0,)]
    assert lake.snapshot("before").tables["exports"] == 0
    report = export_sft(lake, str(tmp_path / "sft"), format="sharegpt", at="before")
    rows = lake.sql("SELECT export_id, source_snapshot, source_tags FROM exports").rows()
    assert rows == [(report.export_id, 1, ["before"])]
    assert lake.validate().ok
    reopened = tl.open_lake(root)
    assert reopened.sql("SELECT count(*) FROM exports").rows() == [(1,)]
    assert reopened.sql("SELECT count(*) FROM exports", at="before").rows() == [(0,)]
