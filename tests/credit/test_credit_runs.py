"""Credit runs end to end: rows in `credits`, one snapshot per run, idempotent re-runs, CLI."""

from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.credit_cmd import credit
from trajlake.credit.runs import diagnostics, list_credit_runs, run_credit
from trajlake.credit.turns import load_turns
from trajlake.credit.values import OutcomeValues
from trajlake.errors import TrajlakeError
from trajlake.sample import sample_trajectories

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"


def count(lake: tl.Lake, query: str) -> int:
    return int(lake.sql(query).rows()[0][0])


def test_two_runs_coexist_and_rerun_adds_nothing(lake: tl.Lake) -> None:
    lake.write(list(sample_trajectories(12)))
    n_turns = sum(len(t.turns) for t in load_turns(lake))
    source = lake.snapshot().snapshot_id

    first = run_credit(lake, estimator="outcome", mask="rise", name="baseline")
    assert first.snapshot == source + 1 and first.rows_added == first.turns == n_turns
    second = run_credit(lake, estimator="prefix-mc", lam=1.0, mask="rise")
    assert second.snapshot == source + 2 and second.source_snapshot == source
    assert second.run_name.startswith("prefix-mc-rise-s")

    runs = list_credit_runs(lake)
    assert [r["run_name"] for r in runs] == sorted(["baseline", second.run_name])
    assert all(r["turns"] == n_turns and r["source_snapshot"] == source for r in runs)
    assert count(lake, "SELECT count(*) FROM credits") == 2 * n_turns
    assert count(lake, "SELECT count(*) FROM credits WHERE run_name = 'baseline'") == n_turns
    # The baseline: V = outcome everywhere, so credit 0; rise keeps exactly resolved turns.
    assert count(lake, "SELECT count(*) FROM credits WHERE credit <> 0") == count(
        lake, f"SELECT count(*) FROM credits WHERE run_name = '{second.run_name}' AND credit <> 0"
    )
    assert (
        count(
            lake,
            "SELECT count(*) FROM credits c JOIN outcomes o USING (trajectory_id) "
            "WHERE run_name = 'baseline' AND c.mask <> o.resolved",
        )
        == 0
    )
    # λ = 1 on prefix-MC values: A_t = R − V(s_t).
    assert (
        count(
            lake,
            "SELECT count(*) FROM credits c JOIN outcomes o USING (trajectory_id) "
            f"WHERE run_name = '{second.run_name}' "
            "AND abs(advantage - (o.resolved::INT - value_before)) > 1e-9",
        )
        == 0
    )

    head = lake.snapshot().snapshot_id
    again = run_credit(lake, estimator="outcome", mask="rise", name="baseline")
    assert again.existing and again.rows_added == 0 and lake.snapshot().snapshot_id == head
    again = run_credit(lake, estimator="prefix-mc", lam=1.0, mask="rise")
    assert again.existing and again.run_name == second.run_name
    assert lake.snapshot().snapshot_id == head
    with pytest.raises(TrajlakeError, match="already exists"):
        run_credit(lake, estimator="outcome", mask="all", name="baseline")
    # Reading the earlier snapshot sees no runs.
    assert list_credit_runs(lake, at=source) == []


def test_group_advantages_and_diagnostics(sample_lake: tl.Lake) -> None:
    report = run_credit(sample_lake, estimator="group:rloo", mask="advantage", beta=0.5)
    rows = sample_lake.sql(
        f"SELECT trajectory_id, advantage, weight, mask FROM credits "
        f"WHERE run_name = '{report.run_name}'"
    ).to_dicts()
    by_traj: dict[str, set[float]] = {}
    for row in rows:
        by_traj.setdefault(row["trajectory_id"], set()).add(row["advantage"])
    assert all(len(v) == 1 for v in by_traj.values())  # broadcast to every turn
    assert all(r["mask"] and 0 < r["weight"] <= 5.0 for r in rows)

    rise_run = run_credit(sample_lake, estimator="prefix-mc", mask="rise")
    stats = diagnostics(sample_lake, rise_run.run_name)
    assert stats["trajectories"] == 40
    assert 0.0 <= stats["turns_kept"] <= 1.0 and stats["tokens_kept"] is not None
    with pytest.raises(TrajlakeError):
        diagnostics(sample_lake, "missing")


