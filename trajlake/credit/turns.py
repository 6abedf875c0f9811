"""Turns read from the lake: the `turns` view SQL and `load_turns` → `TrajectoryTurns`.

A turn is the t-th assistant message of a thread (`messages.turn`) plus the observations that
follow it; it is an error turn when one of those reports `is_error` or a non-zero `exit_code`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajlake.credit._types import TrajectoryTurns, Turn
from trajlake.query import DERIVED_VIEWS, VIEW_TABLES, sql, where_ids

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

TURNS_VIEW_SQL = DERIVED_VIEWS["turns"]
"""The `turns` derived view: one row per agent turn (reads `messages`)."""

TURNS_VIEW_TABLES: set[str] = VIEW_TABLES["turns"]
"""Tables the `turns` view reads."""


def outcome_value(resolved: bool | None, reward: float | None) -> float | None:
    """A trajectory's outcome as a number: resolved → 1.0/0.0, else the reward, else None."""
    if resolved is not None:
        return 1.0 if resolved else 0.0
    if reward is not None:
        return float(reward)
    return None


def turns_query(*, where: str | None = None, thread: str | None = "main") -> str:
    """SQL giving the `turns` rows (with task id and outcome) of the selected trajectories;
    with a thread, run it with the parameters `{"thread": thread}` (bound as `$thread`)."""
    conditions = [where_ids(where, "tu.trajectory_id")]
    if thread is not None:
        conditions.append("tu.thread = $thread")
    return f"""
        WITH tu AS ({TURNS_VIEW_SQL})
        SELECT tu.*, oc.task_id, oc.resolved, oc.reward
        FROM tu LEFT JOIN outcomes oc ON oc.trajectory_id = tu.trajectory_id
        WHERE {" AND ".join(conditions)}
        ORDER BY tu.trajectory_id, tu.thread, tu.turn
    """


def load_turns(
    lake: LakeStore,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    thread: str | None = "main",
) -> list[TrajectoryTurns]:
    """The turns of the lake's trajectories at a snapshot, grouped by trajectory (and thread).

    Args:
        lake: The lake to read.
        at: Snapshot reference (id, tag, timestamp, 'latest' / None).
        where: SQL condition on `trajectories` selecting the trajectories to load.
        thread: Thread to read (default 'main'); None reads every thread.

    Returns:
        One `TrajectoryTurns` per (trajectory, thread), ordered by id then thread; the outcome
        comes from the `outcomes` view (labels beat what the rollout recorded).
    """
    params = None if thread is None else {"thread": thread}
    rows = sql(lake, turns_query(where=where, thread=thread), params, at=at).to_dicts()
    return group_turns(rows)


def group_turns(rows: list[dict[str, Any]]) -> list[TrajectoryTurns]:
    """Group `turns_query` rows (ordered by trajectory, thread, turn) into `TrajectoryTurns`."""
    out: list[TrajectoryTurns] = []
    current: TrajectoryTurns | None = None
    for row in rows:
        key = (row["trajectory_id"], row["thread"])
        if current is None or (current.trajectory_id, current.thread) != key:
            current = TrajectoryTurns(
                trajectory_id=row["trajectory_id"],
                task_id=row["task_id"],
                outcome=outcome_value(row["resolved"], row["reward"]),
                thread=row["thread"],
            )
            out.append(current)
        current.turns.append(
            Turn(
                trajectory_id=row["trajectory_id"],
                thread=row["thread"],
                turn=int(row["turn"]),
                action_text=row["action_text"] or "",
                tool_names=tuple(row["tool_names"] or ()),
                is_error=bool(row["is_error"]),
                tokens=None if row["tokens"] is None else int(row["tokens"]),
            )
        )
    return out
