"""Where published rows come from: the snapshot and its tags, sources, outcome sources,
redactions and credit runs of the selected trajectories, read at the pinned snapshot.

The lake's own URI is left out: it is a path on the publisher's machine, not provenance a
reader can use. Licences of the sources are not stored in the lake; the publisher declares one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trajlake.publish._tables import row_condition
from trajlake.query import where_ids

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, Snapshot
    from trajlake.query import QuerySession

__all__ = ["snapshot_info", "trajectory_provenance"]


def snapshot_info(lake: LakeStore, snapshot: Snapshot) -> dict[str, Any]:
    """The pinned snapshot: id, time, operation, tags on it and each table's Delta version."""
    return {
        "id": snapshot.snapshot_id,
        "timestamp": snapshot.timestamp,
        "operation": snapshot.operation,
        "tags": sorted(t.name for t in lake.tags() if t.snapshot_id == snapshot.snapshot_id),
        "table_versions": dict(sorted(snapshot.tables.items())),
    }


def _rows(session: QuerySession, query: str) -> list[dict[str, Any]]:
    return session.sql(query).to_dicts()


def _sources(session: QuerySession, condition: str) -> list[dict[str, Any]]:
    return _rows(
        session,
        "SELECT source_format, harness, task_source, count(*) AS trajectories, "
        "count(DISTINCT source_uri) AS source_files "
        f"FROM trajectories WHERE {condition} GROUP BY ALL "
        "ORDER BY trajectories DESC, source_format NULLS LAST, harness NULLS LAST, "
        "task_source NULLS LAST",
    )


def _policies(session: QuerySession, condition: str) -> list[dict[str, Any]]:
    return _rows(
        session,
        "SELECT policy_model, count(*) AS trajectories FROM trajectories "
        f"WHERE {condition} GROUP BY ALL ORDER BY trajectories DESC, policy_model NULLS LAST",
    )


def _redactions(session: QuerySession, condition: str) -> dict[str, int]:
    row = _rows(
        session,
        "SELECT coalesce(sum(n_redactions), 0)::BIGINT AS placeholders, "
        "count(*) FILTER (WHERE n_redactions > 0) AS trajectories_redacted "
        f"FROM trajectories WHERE {condition}",
    )[0]
    return {k: int(v) for k, v in row.items()}


def _label_sources(session: QuerySession, condition: str) -> list[dict[str, Any]]:
    return _rows(
        session,
        "SELECT source, count(*) AS labels FROM labels "
        f"WHERE {condition} GROUP BY ALL ORDER BY labels DESC, source",
    )


def _credit_runs(session: QuerySession, condition: str) -> list[dict[str, Any]]:
    runs = _rows(
        session,
        "SELECT run_name, any_value(estimator) AS estimator, any_value(params) AS params, "
        "min(source_snapshot) AS source_snapshot, count(*) AS turns, "
        "count(DISTINCT trajectory_id) AS trajectories "
        f"FROM credits WHERE {condition} GROUP BY run_name ORDER BY run_name",
    )
    for run in runs:
        run["params"] = json.loads(run["params"]) if run["params"] else None
    return runs


def _score_models(session: QuerySession, condition: str) -> list[dict[str, Any]]:
    return _rows(
        session,
        "SELECT model_id, count(*) AS scores FROM scores "
        f"WHERE {condition} GROUP BY ALL ORDER BY model_id",
    )


def trajectory_provenance(
    session: QuerySession, where: str | None, tables: list[str]
) -> dict[str, Any]:
    """Sources, policies, outcome sources, redactions and credit runs of the rows selected by
    `where` (labels, credits and scores only when those tables are published)."""
    condition = where_ids(where)
    provenance: dict[str, Any] = {
        "sources": _sources(session, condition),
        "policy_models": _policies(session, condition),
        "redactions": _redactions(session, condition),
    }
    if "labels" in tables:
        # Task + run labels are counted with the trajectories they match, as they are written.
        provenance["label_sources"] = _label_sources(session, row_condition("labels", where))
    if "credits" in tables:
        provenance["credit_runs"] = _credit_runs(session, condition)
    if "scores" in tables:
        provenance["score_models"] = _score_models(session, condition)
    return provenance
