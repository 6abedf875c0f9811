"""Per-turn credit of one trajectory under one credit run, for the transcript's overlay."""

from __future__ import annotations

from typing import Any

from trajlake.query import QuerySession
from trajlake.view._params import ViewRequestError, parse_json, payload

TURN_COLUMNS = (
    "thread, turn, value_before, value_after, credit, advantage, weight, mask, segment_id"
)


def credit(session: QuerySession, trajectory_id: str, run_name: str) -> dict[str, Any]:
    """The credit endpoint's payload, or a 404 when the run has no rows for the trajectory."""
    rows = session.sql(
        f"SELECT {TURN_COLUMNS}, estimator, params, source_snapshot, created_at FROM credits "
        "WHERE run_name = ? AND trajectory_id = ? "
        "ORDER BY thread <> 'main', thread, turn",
        [run_name, trajectory_id],
    ).to_dicts()
    if not rows:
        raise ViewRequestError(
            f"credit run {run_name!r} has no rows for trajectory {trajectory_id!r}",
            status=404,
            field="run",
        )
    first = rows[0]
    keys = TURN_COLUMNS.split(", ")
    return payload(
        {
            "run_name": run_name,
            "trajectory_id": trajectory_id,
            "estimator": first["estimator"],
            "params": parse_json(first["params"]),
            "source_snapshot": first["source_snapshot"],
            "created_at": first["created_at"],
            "turns": [{k: row[k] for k in keys} for row in rows],
        }
    )


def runs_with_rows(session: QuerySession, trajectory_ids: list[str]) -> list[tuple[str, str]]:
    """(run name, trajectory id) of every credit run that covers one of the trajectories."""
    if not trajectory_ids:
        return []
    rows = session.sql(
        "SELECT DISTINCT run_name, trajectory_id FROM credits "
        "WHERE trajectory_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY run_name, trajectory_id",
        [trajectory_ids],
    ).rows()
    return [(str(r[0]), str(r[1])) for r in rows]