@pytest.mark.parametrize("rule", ["step-reject", "first-error", "all"])
def test_other_masks(sample_lake: tl.Lake, rule: str) -> None:
    report = run_credit(sample_lake, estimator="outcome", mask=rule, n_step=2)
    assert report.rows_added == report.turns > 0
    if rule == "first-error":
        bad = count(
            sample_lake,
            "SELECT count(*) FROM credits c JOIN messages m ON m.trajectory_id = c.trajectory_id "
            "AND m.turn = c.turn AND m.role = 'tool' WHERE c.mask AND m.is_error",
        )
        assert bad == 0


def test_cli_credit(sample_lake: tl.Lake) -> None:
    runner = CliRunner()
    args = ["--lake", sample_lake.uri, "--estimator", "group", "--mask", "rise"]
    result = runner.invoke(credit, [*args, "--name", "cli-run", "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["run_name"] == "cli-run" and data["rows_added"] == data["turns"] > 0
    result = runner.invoke(credit, [*args, "--name", "cli-run", "--diagnose"])
    assert result.exit_code == 0, result.output
    assert "already stored" in result.output and "turns_kept=" in result.output
    mc = ["--estimator", "prefix-mc", "--source-option", "min_visits=3", "-o", "json"]
    result = runner.invoke(credit, ["--lake", sample_lake.uri, *mc])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params"]["source"] == {"min_visits": 3}
    result = runner.invoke(credit, [*args, "--source-option", "oops"])
    assert result.exit_code != 0
    result = runner.invoke(credit, [*args, "--where", "task_id IS NULL"])
    assert result.exit_code == 0 and "0 turns" in result.output


@pytest.mark.skipif(not (SHARED_CORPUS / "01_sweagent_traj").exists(), reason="no corpus")
def test_real_sweagent_corpus(lake: tl.Lake, tmp_path: Path) -> None:
    lake.ingest(str(SHARED_CORPUS / "01_sweagent_traj"))
    ids = [r["trajectory_id"] for r in lake.sql("SELECT trajectory_id FROM trajectories")]
    labels = tmp_path / "labels.csv"
    with labels.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trajectory_id", "resolved"])
        writer.writerows([tid, "true" if i % 2 else "false"] for i, tid in enumerate(ids))
    lake.label(str(labels))
    report = run_credit(lake, estimator="prefix-mc", mask="rise")
    n_turns = count(lake, "SELECT count(*) FROM messages WHERE role = 'assistant'")
    assert report.skipped == 0 and report.rows_added == n_turns > 0
    assert count(
        lake,
        f"SELECT count(DISTINCT trajectory_id) FROM credits WHERE run_name = '{report.run_name}'",
    ) == len([t for t in load_turns(lake) if t.turns])


def test_judge_gets_the_lake_and_no_secret_is_stored(
    sample_lake: tl.Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    class FakeJudge(OutcomeValues):
        name = "judge"

        def __init__(self, **kw: object) -> None:
            seen.update(kw)

    fake = types.ModuleType("trajlake.credit.judge")
    fake.JudgeValues = FakeJudge  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trajlake.credit.judge", fake)
    report = run_credit(sample_lake, estimator="judge", model="m", api_key="sk-secret")
    assert seen["lake"] is sample_lake and seen["api_key"] == "sk-secret"
    assert report.params["source"] == {"model": "m"}
    assert count(sample_lake, "SELECT count(*) FROM credits WHERE params LIKE '%sk-secret%'") == 0
