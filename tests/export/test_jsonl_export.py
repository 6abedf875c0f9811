"""Canonical JSONL export: lossless round trips, filters, snapshots."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import trajlake as tl
from trajlake.sample import sample_trajectories


def _rows(lake: tl.Lake, table: str) -> list[dict[str, object]]:
    return lake.sql(f"SELECT * FROM {table} ORDER BY ALL").to_dicts()


def test_export_then_ingest_gives_identical_rows(lake: tl.Lake, tmp_path: Path) -> None:
    source = tmp_path / "source.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in sample_trajectories(40)))
    lake.ingest(source)  # provenance (source, ingest id) is part of what must survive
    out = tmp_path / "export.jsonl.gz"
    report = lake.export_jsonl(str(out))
    assert report.trajectories == 40
    copy = tl.open_lake(tmp_path / "copy", create=True)
    assert copy.ingest(out).added == 40
    for table in ("trajectories", "messages"):
        assert _rows(copy, table) == _rows(lake, table)
    again = tmp_path / "again.jsonl.gz"
    copy.export_jsonl(str(again))
    assert gzip.decompress(again.read_bytes()) == gzip.decompress(out.read_bytes())


def test_where_and_at_select_what_is_exported(sample_lake: tl.Lake, tmp_path: Path) -> None:
    first = sample_lake.snapshot().snapshot_id
    sample_lake.write(list(sample_trajectories(5, start=100)))
    out = tmp_path / "resolved.jsonl"
    report = sample_lake.export_jsonl(
        str(out), at=first, where="resolved AND harness = 'openhands'"
    )
    expected = sample_lake.sql(
        "SELECT count(*) FROM trajectories WHERE resolved AND harness = 'openhands'", at=first
    ).rows()[0][0]
    lines = out.read_text().splitlines()
    assert report.trajectories == len(lines) == expected > 0
    first_line = json.loads(lines[0])
    assert first_line["harness"] == "openhands" and first_line["resolved"] is True
    assert first_line["messages"][0]["role"] == "system"
    assert "trajectory_id" not in first_line["messages"][0]  # implied by the line


def test_trajectory_accessor_returns_messages_in_order(sample_lake: tl.Lake) -> None:
    record = sample_lake.trajectory("sample-0-0000007")
    assert [m.idx for m in record.messages] == list(range(len(record.messages)))
    assert record.n_messages == len(record.messages)
    assert record.messages[2].tool_calls and record.messages[3].role == "tool"
