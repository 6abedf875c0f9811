"""A task's candidates side by side: every rollout with its outcome, a value model's score and
rank (`scores` rows of whole trajectories), the best-of-N pick, and a one-line summary per turn.
"""

from __future__ import annotations

import json
from typing import Any

from trajlake.query import QuerySession
from trajlake.view._params import ViewRequestError, payload

_SUMMARY_CHARS = 120
_ARGUMENT_KEYS = ("command", "cmd", "path", "file_path", "query", "pattern", "url", "code")


CANDIDATE_KEYS = (
    "trajectory_id",
    "run_id",
    "generation",
    "attempt",
    "harness",
    "policy_model",
    "resolved",
    "reward",
    "outcome_source",
    "n_turns",
    "status",
    "exit_reason",
)


def candidates(
    session: QuerySession, task_id: str, model_id: str | None, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The candidates endpoint's payload from the task's run rows (with their effective
    outcomes), or a 404 when no trajectory has the task."""
    rows = [{k: r[k] for k in CANDIDATE_KEYS} for r in runs]
    if not rows:
        raise ViewRequestError(f"no trajectory has task {task_id!r}", status=404, field="task_id")
    ids = [r["trajectory_id"] for r in rows]
    # A list of bound values (not a subquery) lets DuckDB skip row groups by their statistics.
    among = f"trajectory_id IN ({', '.join('?' * len(ids))})"
    models = session.sql(
        f"SELECT model_id, count(*) AS n FROM scores WHERE turn IS NULL AND {among} "
        "GROUP BY model_id ORDER BY n DESC, model_id",
        ids,
    ).rows()
    names = [str(m[0]) for m in models]
    if model_id is not None and model_id not in names:
        raise ViewRequestError(
            f"model {model_id!r} scored no trajectory of task {task_id!r}",
            status=404,
            field="model_id",
        )
    chosen = model_id or (names[0] if names else None)
    scores: dict[str, float] = {}
    if chosen is not None:
        scored = session.sql(
            "SELECT trajectory_id, score FROM scores "
            f"WHERE model_id = ? AND turn IS NULL AND {among}",
            [chosen, *ids],
        ).rows()
        scores = {str(r[0]): float(r[1]) for r in scored}
    # Rank 1 is the best-of-N pick; ties go to the smaller id, so the order is stable.
    ranked = sorted(scores, key=lambda i: (-scores[i], i))
    rank = {trajectory_id: n for n, trajectory_id in enumerate(ranked, start=1)}
    summaries = _turn_summaries(session, ids)
    for row in rows:
        tid = row["trajectory_id"]
        row["score"] = scores.get(tid)
        row["rank"] = rank.get(tid)
        row["picked"] = rank.get(tid) == 1
        row["turns"] = summaries.get(tid, [])
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0, r["trajectory_id"]))
    return payload(
        {
            "task_id": task_id,
            "model_id": chosen,
            "models": names,
            "n": len(rows),
            "n_resolved": sum(r["resolved"] is True for r in rows),
            "n_scored": len(scores),
            "candidates": rows,
        }
    )


def _turn_summaries(session: QuerySession, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Main-thread turns of each trajectory: `{turn, summary, is_error}` (one scan of the
    messages: a bound id list lets DuckDB skip row groups by their statistics)."""
    among = f"trajectory_id IN ({', '.join('?' * len(ids))})"
    rows = session.sql(
        "SELECT trajectory_id, turn, role, content, tool_calls, "
        "coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0 AS failed "
        f"FROM messages WHERE thread = 'main' AND turn IS NOT NULL AND {among} "
        "ORDER BY trajectory_id, turn, idx",
        ids,
    ).rows()
    out: dict[str, list[dict[str, Any]]] = {}
    for trajectory_id, turn, role, content, tool_calls, failed in rows:
        turns = out.setdefault(str(trajectory_id), [])
        if not turns or turns[-1]["turn"] != turn:
            turns.append({"turn": turn, "summary": None, "is_error": False})
        entry = turns[-1]
        if role == "assistant" and entry["summary"] is None:  # the turn's first action
            entry["summary"] = summary(content, tool_calls)
        elif role != "assistant":
            entry["is_error"] = entry["is_error"] or bool(failed)
    for turns in out.values():
        turns[:] = [t for t in turns if t["summary"] is not None]  # turns with no action
    return out


def summary(content: str | None, tool_calls: list[dict[str, Any]] | None) -> str:
    """One line for a turn: `tool: its main argument`, else the first line of the text."""
    if tool_calls:
        call = tool_calls[0]
        name, text = call.get("name") or "tool", call.get("arguments") or ""
        try:
            args = json.loads(text)
        except ValueError:
            args = None
        if isinstance(args, dict):
            key = next((k for k in _ARGUMENT_KEYS if isinstance(args.get(k), str)), None)
            text = args[key] if key else json.dumps(args, ensure_ascii=False)
            if key == "command" and isinstance(args.get("path"), str):  # an editor's verb
                text = f"{text} {args['path']}"
        more = f" (+{len(tool_calls) - 1})" if len(tool_calls) > 1 else ""
        return _clip(f"{name}: {' '.join(str(text).split())}") + more
    first = next((line.strip() for line in (content or "").splitlines() if line.strip()), "")
    return _clip(first)


def _clip(text: str) -> str:
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"
