"""`trajlake ingest` of the whole shared corpus: every trajectory file is read, only genuinely
broken records are quarantined, and only files that hold no trajectory are skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trajlake.cli.main import cli

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py

# Files of the corpus that are not trajectories: docs, run configs, predictions, patches,
# metrics, expected renderings of other tools, and a τ²-bench results file without simulations.
NOT_TRAJECTORIES = (
    ".md",
    ".yaml",
    ".patch",
    ".txt",
    "all_preds.jsonl",
    "patch.jsonl",
    "config.json",
    "manifest.json",
    "example_metrics.json",
    "codex-sessions.json",
    "codex-stats.json",
    "upstream_test_data/results.json",
    "experiment/results.json",
)


@pytest.mark.skipif(not SHARED_CORPUS.exists(), reason="shared corpus not available")
def test_ingest_whole_corpus(tmp_path: Path) -> None:
    args = ["ingest", str(SHARED_CORPUS), "--lake", str(tmp_path / "lake"), "--create"]
    result = CliRunner().invoke(cli, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    expected_formats = {
        "swe-agent", "mini-swe-agent", "openhands", "claude-code", "codex", "inspect",
        "responses", "tau-bench", "aider", "tau2-bench", "llm-proxy",
    }  # fmt: skip
    assert set(report["formats"]) == expected_formats
    assert report["added"] + report["duplicates"] == report["trajectories_read"] > 350
    unexpected = [f for f in report["files_skipped"] if not f.endswith(NOT_TRAJECTORIES)]
    assert unexpected == []
    # The only broken records are the deliberately malformed lines of one test fixture.
    assert report["quarantined"] == 7
    assert all("edge_cases.jsonl" in p for p in report["problems"])
