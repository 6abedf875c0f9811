"""Request parsing for the reranking server: validate a rerank body, shape a ranked answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Group:
    task_id: str | None
    candidates: list[Any]
    top_k: int | None


def _parse_body(body: Any, max_candidates: int) -> tuple[list[_Group], bool, bool]:
    """Validate a rerank body; returns (groups, is_multi_task, return_scores). Raises ValueError."""
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    allowed = {"candidates", "tasks", "task_id", "top_k", "return_scores"}
    if unknown := sorted(set(body) - allowed):
        raise ValueError(f"unknown field(s) {unknown}; allowed: {sorted(allowed)}")
    return_scores = body.get("return_scores", True)
    if not isinstance(return_scores, bool):
        raise ValueError("return_scores must be true or false")
    top_k = _top_k(body.get("top_k"), "top_k")
    if ("candidates" in body) == ("tasks" in body):
        raise ValueError("give exactly one of 'candidates' or 'tasks'")
    if "candidates" in body:
        groups = [_group(body, "", top_k)]
    else:
        tasks = body["tasks"]
        if not isinstance(tasks, list) or not tasks:
            raise ValueError("tasks must be a non-empty array of {task_id, candidates} objects")
        groups = [_group(t, f"tasks[{i}].", top_k) for i, t in enumerate(tasks)]
    total = sum(len(g.candidates) for g in groups)
    if total > max_candidates:
        raise ValueError(
            f"{total} candidates in one request; this server accepts at most "
            f"{max_candidates} (max_candidates_per_request)"
        )
    return groups, "tasks" in body, return_scores


def _group(obj: Any, where: str, default_top_k: int | None) -> _Group:
    if not isinstance(obj, dict):
        raise ValueError(f"{where.rstrip('.')} must be a JSON object")
    if where and (extra := sorted(set(obj) - {"task_id", "candidates", "top_k"})):
        raise ValueError(f"{where}: unknown field(s) {extra}")
    task_id = obj.get("task_id")
    if task_id is not None and not isinstance(task_id, str):
        raise ValueError(f"{where}task_id must be a string")
    candidates = obj.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise ValueError(f"{where}candidates must be a non-empty array")
    for i, c in enumerate(candidates):
        if not isinstance(c, (list, dict)):
            raise ValueError(
                f"{where}candidates[{i}] must be a JSON array (chat messages) or "
                f"object (trajectory), got {type(c).__name__}"
            )
    top_k = _top_k(obj.get("top_k"), f"{where}top_k") if where else None
    return _Group(task_id, candidates, top_k if top_k is not None else default_top_k)


def _top_k(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer")
    return value


def _ranked(group: _Group, scores: list[float], return_scores: bool) -> dict[str, Any]:
    # Stable on ties: the earlier candidate wins, so answers do not depend on batch composition.
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out: dict[str, Any] = {"task_id": group.task_id}
    if return_scores:
        out["scores"] = scores
    out["order"] = order
    out["best"] = order[0]
    if group.top_k is not None:
        out["top_k"] = order[: group.top_k]
    return out
