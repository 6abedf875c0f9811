"""The judge path end to end: `trajlake credit --estimator judge` against a local stub server,
twice — the second run is answered from the lake's cache and sends no request."""

from __future__ import annotations

import json
from pathlib import Path

from _judge_stub import credit_cli_args, judge_stub
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.sample import sample_trajectories


def test_credit_cli_with_judge_caches_in_the_lake(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(list(sample_trajectories(4)))
    n_trajectories = 4
    runner = CliRunner()
    with judge_stub() as stub:
        base = credit_cli_args(lake, stub, "judge")
        first = runner.invoke(cli, [*base, "--name", "judge-1"])
        assert first.exit_code == 0, first.output
        assert stub.count == n_trajectories
        second = runner.invoke(cli, [*base, "--name", "judge-2"])
        assert second.exit_code == 0, second.output
        assert stub.count == n_trajectories  # every prompt answered from the cache
    report = json.loads(first.output)
    assert report["turns"] == report["rows_added"] > 0
    cached = lake.sql(
        "SELECT count(*) FROM calls WHERE json_extract_string(attrs, '$.purpose') = 'credit-judge'"
    ).rows()[0][0]
    assert cached == n_trajectories
    same = lake.sql(
        "SELECT count(*) FROM credits a JOIN credits b USING (trajectory_id, thread, turn) "
        "WHERE a.run_name = 'judge-1' AND b.run_name = 'judge-2' "
        "AND a.value_before = b.value_before AND a.credit = b.credit"
    ).rows()[0][0]
    assert same == report["turns"]
    stored = lake.sql("SELECT params FROM credits WHERE run_name = 'judge-1' LIMIT 1").rows()
    assert "test-key" not in stored[0][0]  # secrets never land in stored parameters
