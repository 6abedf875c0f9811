"""One trajectory as the transcript page shows it: its row, outcome, labels, threads and turns.

Turns come from `messages.turn`: consecutive messages of a thread with the same turn form one
entry (messages without a turn, such as the system prompt and the task, form entries with turn
null), so every message is in exactly one entry, main thread first. Per-turn tokens are summed
from the messages; cost and latency come from `calls` (the k-th call of a thread, by `seq`,
produced its k-th turn) or, where a harness recorded them, from the messages' `attrs`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from trajlake.query import QuerySession
from trajlake.schema import json_columns
from trajlake.view._edits import edits_of_call
from trajlake.view._params import ViewRequestError, jsonable, parse_json

MESSAGE_COLUMNS = (
    "thread, idx, turn, role, content, reasoning, name, tool_call_id, is_error, exit_code, "
    "model, finish_reason, prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, "
    "is_copied_context, timestamp, tool_calls, "
    "TRY_CAST(json_extract(attrs, '$.cost_usd') AS DOUBLE) AS _cost_usd, "
    "TRY_CAST(json_extract(attrs, '$.latency_ms') AS DOUBLE) AS _latency_ms"
)


def trajectory_row(session: QuerySession, trajectory_id: str) -> dict[str, Any]:
    """The trajectory's row without `tools` (JSON columns parsed), or a 404."""
    rows = session.sql(
        "SELECT * EXCLUDE (tools, rewards), to_json(rewards)::VARCHAR AS rewards "
        "FROM trajectories WHERE trajectory_id = ?",
        [trajectory_id],
    ).to_dicts()
    if not rows:
        raise ViewRequestError(
            f"no trajectory {trajectory_id!r} at this snapshot", status=404, field="id"
        )
    row = rows[0]
    for column in (*json_columns("trajectories"), "rewards"):
        if column in row and isinstance(row[column], str):
            row[column] = parse_json(row[column])
    row.pop("tools", None)
    return row


def transcript(
    session: QuerySession, trajectory_id: str, run_row: dict[str, Any] | None
) -> dict[str, Any]:
    """The trajectory endpoint's payload; `run_row` is its runs row (the effective outcome,
    read once per snapshot for the runs table, rather than the `outcomes` view per request)."""
    row = trajectory_row(session, trajectory_id)
    labels = session.sql(
        "SELECT source, resolved, reward, created_at, details, label_id FROM labels "
        "WHERE trajectory_id = ? OR (trajectory_id IS NULL AND task_id = ? AND run_id = ?) "
        "ORDER BY created_at DESC NULLS LAST, label_id",
        [trajectory_id, row.get("task_id"), row.get("run_id")],
    ).to_dicts()
    for label in labels:
        label["details"] = parse_json(label["details"])
    messages = session.sql(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE trajectory_id = ? ORDER BY thread, idx",
        [trajectory_id],
    ).to_dicts()
    calls = session.sql(
        "SELECT coalesce(thread, 'main') AS thread, seq, latency_ms, prompt_tokens, "
        "completion_tokens, TRY_CAST(json_extract(attrs, '$.cost_usd') AS DOUBLE) AS cost_usd "
        "FROM calls WHERE trajectory_id = ? ORDER BY seq NULLS LAST, started_at",
        [trajectory_id],
    ).to_dicts()
    by_thread = _by_thread(messages)
    turns = []
    for thread, thread_messages in by_thread.items():
        turns += _turns(thread, thread_messages, [c for c in calls if c["thread"] == thread])
    threads = [
        {
            "thread": thread,
            "n_messages": len(items),
            "is_subagent": thread != "main" or bool(row.get("is_subagent")),
            "n_copied_context": sum(bool(m["is_copied_context"]) for m in items),
        }
        for thread, items in by_thread.items()
    ]
    # Only the small parts go through `jsonable`; messages convert their one timestamp below.
    return {
        "trajectory": jsonable(row),
        "outcome": {
            "resolved": run_row["resolved"] if run_row else None,
            "reward": jsonable(run_row["reward"]) if run_row else None,
            "source": run_row["outcome_source"] if run_row else None,
        },
        "labels": jsonable(labels),
        "threads": threads,
        "turns": turns,
        "final_output": row.get("final_output"),
    }


def _by_thread(messages: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Messages per thread: main first, then the others in the order they start."""
    threads: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        threads[message["thread"]].append(message)
    order = sorted(threads, key=lambda t: (t != "main", _first_time(threads[t]), t))
    return {t: threads[t] for t in order}


def _first_time(messages: list[dict[str, Any]]) -> str:
    stamps = [m["timestamp"] for m in messages if m["timestamp"] is not None]
    return min(stamps).isoformat() if stamps else "~"


def _turns(
    thread: str, messages: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for message in messages:
        if not entries or entries[-1]["turn"] != message["turn"]:
            entries.append({"thread": thread, "turn": message["turn"], "messages": []})
        entries[-1]["messages"].append(message)
    # The k-th call of the thread produced its k-th turn.
    numbered = sorted({e["turn"] for e in entries if e["turn"] is not None})
    call_of_turn = dict(zip(numbered, calls, strict=False))
    for entry in entries:
        items = entry["messages"]
        call = call_of_turn.get(entry["turn"]) if entry["turn"] is not None else None
        entry["messages"] = [_message(m) for m in items]
        entry["edits"] = [e for m in entry["messages"] for e in _message_edits(m)]
        entry["prompt_tokens"] = _total(m["prompt_tokens"] for m in items)
        entry["completion_tokens"] = _total(m["completion_tokens"] for m in items)
        entry["cost_usd"] = _total(m["_cost_usd"] for m in items)
        entry["latency_ms"] = _total(m["_latency_ms"] for m in items)
        if call is not None:
            for key in ("prompt_tokens", "completion_tokens", "cost_usd"):
                if entry[key] is None:
                    entry[key] = call[key]
            entry["latency_ms"] = call["latency_ms"]
    return entries


def _total(values: Iterable[Any]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _message(row: dict[str, Any]) -> dict[str, Any]:
    message = {k: v for k, v in row.items() if not k.startswith("_") and k != "thread"}
    if message["timestamp"] is not None:
        message["timestamp"] = message["timestamp"].isoformat()
    message["tool_calls"] = [
        {
            "id": call.get("id"),
            "name": call.get("name"),
            "type": call.get("type"),
            "arguments": call.get("arguments"),
            "arguments_json": _arguments(call.get("arguments")),
        }
        for call in row["tool_calls"] or []
    ]
    return message


def _arguments(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _message_edits(message: dict[str, Any]) -> list[dict[str, Any]]:
    if message["role"] != "assistant":
        return []
    return [
        edit
        for call in message["tool_calls"]
        for edit in edits_of_call(call["name"] or "", call["arguments"], call["arguments_json"])
    ]
