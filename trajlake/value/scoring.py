"""Score lake trajectories with a saved model: store the scores as a new snapshot (`scores`
table, keyed by model and trajectory) or rank candidates per task for best-of-N selection."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajlake.query import sql, where_ids
from trajlake.records import rows_for_table
from trajlake.value.artifacts import SavedModel

if TYPE_CHECKING:
    from trajlake.lake import CommitResult, LakeStore, SnapshotRef

_GROUP_COLUMNS = ("task_id", "group_id", "run_id", "policy_model", "harness", "generation")


def _selection(
    lake: LakeStore, snapshot_id: int, where: str | None, group_by: str
) -> list[tuple[str, Any, Any, Any]]:
    """(trajectory id, group, resolved, reward) of the selected trajectories."""
    if group_by not in _GROUP_COLUMNS:
        raise ValueError(f"group_by must be one of {', '.join(_GROUP_COLUMNS)}, got {group_by!r}")
    query = f"""
        SELECT t.trajectory_id, coalesce(CAST(t.{group_by} AS VARCHAR), t.trajectory_id),
               o.resolved, o.reward
        FROM trajectories t LEFT JOIN outcomes o USING (trajectory_id)
        WHERE {where_ids(where, "t.trajectory_id")} ORDER BY t.trajectory_id
    """
    return [tuple(r) for r in sql(lake, query, at=snapshot_id).rows()]


def score_to_lake(
    lake: LakeStore, model: SavedModel, *, at: SnapshotRef = None, where: str | None = None
) -> tuple[CommitResult, int]:
    """Score the selected trajectories and append `scores` rows (turn = null: whole
    trajectory) in one commit; trajectories already scored by this model are kept as they are."""
    snapshot = lake.snapshot(at)
    rows = _selection(lake, snapshot.snapshot_id, where, "task_id")
    ids = [r[0] for r in rows]
    scores = model.score_lake(lake, snapshot.snapshot_id, ids)
    now = dt.datetime.now(dt.UTC)
    records = [
        {
            "model_id": model.model_id,
            "trajectory_id": trajectory_id,
            "turn": None,
            "score": float(score),
            "source_snapshot": snapshot.snapshot_id,
            "created_at": now,
            "attrs": {"calibrated": model.calibrated},
        }
        for trajectory_id, score in zip(ids, scores, strict=True)
    ]
    result = lake.commit(
        {"scores": rows_for_table("scores", records)},
        operation="score",
        summary={"model_id": model.model_id, "scored": len(records)},
    )
    return result, len(records)


@dataclass(frozen=True)
class Candidate:
    """One scored candidate of a group."""

    trajectory_id: str
    score: float
    rank: int
    resolved: bool | None
    reward: float | None


@dataclass(frozen=True)
class GroupRanking:
    """A group's candidates, best first."""

    group: str
    candidates: list[Candidate]

    @property
    def best(self) -> Candidate:
        """The selected candidate."""
        return self.candidates[0]


def rerank_lake(
    lake: LakeStore,
    model: SavedModel,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    group_by: str = "task_id",
) -> list[GroupRanking]:
    """Rank the selected trajectories within each group (default: per task), best first."""
    snapshot = lake.snapshot(at)
    rows = _selection(lake, snapshot.snapshot_id, where, group_by)
    scores = model.score_lake(lake, snapshot.snapshot_id, [r[0] for r in rows])
    groups: dict[str, list[tuple[str, float, Any, Any]]] = defaultdict(list)
    for (trajectory_id, group, resolved, reward), score in zip(rows, scores, strict=True):
        groups[str(group)].append((trajectory_id, float(score), resolved, reward))
    rankings = []
    for group in sorted(groups):
        members = sorted(groups[group], key=lambda m: (-m[1], m[0]))
        rankings.append(
            GroupRanking(
                group,
                [
                    Candidate(
                        tid,
                        score,
                        rank,
                        None if res is None else bool(res),
                        None if rew is None else float(rew),
                    )
                    for rank, (tid, score, res, rew) in enumerate(members, start=1)
                ],
            )
        )
    return rankings
