"""`credit --engine ray`: the same rows as the single-process run on the same snapshot, for a
source without a model (outcome), sources comparing a task's rollouts (group, prefix-mc, anchor) and
sources with a model (credit's prefix value model; a neural prefix model under `long`); a run
cut short resumes without a duplicate row; sources fitted on everything are refused. All but
one Ray job are `long` (CI's second pass)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.credit import run_credit
from trajlake.distributed import BatchDone, RayOptions, credit_with_ray, unit_of
from trajlake.errors import TrajlakeError

ROW = (
    "trajectory_id, thread, turn, estimator, params, value_before, value_after, credit, "
    "advantage, weight, mask, segment_id, source_snapshot"
)


def _rows(lake: tl.Lake, run_name: str) -> list[tuple[Any, ...]]:
    """A run's rows (keys first), asserted to hold each turn once."""
    rows = lake.sql(
        f"SELECT {ROW} FROM credits WHERE run_name = ? ORDER BY trajectory_id, thread, turn",
        params=[run_name],
    ).rows()
    assert len(rows) == len({r[:3] for r in rows}), "a turn was credited twice"
    return [tuple(r) for r in rows]


def _estimator(name: str, trained: dict[str, Any]) -> str:
    return f"value-model:{trained['prefix_json']}" if name == "value-model" else name


@pytest.mark.parametrize(
    "name",
    [
        "group",
        pytest.param("outcome", marks=pytest.mark.long),
        pytest.param("prefix-mc", marks=pytest.mark.long),
        pytest.param("anchor", marks=pytest.mark.long),
        pytest.param("value-model", marks=pytest.mark.long),
    ],
)
def test_ray_credit_rows_equal_the_single_process_rows(
    name: str, ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake
) -> None:
    estimator = _estimator(name, trained)
    local = run_credit(lake_copy, estimator=estimator, mask="all", name="local")
    options = RayOptions(batch_size=4, commit_every=2)
    remote = credit_with_ray(
        lake_copy, estimator=estimator, mask="all", name="ray", options=options
    )
    assert remote.rows_added == local.rows_added == remote.turns > 0
    assert (remote.trajectories, remote.skipped) == (local.trajectories, local.skipped)
    assert remote.extra["commits"] >= 2  # committed in windows, not at the end only
    assert _rows(lake_copy, "ray") == _rows(lake_copy, "local")
    assert remote.warnings == local.warnings


def test_the_default_run_name_is_the_local_one_so_a_stored_run_is_not_redone(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake
) -> None:
    local = run_credit(lake_copy, estimator="group")
    head = lake_copy.snapshot().snapshot_id
    remote = credit_with_ray(lake_copy, estimator="group", options=RayOptions())
    assert remote.run_name == local.run_name and remote.existing
    assert remote.rows_added == 0 and lake_copy.snapshot().snapshot_id == head


class DriverDied(Exception):
    """Stands in for the driver dying after some commits."""


@pytest.mark.long
def test_a_run_cut_short_resumes_without_a_duplicate_row_and_survives_a_killed_actor(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake
) -> None:
    estimator = _estimator("value-model", trained)
    reference = run_credit(lake_copy, estimator=estimator, name="local")
    options = RayOptions(num_workers=1, batch_size=2, commit_every=1)

    def die_after_three_commits(done: BatchDone) -> None:
        commits.append(done.committed)
        if sum(commits) == 3:
            raise DriverDied

    commits: list[bool] = []
    with pytest.raises(DriverDied):
        credit_with_ray(
            lake_copy, estimator=estimator, name="ray", options=options,
            on_batch=die_after_three_commits,
        )  # fmt: skip
    cut = _rows(lake_copy, "ray")
    partial = {r[0] for r in cut}
    assert 0 < len(partial) < trained["trajectories"]

    killed: list[int] = []

    def kill_first_worker(done: BatchDone) -> None:
        if not killed:
            killed.append(done.worker_pids[0])
            os.kill(done.worker_pids[0], signal.SIGKILL)

    resumed = credit_with_ray(
        lake_copy, estimator=estimator, name="ray", options=options, on_batch=kill_first_worker
    )
    assert resumed.extra["resumed_trajectories"] == len(partial)
    assert len(resumed.extra["workers"]) == 2  # the killed actor and its replacement
    assert _rows(lake_copy, "ray") == _rows(lake_copy, "local")
    assert resumed.rows_added == reference.rows_added - len(cut)


def test_sources_fitted_on_every_trajectory_are_refused(tmp_path: Path) -> None:
    for name in ("crossfit:text", "value-model:builtin", "ensemble:outcome+group", "judge"):
        with pytest.raises(TrajlakeError, match="--engine local"):
            unit_of(name)
    assert unit_of("group:rloo") == "task" and unit_of("outcome") == "trajectory"
    assert unit_of(f"value-model:{tmp_path}") == "trajectory"  # a model directory


@pytest.mark.long
def test_the_cli_credits_on_ray(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake
) -> None:
    args = ["credit", "--lake", lake_copy.uri, "--estimator", "group:rloo", "--engine", "ray"]
    result = CliRunner().invoke(cli, [*args, "--name", "rloo", "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["extra"]["engine"] == "ray" and report["rows_added"] == len(
        _rows(lake_copy, "rloo")
    )


@pytest.mark.long
def test_a_neural_prefix_value_model_credits_the_same_on_ray(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    models = Path(__file__).resolve().parents[2] / "models"
    args = ["train", "value", "--lake", lake_copy.uri, "--config", str(models / "tiny-prefix.yaml")]
    small = ["prefix.rounds=1", "serializer.max_tokens=64", "serializer.observation_max_tokens=16"]
    small += ["backbone.config.hidden_size=32", "backbone.config.intermediate_size=64"]
    small += ["backbone.tokenizer.train_vocab_size=500"]
    for setting in small:
        args += ["--set", setting]
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "model"), "-o", "json"])
    assert result.exit_code == 0, result.output
    estimator = f"value-model:{json.loads(result.stdout)['directory']}"
    run_credit(lake_copy, estimator=estimator, mask="all", name="local")
    options = RayOptions(batch_size=8)
    credit_with_ray(lake_copy, estimator=estimator, mask="all", name="ray", options=options)
    local, remote = _rows(lake_copy, "local"), _rows(lake_copy, "ray")
    assert [r[:5] for r in remote] == [r[:5] for r in local] and local
    for a, b in zip(remote, local, strict=True):
        assert a[5:10] == pytest.approx(b[5:10], abs=1e-6)  # values, credit, advantage, weight
        assert a[10:] == b[10:]  # mask (all), segment, source snapshot
