"""`export atif`: the click command, invoked on its own (the `export` group attaches it)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.export_atif_cmd import atif

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture
def lake_uri(tmp_path: Path) -> str:
    """A lake holding the copied τ-bench excerpt: 12 trajectories, 6 resolved."""
    uri = str(tmp_path / "lake")
    tl.open_lake(uri, create=True).ingest(DATA / "tau_bench")
    return uri


def _invoke(*args: object) -> str:
    result = CliRunner().invoke(atif, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_directory_of_trajectory_files(lake_uri: str, tmp_path: Path) -> None:
    out = tmp_path / "atif"
    report = json.loads(_invoke(out, "--lake", lake_uri, "-o", "json"))
    assert report["trajectories"] == 12 and report["path"] == str(out)
    files = sorted(out.glob("*.json"))
    assert len(files) == 12
    document = json.loads(files[0].read_text())
    assert document["schema_version"] == "ATIF-v1.6"
    assert document["session_id"] == files[0].stem
    assert document["agent"]["name"] == "tau-bench"
    assert {s["source"] for s in document["steps"]} == {"system", "user", "agent"}


def test_where_at_and_jsonl(lake_uri: str, tmp_path: Path) -> None:
    out = tmp_path / "resolved.jsonl.gz"
    text = _invoke(out, "--lake", lake_uri, "--at", "latest", "--where", "resolved")
    assert "exported 6 trajectories" in text
    with gzip.open(out, "rt") as f:
        documents = [json.loads(line) for line in f]
    assert len(documents) == 6
    assert all(d["extra"]["trajlake"]["resolved"] is True for d in documents)
    # The file ingests back as the same trajectories.
    lake = tl.open_lake(lake_uri)
    assert lake.ingest(out).duplicates == 6


def test_bad_where_is_an_error(lake_uri: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(atif, [str(tmp_path / "x"), "--lake", lake_uri, "--where", "nope("])
    assert result.exit_code != 0
