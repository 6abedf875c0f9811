"""The lake page and the snapshot list: snapshots with their tags, credit runs, SFT exports,
registered models and the lineage graph (`trajlake.lineage`, the graph `trajlake lineage
--output json` prints), all as read at one snapshot."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from trajlake.lake import LakeStore, Snapshot, Tag
from trajlake.lineage import lineage
from trajlake.query import QuerySession
from trajlake.view._params import parse_json, payload


def snapshot_entries(snapshots: list[Snapshot], tags: list[Tag]) -> list[dict[str, Any]]:
    """Snapshots newest first, each with its tags and what its commit did."""
    tags_at: dict[int, list[str]] = defaultdict(list)
    for tag in tags:
        tags_at[tag.snapshot_id].append(tag.name)
    return [
        {
            "snapshot": s.snapshot_id,
            "created_at": s.timestamp,
            "operation": s.operation,
            "message": _message(s),
            "added": {k: v for k, v in s.summary.get("added", {}).items() if v},
            "tags": sorted(tags_at.get(s.snapshot_id, [])),
        }
        for s in sorted(snapshots, key=lambda s: -s.snapshot_id)
    ]


def _message(snapshot: Snapshot) -> str:
    """What the commit says about itself: its note, else its added rows."""
    summary = snapshot.summary
    for key in ("note", "message", "run_name", "model_id"):
        if isinstance(summary.get(key), str) and summary[key]:
            return f"{key}: {summary[key]}" if key in ("run_name", "model_id") else summary[key]
    added = {k: v for k, v in summary.get("added", {}).items() if v}
    return ", ".join(f"+{v} {k}" for k, v in added.items())


def credit_runs(session: QuerySession) -> list[dict[str, Any]]:
    """Every credit run: estimator, trajectories and turns covered, source snapshot."""
    rows = session.sql(
        "SELECT run_name, any_value(estimator) AS estimator, "
        "count(DISTINCT trajectory_id) AS n_trajectories, count(*) AS n_turns, "
        "max(source_snapshot) AS source_snapshot, max(created_at) AS created_at, "
        "any_value(params) AS params FROM credits GROUP BY run_name ORDER BY run_name"
    ).to_dicts()
    for row in rows:
        row["params"] = parse_json(row["params"])
    return rows


def score_models(session: QuerySession) -> list[dict[str, Any]]:
    """Models with whole-trajectory scores, with how many trajectories each scored."""
    return session.sql(
        "SELECT model_id, count(DISTINCT trajectory_id) AS n_trajectories FROM scores "
        "WHERE turn IS NULL GROUP BY model_id ORDER BY n_trajectories DESC, model_id"
    ).to_dicts()


def lake_page(
    store: LakeStore, session: QuerySession, snapshots: list[Snapshot], tags: list[Tag]
) -> dict[str, Any]:
    """The lake endpoint's payload at the session's snapshot."""
    at = session.snapshot.snapshot_id
    exports = session.sql(
        "SELECT export_id, format, source_snapshot, source_tags, credit_run, mask, "
        "selection_sql, uri, counts, created_at FROM exports "
        "ORDER BY created_at DESC NULLS LAST, export_id"
    ).to_dicts()
    for row in exports:
        row["counts"] = parse_json(row["counts"])
    models = session.sql(
        "SELECT model_id, name, kind, base_model, training_snapshot, training_tag, "
        "selection_sql, label_source, metrics, parent_model_id, artifact_uri, created_at "
        "FROM models ORDER BY created_at DESC NULLS LAST, model_id"
    ).to_dicts()
    for row in models:
        row["metrics"] = parse_json(row["metrics"])
    graph = lineage(store, at=at).to_dict()
    for edge in graph["edges"]:
        edge["kind"] = edge["label"]
    return payload(
        {
            "snapshot": at,
            "snapshots": snapshot_entries(snapshots, tags),
            "tags": [
                {
                    "tag": t.name,
                    "snapshot": t.snapshot_id,
                    "created_at": t.created_at,
                    "note": t.note,
                }
                for t in tags
            ],
            "credit_runs": credit_runs(session),
            "exports": exports,
            "models": models,
            "lineage": graph,
        }
    )
