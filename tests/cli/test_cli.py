"""Global behaviour and lake commands: init, log, tag, tags, validate, maintain, schema, errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

import trajlake as tl
from trajlake.schema import TABLES

Run = Callable[..., Result]


def test_version(run: Run) -> None:
    assert tl.__version__ in run("--version").stdout


def test_init_text_and_json(tmp_path: Path, run: Run) -> None:
    text = run("init", "--lake", tmp_path / "a").stdout
    assert str(tmp_path / "a") in text
    doc = json.loads(run("init", "--lake", tmp_path / "b", "--output", "json").stdout)
    assert doc == {"lake": str(tmp_path / "b"), "snapshot": 0}
    assert tl.open_lake(tmp_path / "b").snapshot().snapshot_id == 0


def test_lake_from_environment(tmp_path: Path, run: Run) -> None:
    env = {"TRAJLAKE_LAKE": str(tmp_path / "env-lake")}
    run("init", env=env)
    snapshots = json.loads(run("log", "-o", "json", env=env).stdout)
    assert [s["snapshot_id"] for s in snapshots] == [0]


def _assert_one_line_error(stderr: str, fragment: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in stderr


def test_unknown_lake_is_one_line_exit_1(tmp_path: Path, run: Run) -> None:
    result = run("log", "--lake", tmp_path / "missing", code=1)
    _assert_one_line_error(result.stderr, "no trajlake lake")
    assert result.stdout == ""


def test_verbose_adds_traceback(tmp_path: Path, run: Run) -> None:
    result = run("--verbose", "tags", "--lake", tmp_path / "missing", code=1)
    assert "Traceback" in result.stderr and "LakeNotFound" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: no trajlake lake")


def test_init_twice_fails(tmp_path: Path, run: Run) -> None:
    run("init", "--lake", tmp_path / "lake")
    result = run("init", "--lake", tmp_path / "lake", code=1)
    _assert_one_line_error(result.stderr, "already exists")


def test_ctrl_c_exits_130(lake_uri: str, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: tl.Lake) -> tl.ValidationReport:
        raise KeyboardInterrupt

    monkeypatch.setattr(tl.Lake, "validate", interrupted)
    assert "interrupted" in run("validate", "--lake", lake_uri, code=130).stderr


def test_log_newest_first_with_tags(lake_uri: str, run: Run, n: int) -> None:
    run("tag", "first", "--lake", lake_uri, "--at", "1", "--note", "eight rollouts")
    entries = json.loads(run("log", "--lake", lake_uri, "-o", "json").stdout)
    assert [e["snapshot_id"] for e in entries] == [1, 0]
    assert entries[0]["operation"] == "ingest"
    assert entries[0]["summary"]["added"]["trajectories"] == n
    assert entries[0]["tags"] == ["first"]
    assert len(json.loads(run("log", "--lake", lake_uri, "-o", "json", "-n", "1").stdout)) == 1
    text = run("log", "--lake", lake_uri).stdout
    assert "ingest" in text and f"trajectories {n}" in text and "first" in text


def test_tag_and_tags(lake_uri: str, run: Run) -> None:
    tag = json.loads(
        run("tag", "v1", "--lake", lake_uri, "--note", "baseline", "-o", "json").stdout
    )
    assert (tag["name"], tag["snapshot_id"], tag["note"]) == ("v1", 1, "baseline")
    assert "tagged snapshot 0 as v0" in run("tag", "v0", "--lake", lake_uri, "--at", "0").stdout
    listed = json.loads(run("tags", "--lake", lake_uri, "-o", "json").stdout)
    assert {t["name"]: t["snapshot_id"] for t in listed} == {"v0": 0, "v1": 1}
    assert "baseline" in run("tags", "--lake", lake_uri).stdout
    _assert_one_line_error(run("tag", "v1", "--lake", lake_uri, code=1).stderr, "v1")
    _assert_one_line_error(run("tag", "bad name", "--lake", lake_uri, code=1).stderr, "tag name")


def test_validate_ok(lake_uri: str, run: Run) -> None:
    assert run("validate", "--lake", lake_uri).stdout.startswith("ok:")
    report = json.loads(run("validate", "--lake", lake_uri, "-o", "json").stdout)
    assert report["ok"] is True and report["snapshots_checked"] == 2


def test_validate_problem_exits_1(lake_uri: str, run: Run) -> None:
    data_files = tl.open_lake(lake_uri).table_files("trajectories")
    assert data_files
    for data_file in data_files:
        Path(data_file.removeprefix("file://")).unlink()
    report = json.loads(run("validate", "--lake", lake_uri, "-o", "json", code=1).stdout)
    assert report["ok"] is False and report["problems"]


def test_maintain(lake_uri: str, run: Run) -> None:
    dry = json.loads(run("maintain", "--lake", lake_uri, "--dry-run", "-o", "json").stdout)
    assert dry["dry_run"] is True and set(dry["tables"]) == set(TABLES)
    text = run("maintain", "--lake", lake_uri).stdout
    assert "maintenance" in text and "trajectories" in text
    run("validate", "--lake", lake_uri)


def test_schema_json(run: Run) -> None:
    docs = json.loads(run("schema").stdout)
    assert set(docs) == {*TABLES, "canonical"}
    canonical = json.loads(run("schema", "--table", "canonical").stdout)
    assert "messages" in canonical["properties"]
    assert canonical["$id"].endswith("/canonical.json")


def test_schema_arrow(run: Run) -> None:
    text = run("schema", "--format", "arrow").stdout
    assert all(f"# {table}" in text for table in TABLES)
    one = run("schema", "--format", "arrow", "-t", "messages").stdout
    assert one.startswith("# messages") and "trajectory_id: string not null" in one
    result = run("schema", "--format", "arrow", "-t", "canonical", code=1)
    _assert_one_line_error(result.stderr, "no Arrow schema")


def test_storage_options_are_validated(tmp_path: Path, run: Run) -> None:
    result = run("init", "--lake", tmp_path / "x", "--storage-option", "novalue", code=2)
    assert "KEY=VALUE" in result.stderr
    env = {"TRAJLAKE_STORAGE_OPTIONS": "[1, 2]"}
    assert "JSON object" in run("init", "--lake", tmp_path / "x", code=2, env=env).stderr


def test_log_level_controls_library_logs(tmp_path: Path, jsonl: Path, run: Run) -> None:
    lake = tmp_path / "lake"
    noisy = run("--log-level", "info", "ingest", jsonl, "--lake", lake, "--create").stderr
    assert "quarantined" in noisy  # each bad record is logged at INFO
    quiet = run("--log-level", "error", "ingest", jsonl, "--lake", lake).stderr
    assert quiet == ""
