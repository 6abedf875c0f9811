"""The OTLP/JSON files in `tests/data/otlp` (what users read to see each convention): they are
what `tests.otlp.traces` generates with the real SDK, and the folder ingests through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import trajlake as tl
from tests.otlp.traces import fixture_files
from trajlake.cli.main import cli

DATA = Path(__file__).resolve().parents[1] / "data" / "otlp"

# Per file: (trajectories, calls, messages). The Collector's file holds a conversation over
# two traces (one trajectory) and an OpenInference session.
EXPECTED = {
    "collector.jsonl": (2, 6, 14),
    "current.json": (1, 2, 5),
    "older-attributes.json": (1, 2, 5),
    "older-events.json": (1, 2, 5),
    "openinference.json": (1, 2, 4),
}


def test_the_committed_files_are_a_fresh_generation() -> None:
    fresh = fixture_files()
    assert sorted(p.name for p in DATA.iterdir()) == sorted(fresh) == sorted(EXPECTED)
    for name, text in fresh.items():
        assert (DATA / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: python -m tests.otlp.traces --write tests/data/otlp"
        )


def test_the_folder_ingests_through_the_cli(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    args = ["ingest", str(DATA), "--lake", uri, "--create", "--output", "json"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["added"] == 6 and report["quarantined"] == 0
    lake = tl.open_lake(uri)
    rows = lake.sql(
        """
        SELECT t.source_uri, count(DISTINCT t.trajectory_id) AS trajectories,
               (SELECT count(*) FROM calls c WHERE c.trajectory_id IN (
                   SELECT trajectory_id FROM trajectories u WHERE u.source_uri = t.source_uri
               )) AS calls,
               (SELECT count(*) FROM messages m WHERE m.trajectory_id IN (
                   SELECT trajectory_id FROM trajectories u WHERE u.source_uri = t.source_uri
               )) AS messages
        FROM trajectories t GROUP BY t.source_uri
        """
    ).to_arrow()
    found = {
        Path(r["source_uri"]).name: (r["trajectories"], r["calls"], r["messages"])
        for r in rows.to_pylist()
    }
    assert found == EXPECTED
    assert lake.sql("SELECT count(*) AS n FROM quarantine").to_arrow().to_pylist() == [{"n": 0}]
    formats = lake.sql("SELECT DISTINCT source_format FROM trajectories").to_arrow()
    assert formats.column("source_format").to_pylist() == ["otlp"]
