"""`trajlake credit --engine ray`: a credit run computed in a Ray actor pool and committed to
`credits` from the driver, a window of batches at a time, resumably.

How the input is read, and why: the turns a value source works on come from the `turns` view
(messages joined with themselves: an action and its observations) joined with the `outcomes`
view (labels beat the rollout's own result). Those are joins, so the driver reads them once
from its DuckDB at the run's input snapshot, exactly as the single-process run does, and Ray
Data carries them to the actors in blocks. The driver needs them anyway: `auto` picks the
estimator from all of them, and the warnings describe all of them. Sources that read messages
themselves (`value-model:<dir>`) read them in the actor at the same snapshot.

What can run here: sources whose values for a trajectory depend on it alone (`outcome`,
`value-model:<path.json|model dir>`), one unit of work per trajectory; and sources that compare
the rollouts of one task (`PER_TASK_SOURCES`: prefix-mc, group, group:grpo, group:rloo, anchor),
one unit per task, so each actor sees a task's rollouts together. Sources fitted on every
selected trajectory at once (crossfit, ensembles, `value-model:builtin`, progress, judges,
hindsight) are refused: split into batches they would give other values.

Progress lives in the committed rows: `credits` is keyed by (run, trajectory, thread, turn), a
unit's rows are always committed together, and a rerun with the same run name skips every unit
that has rows, so a killed job loses nothing it committed and never writes a row twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from trajlake.credit import AdvantageSource, TrajectoryTurns, load_turns, value_source_spec
from trajlake.credit.masks import MASK_RULES
from trajlake.credit.runs import (
    AUTO,
    PER_TASK_SOURCES,
    CreditRunReport,
    choose_estimator,
    clear_blank_task_ids,
    credit_rows,
    data_warnings,
    input_snapshot,
)
from trajlake.distributed.cluster import (
    RayOptions,
    keep_off_gpus,
    ray_session,
    worker_location,
)
from trajlake.distributed.pool import Batch, CommitWindow, OnBatch, run_pool
from trajlake.errors import TrajlakeError
from trajlake.lake import open_store
from trajlake.query import sql
from trajlake.records import rows_for_table

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Unit = Literal["trajectory", "task"]

_UNRECORDED = frozenset({"lake", "api_key"})
"""Source options kept out of the stored parameters (as in the single-process run)."""


def unit_of(estimator: str) -> Unit:
    """How a source's work splits: per trajectory or per task (TrajlakeError when it cannot)."""
    if estimator in PER_TASK_SOURCES:
        return "task"
    if estimator == "outcome":
        return "trajectory"
    target = estimator.removeprefix("value-model:")
    saved = target not in ("", "builtin") and (Path(target).is_dir() or target.endswith(".json"))
    if estimator.startswith("value-model:") and saved:
        return "trajectory"
    raise TrajlakeError(
        f"estimator {estimator!r} cannot run with --engine ray: its values are fitted on all "
        "selected trajectories at once, so batches would give other values; run it with "
        "--engine local, or pick outcome, value-model:<path.json|model dir> or one of "
        f"{', '.join(PER_TASK_SOURCES)}"
    )


def run_parameters(
    estimator: str, snap: int, source_kw: dict[str, Any], **settings: Any
) -> tuple[dict[str, Any], str]:
    """The stored parameters and the default run name, as the single-process run derives them
    (so both engines name the same run alike and can resume each other's)."""
    recorded = {k: v for k, v in source_kw.items() if k not in _UNRECORDED}
    params: dict[str, Any] = json.loads(json.dumps({**settings, "source": recorded}, default=str))
    digest = hashlib.sha256(json.dumps([estimator, params], sort_keys=True).encode()).hexdigest()
    return params, f"{estimator}-{settings['mask']}-s{snap}-{digest[:8]}"


def stored_trajectories(
    lake: LakeStore, run_name: str, estimator: str, params: dict[str, Any], snap: int
) -> set[str]:
    """Trajectories the run already has rows for (TrajlakeError when a run of that name was
    stored with other parameters or from another snapshot)."""
    rows = sql(
        lake,
        "SELECT estimator, params, source_snapshot, list(DISTINCT trajectory_id) "
        "FROM credits WHERE run_name = ? GROUP BY ALL",
        [run_name],
    ).rows()
    done: set[str] = set()
    for stored_estimator, stored_params, source_snapshot, ids in rows:
        same = stored_params is not None and json.loads(stored_params) == params
        if stored_estimator != estimator or not same or source_snapshot != snap:
            raise TrajlakeError(
                f"credit run {run_name!r} already exists with other parameters or another "
                "source snapshot; pick another --name"
            )
        done.update(ids)
    return done


def work_units(trajectories: Sequence[TrajectoryTurns], unit: Unit) -> dict[str, list[Any]]:
    """Trajectories grouped into units of work (a task's rollouts, or a trajectory's threads)."""
    units: dict[str, list[Any]] = defaultdict(list)
    for t in trajectories:
        task = t.task_id if t.task_id is not None else "traj:" + t.trajectory_id
        units[task if unit == "task" else t.trajectory_id].append(t)
    return dict(units)


