"""`trajlake tour` (the former demo): the quick tour on a fresh local lake with the bundled
sample rollouts. The generation loop `trajlake demo` is tested in tests/test_loop.py."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from trajlake.cli.demo_cmd import tour


def test_tour_runs_and_is_idempotent(tmp_path: Path) -> None:
    runner = CliRunner()
    lake = str(tmp_path / "tour-lake")
    first = runner.invoke(tour, ["--lake", lake, "--output", "json"])
    assert first.exit_code == 0, first.output
    report = json.loads(first.output)
    assert report["ingest"]["added"] == 80 and report["ingest"]["quarantined"] == 0
    assert report["time_travel"] == {"latest": 88, "sample-v1": 80}
    assert report["valid"] is True
    rates = report["answers"]["success rate by harness and policy"]
    assert sum(r["rollouts"] for r in rates) == 80
    assert all(0.0 <= r["success_rate"] <= 1.0 for r in rates)
    tools = {r["tool_name"] for r in report["answers"]["most used tools"]}
    assert {"bash", "submit"} <= tools

    again = runner.invoke(tour, ["--lake", lake, "--output", "json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    assert second["ingest"]["added"] == 0 and second["ingest"]["duplicates"] == 80
    assert second["time_travel"]["sample-v1"] == 80


def test_tour_text_output_names_the_lake_and_findings(tmp_path: Path) -> None:
    result = CliRunner().invoke(tour, ["--lake", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert "success rate by harness and policy" in result.output
    assert "sample-v1: 80" in result.output
    assert "validate: ok" in result.output
