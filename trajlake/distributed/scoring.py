"""`trajlake score --engine ray`: score a pinned snapshot's trajectories in a Ray actor pool and
commit the `scores` rows from the driver, a window of batches at a time, resumably.

How the input is read, and why: a model's input is not one table. Sparse and neural models
read a trajectory's messages joined with its trajectory row (thread order, the final output),
and the feature baseline's features are SQL aggregates over several tables; reproducing those
joins over raw `ray.data.read_parquet` blocks would fork the code that defines the model input.
So the driver resolves the snapshot once and selects the trajectory ids (DuckDB: `--where`,
minus those this model has scored), Ray Data carries blocks of ids, and each actor reads its
block through the same query layer the single-process path uses, pinned to that snapshot id:
the exact Parquet files of the pinned Delta versions, the same SQL, so the same inputs, with
the reading spread over the workers rather than funnelled through the driver.

Progress lives in the committed rows themselves: `scores` is keyed by (model, trajectory,
turn), a rerun skips every trajectory this model already has a whole-trajectory score for,
and a window committed twice (a retried batch) adds nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trajlake.distributed.cluster import (
    RayOptions,
    keep_off_gpus,
    ray_session,
    worker_location,
)
from trajlake.distributed.pool import Batch, CommitWindow, OnBatch, run_pool
from trajlake.lake import open_store
from trajlake.query import sql, where_ids
from trajlake.records import rows_for_table
from trajlake.value.artifacts import SavedModel, load_model, model_kind
from trajlake.value.card import CARD_JSON, read_card

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef


@dataclass
class RayScoreReport:
    """What a distributed scoring job did."""

    model_id: str
    source_snapshot: int
    """The snapshot whose trajectories were scored."""
    selected: int
    """Trajectories the selection (`where`) names at that snapshot."""
    already_scored: int
    """Of those, scored by this model before the job (skipped: a resumed job)."""
    scored: int = 0
    """Rows this job added to `scores`."""
    commits: int = 0
    snapshot: int | None = None
    """The lake snapshot holding the last commit (None when nothing was committed)."""
    workers: list[int] = field(default_factory=list)
    """Process ids of the actors that computed results (a restarted actor adds one)."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


class ScoreWorker:
    """One actor: the model and a lake handle, loaded once; scores blocks of trajectory ids."""

    def __init__(
        self,
        lake_uri: str,
        storage_options: dict[str, str],
        model_dir: str,
        snapshot_id: int,
        device: str | None,
        cpu_only: bool,
    ) -> None:
        if cpu_only:
            keep_off_gpus()
        self.lake = open_store(lake_uri, storage_options=storage_options or None)
        # device None: cuda when Ray gave this actor a GPU (CUDA_VISIBLE_DEVICES), else cpu.
        self.model = load_model(model_dir, device=device)
        self.snapshot_id = snapshot_id
        self.pid = os.getpid()

    def __call__(self, batch: Batch) -> Batch:
        """Scores of the block's trajectories, in order."""
        ids = [str(i) for i in batch["trajectory_id"]]
        scores = self.model.score_lake(self.lake, self.snapshot_id, ids)
        return {
            "trajectory_id": np.asarray(ids, dtype=object),
            "score": np.asarray(scores, dtype=np.float64),
            "worker_pid": np.full(len(ids), self.pid, dtype=np.int64),
        }


def model_identity(model_dir: str | Path) -> tuple[str, bool]:
    """The model id and whether its scores are probabilities, read without loading weights
    (the driver never loads the model: only the actors do)."""
    directory = Path(model_dir)
    kind = model_kind(directory)
    card = read_card(directory) if (directory / CARD_JSON).is_file() else None
    model_id = card.model_id if card else directory.resolve().name
    return model_id, SavedModel(directory, kind, card, model_id, None).calibrated


def scored_ids(lake: LakeStore, model_id: str) -> set[str]:
    """Trajectories the lake (at its head) has a whole-trajectory score of `model_id` for."""
    rows = sql(
        lake,
        "SELECT DISTINCT trajectory_id FROM scores WHERE model_id = ? AND turn IS NULL",
        [model_id],
    ).rows()
    return {r[0] for r in rows}


def _selected_ids(lake: LakeStore, snapshot_id: int, where: str | None) -> list[str]:
    query = (
        "SELECT t.trajectory_id FROM trajectories t "
        f"WHERE {where_ids(where, 't.trajectory_id')} ORDER BY t.trajectory_id"
    )
    return [r[0] for r in sql(lake, query, at=snapshot_id).rows()]


def score_with_ray(
    lake: LakeStore,
    model_dir: str | Path,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    options: RayOptions | None = None,
    device: str | None = None,
    on_batch: OnBatch | None = None,
) -> RayScoreReport:
    """Score the selected trajectories with the model in `model_dir` on Ray; same rows as
    `trajlake.value.scoring.score_to_lake` (turn = null: whole trajectory).

    Args:
        lake: The lake (read at `at`, committed to at its head).
        model_dir: A saved model directory, readable by every worker.
        at, where: Snapshot and SQL condition on `trajectories` (alias t).
        options: Cluster, pool size, GPUs per actor, batch size, commit window.
        device: Device of each actor's model (default: cuda when it has a GPU).
        on_batch: Called on the driver after each result batch.
    """
    options = options or RayOptions()
    start = time.perf_counter()
    model_dir = str(Path(model_dir).resolve())
    model_id, calibrated = model_identity(model_dir)
    snapshot_id = lake.snapshot(at).snapshot_id
    selected = _selected_ids(lake, snapshot_id, where)
    done = scored_ids(lake, model_id)
    todo = [tid for tid in selected if tid not in done]
    report = RayScoreReport(model_id, snapshot_id, len(selected), len(selected) - len(todo))

    def commit(batches: list[Batch]) -> None:
        now = dt.datetime.now(dt.UTC)
        records = [
            {
                "model_id": model_id,
                "trajectory_id": str(tid),
                "turn": None,
                "score": float(score),
                "source_snapshot": snapshot_id,
                "created_at": now,
                "attrs": {"calibrated": calibrated},
            }
            for b in batches
            for tid, score in zip(b["trajectory_id"], b["score"], strict=True)
        ]
        result = lake.commit(
            {"scores": rows_for_table("scores", records)},
            operation="score",
            summary={"model_id": model_id, "scored": len(records), "engine": "ray"},
        )
        report.scored += result.added.get("scores", 0)
        report.snapshot = result.snapshot_id

    if todo:
        uri, storage_options = worker_location(lake)
        kwargs = {
            "lake_uri": uri,
            "storage_options": storage_options,
            "model_dir": model_dir,
            "snapshot_id": snapshot_id,
            "device": device,
            "cpu_only": options.num_gpus_per_worker == 0,
        }
        window = CommitWindow(options.commit_every, commit, on_batch)
        with ray_session(options) as ray:
            units = [{"trajectory_id": tid} for tid in todo]
            for batch in run_pool(ray, units, ScoreWorker, kwargs, options):
                window.add(batch)
            window.flush()
        report.commits = window.commits
        report.workers = sorted(window.worker_pids)
    report.seconds = time.perf_counter() - start
    return report
