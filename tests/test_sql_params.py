"""Values reach SQL as bound parameters, and every command reads `--where` the same way.

Ids and names containing a single quote (`o'brien`) must round-trip through ingest, credit,
export, value training, scoring and `show`; a `--where` with unqualified column names must work
for every command that takes one, also where the query joins a table with the same column
(`task_id` is in `trajectories` and in `outcomes`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.synth import SynthConfig, generate

MODELS = Path(__file__).resolve().parents[1] / "models"
QUOTED_TASKS = ("o'brien-0", "o'brien-1", "o'brien-2")


def _run(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _quoted(record: dict[str, Any], n: int) -> dict[str, Any]:
    """The record with a quote in its trajectory and task ids (the first three tasks only)."""
    task_index = int(record["task_id"].rsplit("-", 1)[1])
    if task_index >= len(QUOTED_TASKS):
        return record
    return {
        **record,
        "trajectory_id": f"it's-{n:03d}",
        "task_id": QUOTED_TASKS[task_index],
        "group_id": QUOTED_TASKS[task_index],
    }


@pytest.fixture(scope="module")
def quoted_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A synthetic lake whose first tasks' ids contain a quote."""
    root = str(tmp_path_factory.mktemp("quotes") / "lake")
    lake = tl.open_lake(root, create=True)
    batch = generate(SynthConfig(seed=3, n_tasks=30, rollouts_per_task=4))
    lake.write([_quoted(t, n) for n, t in enumerate(batch.trajectories)])
    return root


def test_lake_sql_binds_positional_and_named_parameters(quoted_lake: str) -> None:
    lake = tl.open_lake(quoted_lake)
    by_position = lake.sql(
        "SELECT count(*) FROM trajectories WHERE task_id = ?", [QUOTED_TASKS[0]]
    ).rows()
    by_name = lake.sql(
        "SELECT count(*) FROM trajectories WHERE task_id IN (SELECT unnest($tasks::VARCHAR[]))",
        {"tasks": list(QUOTED_TASKS)},
    ).rows()
    assert by_position == [(4,)]
    assert by_name == [(12,)]


def test_quoted_ids_round_trip_through_credit_export_and_show(
    quoted_lake: str, tmp_path: Path
) -> None:
    run = "o'brien's run"
    _run("credit", "--lake", quoted_lake, "--estimator", "prefix-mc", "--name", run)
    lake = tl.open_lake(quoted_lake)
    stored = lake.sql(
        "SELECT count(DISTINCT trajectory_id) FROM credits WHERE run_name = ? "
        "AND trajectory_id LIKE 'it''s-%'",
        [run],
    ).rows()
    assert stored == [(12,)]

    out = tmp_path / "sft"
    _run(
        "export", "sft", "--lake", quoted_lake, "--format", "trl", "--credit", run,
        "--where", "task_id = 'o''brien-1'", "--allow-untrained", str(out),
    )  # fmt: skip
    rows = [
        json.loads(line)
        for shard in sorted(out.glob("*.jsonl"))
        for line in shard.read_text(encoding="utf-8").splitlines()
    ]
    assert rows and {r["trajectory_id"] for r in rows} <= {f"it's-{n:03d}" for n in range(4, 8)}

    shown = json.loads(_run("show", "it's-000", "--lake", quoted_lake, "-o", "json").output)
    assert shown["trajectory_id"] == "it's-000"
    assert shown["task_id"] == "o'brien-0"


@pytest.mark.parametrize("where", ["task_id NOT IN ('o''brien-0')", "t.task_id <> 'o''brien-1'"])
def test_train_value_where_accepts_unqualified_and_qualified_names(
    quoted_lake: str, tmp_path: Path, where: str
) -> None:
    """`task_id` is in both `trajectories` and `outcomes`: the predicate must not be ambiguous."""
    result = _run(
        "train", "value", "--lake", quoted_lake, "--config", str(MODELS / "baseline.yaml"),
        "--where", where, "--out", str(tmp_path / "model"), "--no-register", "-o", "json",
    )  # fmt: skip
    card = json.loads(
        (Path(json.loads(result.stdout)["directory"]) / "model_card.json").read_text()
    )
    assert card["lineage"]["selection_sql"] == where
    assert sum(split["examples"] for split in card["split"]["counts"].values()) == 116


def test_scoring_and_jsonl_export_take_the_same_where(quoted_lake: str, tmp_path: Path) -> None:
    model = tmp_path / "model"
    _run(
        "train", "value", "--lake", quoted_lake, "--config", str(MODELS / "baseline.yaml"),
        "--out", str(model), "--no-register",
    )  # fmt: skip
    where = "task_id = 'o''brien-2'"
    _run("score", str(model), "--lake", quoted_lake, "--where", where)
    lake = tl.open_lake(quoted_lake)
    scored = lake.sql("SELECT DISTINCT trajectory_id FROM scores ORDER BY 1").rows()
    assert [r[0] for r in scored] == [f"it's-{n:03d}" for n in range(8, 12)]

    out = tmp_path / "rows.jsonl"
    report = lake.export_jsonl(str(out), where=where)
    ids = [json.loads(line)["trajectory_id"] for line in out.read_text().splitlines()]
    assert report.trajectories == 4
    assert sorted(ids) == [f"it's-{n:03d}" for n in range(8, 12)]