class CreditWorker:
    """One actor: the value source (and its model) built once; credits blocks of units."""

    def __init__(
        self,
        lake_uri: str,
        storage_options: dict[str, str],
        estimator: str,
        source_kw: dict[str, Any],
        snapshot_id: int,
        run_name: str,
        params: dict[str, Any],
        cpu_only: bool,
    ) -> None:
        if cpu_only:
            keep_off_gpus()
        lake = open_store(lake_uri, storage_options=storage_options or None)
        spec = value_source_spec(estimator)
        kw = dict(source_kw)
        if spec.needs_lake:
            kw.setdefault("lake", lake)
        if spec.reads_observations:
            kw.update(lake=lake, at=snapshot_id)
        self.source = spec.build(estimator, **kw)
        self.estimator = estimator
        self.snapshot_id = snapshot_id
        self.run_name = run_name
        self.params = params
        self.pid = os.getpid()

    def _credit(self, trajectories: list[TrajectoryTurns]) -> tuple[list[dict[str, Any]], set[str]]:
        values = self.source.values(trajectories)
        advantages = (
            self.source.advantages(trajectories)
            if isinstance(self.source, AdvantageSource)
            else None
        )
        rows = credit_rows(
            trajectories,
            values,
            run_name=self.run_name,
            estimator=self.estimator,
            params=self.params,
            group_advantages=advantages,
            source_snapshot=self.snapshot_id,
        )
        return rows, set(values)

    def __call__(self, batch: Batch) -> Batch:
        """Per unit: its credit rows and valued trajectory ids (pickled), in order."""
        out = []
        for payload in batch["turns"]:
            trajectories: list[TrajectoryTurns] = pickle.loads(payload)
            rows, valued = self._credit(trajectories)
            out.append(pickle.dumps({"rows": rows, "valued": sorted(valued)}))
        return {
            "unit": batch["unit"],
            "result": np.asarray(out, dtype=object),
            "worker_pid": np.full(len(out), self.pid, dtype=np.int64),
        }


def credit_with_ray(
    lake: LakeStore,
    *,
    estimator: str = AUTO,
    gamma: float = 1.0,
    lam: float = 0.0,
    n_step: int | None = None,
    mask: str = "rise",
    eps: float = 0.05,
    beta: float = 1.0,
    w_max: float = 5.0,
    at: SnapshotRef = None,
    where: str | None = None,
    thread: str | None = "main",
    name: str | None = None,
    options: RayOptions | None = None,
    on_batch: OnBatch | None = None,
    **source_kw: Any,
) -> CreditRunReport:
    """`trajlake.credit.run_credit` on Ray: the same rows, committed in windows, resumable.

    Arguments are `run_credit`'s, plus `options` (cluster, pool, batch size = units per batch,
    commit window) and `on_batch` (called on the driver after each result batch). The report's
    `extra` says `engine`, `commits`, `resumed_trajectories` (skipped: already stored) and the
    actors' `workers`; `existing` is true when every selected unit was already stored.
    """
    options = options or RayOptions()
    if mask not in MASK_RULES:
        raise ValueError(f"unknown mask rule {mask!r}; known: {', '.join(MASK_RULES)}")
    if n_step is not None and n_step < 1:
        raise ValueError(f"n_step must be >= 1, got {n_step}")
    snap = input_snapshot(lake, at)
    trajectories = load_turns(lake, at=snap, where=where, thread=thread)
    missing_task = clear_blank_task_ids(trajectories)
    choice = choose_estimator(trajectories) if estimator == AUTO else None
    estimator = choice.name if choice is not None else estimator
    unit = unit_of(estimator)
    value_source_spec(estimator)  # an unknown name fails here, before the cluster starts
    settings = {"gamma": gamma, "lam": lam, "n_step": n_step, "mask": mask, "eps": eps}
    settings |= {"beta": beta, "w_max": w_max, "where": where, "thread": thread}
    params, default_name = run_parameters(estimator, snap, source_kw, **settings)
    run_name = name or default_name
    report = CreditRunReport(run_name, estimator, params, snap, lake.snapshot().snapshot_id)
    if choice is not None:
        report.estimator_choice = asdict(choice)
    done = stored_trajectories(lake, run_name, estimator, params, snap)
    units = work_units(trajectories, unit)
    todo = {k: ts for k, ts in units.items() if not any(t.trajectory_id in done for t in ts)}
    valued = set(done)
    report.extra = {"engine": "ray", "commits": 0, "resumed_trajectories": len(done)}
    report.existing = bool(done) and not todo

    def commit(batches: list[Batch]) -> None:
        rows: list[dict[str, Any]] = []
        for b in batches:
            for payload in b["result"]:
                result = pickle.loads(payload)
                rows.extend(result["rows"])
                valued.update(result["valued"])
        report.turns += len(rows)
        report.kept_turns += sum(1 for r in rows if r["mask"])
        if not rows:
            return
        summary = {"run_name": run_name, "estimator": estimator, "rows": len(rows)}
        summary["engine"] = "ray"
        result = lake.commit(
            {"credits": rows_for_table("credits", rows)}, operation="credit", summary=summary
        )
        report.rows_added += result.added.get("credits", 0)
        report.snapshot = result.snapshot_id

    if todo:
        uri, storage_options = worker_location(lake)
        kwargs = {
            "lake_uri": uri,
            "storage_options": storage_options,
            "estimator": estimator,
            "source_kw": {k: v for k, v in source_kw.items() if k != "lake"},
            "snapshot_id": snap,
            "run_name": run_name,
            "params": params,
            "cpu_only": options.num_gpus_per_worker == 0,
        }
        window = CommitWindow(options.commit_every, commit, on_batch)
        inputs = [{"unit": k, "turns": pickle.dumps(ts)} for k, ts in todo.items()]
        with ray_session(options) as ray:
            for batch in run_pool(ray, inputs, CreditWorker, kwargs, options):
                window.add(batch)
            window.flush()
        report.extra.update(commits=window.commits, workers=sorted(window.worker_pids))
    valued_now = {t.trajectory_id for t in trajectories if t.trajectory_id in valued}
    report.trajectories = len(valued_now - done)
    report.skipped = len({t.trajectory_id for t in trajectories}) - len(valued_now)
    report.warnings = data_warnings(
        trajectories, estimator, None, {tid: [] for tid in valued}, missing_task
    )
    return report
