"""Ingest and label in one step (`lake.ingest(..., labels=...)`, `trajlake ingest --labels`)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.sample import sample_trajectories


def _files(tmp_path: Path) -> tuple[Path, Path]:
    records = list(sample_trajectories(8))
    for r in records:
        del r["resolved"], r["reward"]  # the verdict comes from the label file only
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in records))
    labels = tmp_path / "labels.csv"
    rows = [f"{r['trajectory_id']},{str(i % 3 == 0).lower()}" for i, r in enumerate(records)]
    labels.write_text("trajectory_id,resolved\n" + "\n".join(rows) + "\n")
    return rollouts, labels


def test_ingest_attaches_labels_in_one_step(lake: tl.Lake, tmp_path: Path) -> None:
    rollouts, labels = _files(tmp_path)
    report = lake.ingest(rollouts, labels=labels)
    assert report.added == 8
    assert report.labels is not None and report.labels["added"] == 8
    assert report.snapshot_id == lake.snapshot().snapshot_id
    resolved = lake.sql("SELECT count(*) FROM outcomes WHERE resolved").rows()[0][0]
    assert resolved == 3  # rows 0, 3, 6
    sources = lake.sql("SELECT DISTINCT outcome_source FROM outcomes").rows()
    assert len(sources) == 1 and sources[0][0].startswith("label:")


def test_cli_ingest_labels_option(tmp_path: Path) -> None:
    rollouts, labels = _files(tmp_path)
    lake = str(tmp_path / "lake")
    args = ["ingest", str(rollouts), "--lake", lake, "--create", "--labels", str(labels)]
    result = CliRunner().invoke(cli, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["added"] == 8 and report["labels"]["matched"] == 8


def test_a_labels_input_holding_no_label_file_stores_nothing(tmp_path: Path) -> None:
    rollouts, _ = _files(tmp_path)
    empty = tmp_path / "no-labels"
    empty.mkdir()
    lake = str(tmp_path / "lake")
    args = ["ingest", str(rollouts), "--lake", lake, "--create", "--labels", str(empty)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert "no label files among the 0 input file(s)" in result.output
    # Read before the ingest: the rollouts were not stored either, so the command can be rerun.
    assert tl.open_lake(lake).sql("SELECT count(*) FROM trajectories").rows() == [(0,)]
