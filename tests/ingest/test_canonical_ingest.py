"""Ingesting canonical JSONL: sources, bad input, quarantine, strict mode, idempotency."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

import trajlake as tl
from trajlake.errors import FormatDetectionError, InvalidRecord
from trajlake.sample import sample_trajectories


def _write_jsonl(path: Path, records: list[dict[str, object]], extra: list[bytes] = ()) -> Path:  # type: ignore[assignment]
    with open(path, "wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")
        for raw in extra:
            f.write(raw)
    return path


def test_good_records_are_stored_and_bad_ones_quarantined(lake: tl.Lake, tmp_path: Path) -> None:
    good = list(sample_trajectories(6))
    wrong_type = dict(good[0], trajectory_id="wrong-type", n_turns="many")
    missing = {"trajectory_id": "no-role", "messages": [{"content": "who am I"}]}
    bad_lines = [
        b'{"trajectory_id": "broken", "messages": [\n',  # malformed JSON
        json.dumps(wrong_type).encode() + b"\n",
        json.dumps(missing).encode() + b"\n",
        b'{"trajectory_id": "\xff\xfe bad utf8", "messages": []}\n',
        b"[1, 2, 3]\n",
    ]
    path = _write_jsonl(tmp_path / "mixed.jsonl", good[:3], bad_lines)
    with open(path, "ab") as f:  # good records after the bad ones are kept too
        for r in good[3:]:
            f.write(json.dumps(r).encode() + b"\n")
        f.write(b'{"trajectory_id": "cut off", "mess')  # truncated last line
    report = lake.ingest(path)
    assert report.added == 6
    assert report.quarantined == 6
    rows = lake.sql(
        "SELECT line, field, error, source_uri, raw_size FROM quarantine ORDER BY line"
    ).to_dicts()
    assert [r["line"] for r in rows] == [4, 5, 6, 7, 8, 12]
    assert all(r["source_uri"] == str(path) for r in rows)
    by_line = {r["line"]: r for r in rows}
    assert "malformed JSON" in by_line[4]["error"]
    assert by_line[5]["field"] == "n_turns"
    assert by_line[6]["field"] == "messages.0.role"
    assert "invalid UTF-8" in by_line[7]["error"]
    assert "expected a JSON object" in by_line[8]["error"]
    assert "truncated" in by_line[12]["error"]
    stored = lake.sql("SELECT count(*) FROM trajectories").rows()[0][0]
    assert stored == 6


def test_reingest_is_a_no_op(lake: tl.Lake, tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "a.jsonl", list(sample_trajectories(5)), [b"{oops\n"])
    first = lake.ingest(path)
    snapshots = len(lake.snapshots())
    second = lake.ingest(path)
    assert (first.added, second.added, second.duplicates) == (5, 0, 5)
    assert len(lake.snapshots()) == snapshots  # nothing new: no snapshot
    assert lake.sql("SELECT count(*) FROM quarantine").rows()[0][0] == 1


def test_strict_mode_raises_with_file_line_and_field(lake: tl.Lake, tmp_path: Path) -> None:
    bad = {"trajectory_id": "x", "messages": [{"role": "assistant", "idx": "first"}]}
    path = _write_jsonl(tmp_path / "s.jsonl", [next(sample_trajectories(1)), bad])
    with pytest.raises(InvalidRecord, match=r"s\.jsonl:2: field 'messages\.0\.idx'"):
        lake.ingest(path, strict=True)


def test_a_50mb_field_is_stored_whole(lake: tl.Lake, tmp_path: Path) -> None:
    record = next(sample_trajectories(1))
    record["messages"][3]["content"] = "x" * (50 * 1024 * 1024)
    path = _write_jsonl(tmp_path / "big.jsonl", [record, *sample_trajectories(2, start=1)])
    report = lake.ingest(path)
    assert (report.added, report.quarantined) == (3, 0)
    length = lake.sql(
        "SELECT max(length(content)) FROM messages WHERE trajectory_id = 'sample-0-0000000'"
    ).rows()[0][0]
    assert length == 50 * 1024 * 1024


def test_compressed_files_directories_and_globs(lake: tl.Lake, tmp_path: Path) -> None:
    records = list(sample_trajectories(9))
    folder = tmp_path / "runs" / "nested"
    folder.mkdir(parents=True)
    lines = [json.dumps(r).encode() + b"\n" for r in records]
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[:3])))
    (folder / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines[3:6])))
    (tmp_path / "runs" / "c.jsonl").write_bytes(b"".join(lines[6:]))
    (tmp_path / "runs" / "README.md").write_text("not trajectories\n")
    report = lake.ingest(tmp_path / "runs")
    assert report.added == 9
    assert report.files == 3 and report.files_skipped == [str(tmp_path / "runs" / "README.md")]
    other = tl.open_lake(tmp_path / "other", create=True)
    assert other.ingest(str(tmp_path / "runs" / "**" / "*.jsonl.*")).added == 6


def test_undetectable_single_file_names_the_choices(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(FormatDetectionError, match="--format"):
        lake.ingest(path)


def test_ingest_options_and_provenance(lake: tl.Lake, tmp_path: Path) -> None:
    record = next(sample_trajectories(1))
    del record["source_format"]
    path = _write_jsonl(tmp_path / "p.jsonl", [record])
    report = lake.ingest(path, generation=3, run_id="run-x", stage="rl")
    row = lake.sql(
        "SELECT generation, run_id, stage, source_format, source_uri, source_line, ingest_id "
        "FROM trajectories"
    ).to_dicts()[0]
    assert row == {
        "generation": 3,
        "run_id": "run-x",
        "stage": "rl",
        "source_format": "canonical",
        "source_uri": str(path),
        "source_line": 1,
        "ingest_id": report.ingest_id,
    }


def test_batches_commit_separately_and_all_land(lake: tl.Lake, tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "many.jsonl", list(sample_trajectories(25)))
    report = lake.ingest(path, batch_size=10)
    assert report.commits == 3
    assert lake.sql("SELECT count(*) FROM trajectories").rows()[0][0] == 25


def test_parallel_chunked_parse_keeps_lines_and_records(lake: tl.Lake, tmp_path: Path) -> None:
    from trajlake.ingest import IngestOptions, ingest

    records = list(sample_trajectories(40))
    bad = {7: b"{broken\n", 23: b'{"trajectory_id": 5}\n'}
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        for i, r in enumerate(records):
            f.write(bad.get(i, b""))
            f.write(json.dumps(r).encode() + b"\n")
    options = IngestOptions(workers=2, parallel_min_bytes=0, chunk_bytes=100_000, batch_size=16)
    report = ingest(lake, [str(path)], options=options)
    assert (report.added, report.quarantined, report.trajectories_read) == (40, 2, 40)
    assert report.commits == 3
    lines = lake.sql("SELECT line FROM quarantine ORDER BY line").rows()
    assert lines == [(8,), (25,)]  # file lines, although parsed in ~12 chunks
    stored = lake.sql(
        "SELECT source_line FROM trajectories WHERE trajectory_id = 'sample-0-0000030'"
    ).rows()
    assert stored == [(33,)]  # 30 records and 2 bad lines before it, 1-based
    assert lake.sql("SELECT count(*) FROM messages").rows()[0][0] == sum(
        len(r["messages"]) for r in records
    )
