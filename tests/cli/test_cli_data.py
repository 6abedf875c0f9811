"""Data commands: ingest, sql, show and export jsonl, end to end through the CLI."""

from __future__ import annotations

import base64
import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from click.testing import Result

import trajlake as tl

Run = Callable[..., Result]
COUNT = "SELECT count(*) AS n FROM trajectories"


def _json(result: Result) -> Any:
    return json.loads(result.stdout)


def _count(run: Run, lake: str, *extra: str, query: str = COUNT) -> int:
    rows = _json(run("sql", query, "--lake", lake, "-o", "json", *extra))
    return int(rows[0]["n"])


def test_ingest_json_counts_and_reingest(tmp_path: Path, jsonl: Path, run: Run, n: int) -> None:
    lake = str(tmp_path / "lake")
    first = _json(run("ingest", jsonl, "--lake", lake, "--create", "-o", "json"))
    assert list(first)[:4] == ["snapshot", "added", "duplicates", "quarantined"]
    assert (first["added"], first["duplicates"], first["quarantined"]) == (n, 0, 1)
    assert first["snapshot"] == 1 and first["files"] == 1
    assert "rollouts.jsonl:4" in first["problems"][0]
    again = _json(run("ingest", jsonl, "--lake", lake, "-o", "json"))
    assert (again["added"], again["duplicates"]) == (0, n)
    assert _count(run, lake) == n


def test_ingest_text_summary(tmp_path: Path, jsonl: Path, run: Run, n: int) -> None:
    out = run("ingest", jsonl, "--lake", tmp_path / "lake", "--create").stdout
    assert f"{n} added, 0 duplicates, 1 quarantined" in out
    assert "rollouts.jsonl:4" in out and "MB/s" in out


def test_ingest_needs_a_lake_unless_create(tmp_path: Path, jsonl: Path, run: Run) -> None:
    result = run("ingest", jsonl, "--lake", tmp_path / "nolake", code=1)
    assert result.stderr.startswith("error: no trajlake lake") and "Traceback" not in result.stderr
    assert "--create" in run("ingest", "--help").stdout


def test_ingest_strict_fails_on_bad_record(tmp_path: Path, jsonl: Path, run: Run) -> None:
    result = run("ingest", jsonl, "--lake", tmp_path / "lake", "--create", "--strict", code=1)
    assert len(result.stderr.strip().splitlines()) == 1 and "--strict" in result.stderr


def test_ingest_missing_input(tmp_path: Path, run: Run) -> None:
    result = run("ingest", tmp_path / "nope.jsonl", "--lake", tmp_path / "lake", "--create", code=1)
    assert "input not found" in result.stderr


def test_ingest_stamps_fields(tmp_path: Path, make_jsonl: Callable[..., Path], run: Run) -> None:
    source = make_jsonl("clean.jsonl", 3, malformed=False)
    lake = str(tmp_path / "lake")
    args = ["--generation", "2", "--run-id", "r7", "--stage", "rl", "--batch-size", "1"]
    report = _json(run("ingest", source, "--lake", lake, "--create", "-o", "json", *args))
    assert report["commits"] == 3
    query = "SELECT DISTINCT generation, run_id, stage FROM trajectories"
    assert _json(run("sql", query, "--lake", lake, "-o", "json")) == [
        {"generation": 2, "run_id": "r7", "stage": "rl"}
    ]


def test_sql_json_text_and_csv(lake_uri: str, run: Run, n: int) -> None:
    query = "SELECT trajectory_id, started_at, reward FROM trajectories ORDER BY trajectory_id"
    rows = _json(run("sql", query, "--lake", lake_uri, "-o", "json"))
    assert len(rows) == n
    assert rows[0]["trajectory_id"] == "sample-0-0000000"
    assert rows[0]["started_at"].startswith("2026-01-01T00:00:00")
    text = run("sql", query, "--lake", lake_uri, "--limit", "2").stdout
    assert "sample-0-0000001" in text and "sample-0-0000002" not in text
    assert f"2 of {n} rows shown" in text
    parsed = list(
        csv.DictReader(io.StringIO(run("sql", query, "--lake", lake_uri, "-o", "csv").stdout))
    )
    assert [r["trajectory_id"] for r in parsed] == [r["trajectory_id"] for r in rows]


def test_sql_binary_and_nested_values_in_json(lake_uri: str, run: Run) -> None:
    query = "SELECT raw, line FROM quarantine"
    (row,) = _json(run("sql", query, "--lake", lake_uri, "-o", "json"))
    assert row["line"] == 4
    assert base64.b64decode(row["raw"]).startswith(b'{"trajectory_id": "broken"')
    query = "SELECT tool_calls FROM messages WHERE tool_calls IS NOT NULL LIMIT 1"
    (row,) = _json(run("sql", query, "--lake", lake_uri, "-o", "json"))
    assert row["tool_calls"][0]["name"]


