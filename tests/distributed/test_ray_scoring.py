"""`score --engine ray`: the same scores as the single-process path on the same snapshot, for
the sparse text model and the feature baseline; a killed actor and a killed driver lose and
duplicate nothing; a rerun scores only what is missing. Each Ray job costs seconds on a small
machine, so all but one equality test are `long` (CI's second pass)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.distributed import BatchDone, RayOptions, import_ray, score_with_ray
from trajlake.errors import MissingExtra
from trajlake.value.artifacts import load_model
from trajlake.value.scoring import score_to_lake

COLUMNS = "trajectory_id, score, source_snapshot, attrs"


def _copy(trained: dict[str, Any], target: Path) -> tl.Lake:
    shutil.copytree(trained["lake"], target)
    return tl.open_lake(target)


def _rows(lake: tl.Lake) -> dict[str, tuple[Any, ...]]:
    """Score rows by trajectory id, asserted to hold each trajectory once."""
    rows = lake.sql(f"SELECT {COLUMNS} FROM scores ORDER BY trajectory_id").rows()
    assert len(rows) == len({r[0] for r in rows}), "a trajectory was scored twice"
    return {r[0]: tuple(r[1:]) for r in rows}


def _assert_same_scores(remote: dict[str, tuple[Any, ...]], local: dict[str, Any]) -> None:
    assert remote.keys() == local.keys()
    ids = sorted(local)
    np.testing.assert_allclose(
        [remote[t][0] for t in ids], [local[t][0] for t in ids], rtol=0, atol=1e-9
    )


@pytest.fixture(scope="module")
def local_scores(trained: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Score rows of the single-process path, per model kind, on a copy of the lake."""
    out = {}
    for kind in ("sparse", "baseline"):
        lake = _copy(trained, tmp_path_factory.mktemp(f"local-{kind}") / "lake")
        score_to_lake(lake, load_model(trained[kind]))
        out[kind] = _rows(lake)
    return out


@pytest.mark.parametrize("kind", ["sparse", pytest.param("baseline", marks=pytest.mark.long)])
def test_ray_scores_equal_the_single_process_scores(
    kind: str, ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake, local_scores: Any
) -> None:
    report = score_with_ray(lake_copy, trained[kind], options=RayOptions(batch_size=8))
    assert report.scored == report.selected == trained["trajectories"]
    assert report.already_scored == 0 and report.commits == 1  # 8 batches, one window
    remote = _rows(lake_copy)
    _assert_same_scores(remote, local_scores[kind])
    # Same snapshot recorded, same calibration flag: the rows are the local path's rows.
    assert {r[1:] for r in remote.values()} == {r[1:] for r in local_scores[kind].values()}
    assert len({round(r[0], 6) for r in remote.values()}) > 5  # real, varied scores


@pytest.mark.long
def test_a_rerun_scores_only_what_is_missing_and_then_nothing(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake, local_scores: Any
) -> None:
    first = score_to_lake(
        lake_copy, load_model(trained["sparse"]), where="t.task_id < 'synth-repo-0010'"
    )
    already = first[1]
    assert 0 < already < trained["trajectories"]
    options = RayOptions(batch_size=4, commit_every=2)
    report = score_with_ray(lake_copy, trained["sparse"], options=options)
    assert report.already_scored == already
    assert report.scored == trained["trajectories"] - already
    _assert_same_scores(_rows(lake_copy), local_scores["sparse"])
    head = lake_copy.snapshot().snapshot_id
    again = score_with_ray(lake_copy, trained["sparse"], options=options)
    assert (again.scored, again.commits, again.snapshot) == (0, 0, None)
    assert lake_copy.snapshot().snapshot_id == head


@pytest.mark.long
def test_a_killed_actor_is_restarted_and_nothing_is_lost_or_doubled(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake, local_scores: Any
) -> None:
    killed: list[int] = []

    def kill_first_worker(done: BatchDone) -> None:
        if not killed:  # SIGKILL the actor that computed the first batch, mid-job
            killed.append(done.worker_pids[0])
            os.kill(done.worker_pids[0], signal.SIGKILL)

    options = RayOptions(num_workers=1, batch_size=1, commit_every=4)
    report = score_with_ray(
        lake_copy, trained["sparse"], options=options, on_batch=kill_first_worker
    )
    assert killed and len(report.workers) == 2  # the killed actor and the one Ray made anew
    assert report.scored == trained["trajectories"]
    _assert_same_scores(_rows(lake_copy), local_scores["sparse"])


@pytest.mark.long
def test_a_killed_driver_loses_what_it_did_not_commit_and_a_rerun_completes(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake, local_scores: Any
) -> None:
    lake_dir = lake_copy.uri
    command = [sys.executable, "-m", "trajlake", "score", trained["sparse"], "--lake", lake_dir]
    command += ["--engine", "ray", "--address", ray_cluster, "--num-workers", "1"]
    command += ["--batch-size", "1", "--commit-every", "1"]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    committed = 0
    try:
        deadline = time.monotonic() + 120
        while not committed and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            committed = len(_rows(tl.open_lake(lake_dir)))
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.wait()
    assert 0 < committed < trained["trajectories"], "the driver was not killed mid-job"
    report = score_with_ray(tl.open_lake(lake_dir), trained["sparse"], options=RayOptions())
    assert report.already_scored >= committed
    assert report.already_scored + report.scored == trained["trajectories"]
    _assert_same_scores(_rows(tl.open_lake(lake_dir)), local_scores["sparse"])


@pytest.mark.long
def test_the_cli_scores_on_ray(
    ray_cluster: str, trained: dict[str, Any], lake_copy: tl.Lake
) -> None:
    args = ["score", trained["sparse"], "--lake", lake_copy.uri, "--engine", "ray"]
    result = CliRunner().invoke(cli, [*args, "--batch-size", "32", "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["scored"] == trained["trajectories"] and report["commits"] == 1
    assert len(_rows(lake_copy)) == trained["trajectories"]


def test_ray_flags_need_the_ray_engine(trained: dict[str, Any], lake_copy: tl.Lake) -> None:
    args = ["score", trained["sparse"], "--lake", lake_copy.uri, "--address", "auto"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "--engine ray" in result.output


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does when not installed
    with pytest.raises(MissingExtra, match=r"trajlake\[ray\]"):
        import_ray()