def test_sql_out_parquet(lake_uri: str, tmp_path: Path, run: Run, n: int) -> None:
    out = tmp_path / "rows.parquet"
    text = run("sql", "SELECT * FROM trajectories", "--lake", lake_uri, "--out", out).stdout
    assert f"wrote {n} rows" in text
    assert pq.read_table(out).num_rows == n


def test_sql_write_statement_is_refused(lake_uri: str, run: Run, n: int) -> None:
    for statement in ("DELETE FROM trajectories", "CREATE TABLE x AS SELECT 1"):
        result = run("sql", statement, "--lake", lake_uri, code=1)
        assert result.stderr.startswith("error:") and "read-only" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert _count(run, lake_uri) == n


def test_sql_error_is_one_line(lake_uri: str, run: Run) -> None:
    result = run("sql", "SELECT * FROM no_such_table", "--lake", lake_uri, code=1)
    assert len(result.stderr.strip().splitlines()) == 1 and "no_such_table" in result.stderr


def test_tag_and_time_travel(
    lake_uri: str, make_jsonl: Callable[..., Path], run: Run, n: int
) -> None:
    run("tag", "before", "--lake", lake_uri)
    more = make_jsonl("more.jsonl", 5, start=100, malformed=False)
    run("ingest", more, "--lake", lake_uri)
    assert _count(run, lake_uri) == n + 5
    assert _count(run, lake_uri, "--at", "before") == n
    assert _count(run, lake_uri, "--at", "1") == n
    assert _count(run, lake_uri, "--at", "0") == 0
    assert _count(run, lake_uri, "--at", "latest") == n + 5
    result = run("sql", COUNT, "--lake", lake_uri, "--at", "nosuchtag", code=1)
    assert "nosuchtag" in result.stderr


def test_show_transcript(lake_uri: str, run: Run) -> None:
    out = run("show", "sample-0-0000001", "--lake", lake_uri).stdout
    record = tl.open_lake(lake_uri).trajectory("sample-0-0000001")
    assert record.task_id is not None and record.task_id in out
    assert "thread main" in out and "assistant" in out
    tool_names = {c.name for m in record.messages for c in m.tool_calls or ()}
    assert tool_names and all(f"→ {name}" in out for name in tool_names)


def test_show_truncates_long_tool_results(lake_uri: str, run: Run) -> None:
    query = (
        "SELECT trajectory_id FROM messages WHERE role = 'tool' "
        "AND len(string_split(content, chr(10))) > 45 ORDER BY trajectory_id LIMIT 1"
    )
    rows = _json(run("sql", query, "--lake", lake_uri, "-o", "json"))
    assert rows
    trajectory_id = rows[0]["trajectory_id"]
    short = run("show", trajectory_id, "--lake", lake_uri).stdout
    full = run("show", trajectory_id, "--lake", lake_uri, "--full").stdout
    assert "more lines (--full shows all)" in short
    assert "more lines" not in full and len(full) > len(short)


def test_show_json_is_the_canonical_record(lake_uri: str, run: Run) -> None:
    doc = _json(run("show", "sample-0-0000002", "--lake", lake_uri, "-o", "json"))
    record = tl.open_lake(lake_uri).trajectory("sample-0-0000002")
    assert doc == record.model_dump(mode="json", exclude_none=True)


def test_show_unknown_trajectory(lake_uri: str, run: Run) -> None:
    result = run("show", "nope", "--lake", lake_uri, code=1)
    assert result.stderr.startswith("error: no trajectory 'nope'")


def test_export_roundtrip_gives_identical_sql(
    lake_uri: str, tmp_path: Path, run: Run, n: int
) -> None:
    out = tmp_path / "export.jsonl.gz"
    report = _json(run("export", "jsonl", out, "--lake", lake_uri, "-o", "json"))
    assert report["trajectories"] == n and report["snapshot"] == 1
    second = str(tmp_path / "second")
    ingested = _json(run("ingest", out, "--lake", second, "--create", "-o", "json"))
    assert (ingested["added"], ingested["quarantined"]) == (n, 0)
    for query in (
        "SELECT * FROM trajectories ORDER BY trajectory_id",
        "SELECT * FROM messages ORDER BY trajectory_id, thread, idx",
    ):
        first_rows = run("sql", query, "--lake", lake_uri, "-o", "json").stdout
        assert run("sql", query, "--lake", second, "-o", "json").stdout == first_rows


def test_export_where_and_at(lake_uri: str, tmp_path: Path, run: Run) -> None:
    resolved = _count(run, lake_uri, query=COUNT + " WHERE resolved")
    assert resolved > 0
    out = tmp_path / "resolved.jsonl"
    args = ["--where", "resolved", "--at", "1"]
    text = run("export", "jsonl", out, "--lake", lake_uri, *args).stdout
    assert f"exported {resolved} trajectories" in text
    lines = out.read_text().splitlines()
    assert len(lines) == resolved and all(json.loads(line)["resolved"] for line in lines)
