"""Records ↔ Arrow tables, and the derived fields every stored trajectory carries.

`normalize` fills what can be computed from a trajectory's own messages (turns, rollups,
content hash, a deterministic id) without inventing anything the source did not say.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pydantic_core import PydanticUndefined

from trajlake._arrow_types import dump_json
from trajlake.schema import (
    RECORD_TYPES,
    SORT_KEYS,
    CanonicalTrajectory,
    Message,
    Trajectory,
    json_columns,
    table_schema,
)

_TRAJECTORY_FIELDS = tuple(Trajectory.model_fields)


def content_hash(messages: Sequence[Message]) -> str:
    """sha256 over the normalised conversation: the same rollout from two sources hashes alike.

    Only what the model saw and said counts (thread, role, content, reasoning, tool calls and
    results); ids, timestamps and token counts differ between harnesses and are left out.
    """
    digest = hashlib.sha256()
    for m in messages:
        calls = [(c.name, normalise_json_text(c.arguments)) for c in m.tool_calls or ()]
        item = [m.thread, m.role, (m.content or "").strip(), (m.reasoning or "").strip(), calls]
        digest.update(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def normalise_json_text(text: str | None) -> str:
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text.strip()


def assign_turns(messages: Sequence[Message]) -> None:
    """Set `turn` where missing: the t-th assistant message of a thread and what follows it.

    Messages before a thread's first assistant message (system prompt, task) have no turn.
    """
    counters: dict[str, int] = {}
    for m in messages:
        if m.role == "assistant":
            counters[m.thread] = counters.get(m.thread, -1) + 1
        if m.turn is None and m.thread in counters:
            m.turn = counters[m.thread]


def _renumber_if_ambiguous(messages: Sequence[Message]) -> None:
    """Give messages their position in the thread when (thread, idx) would repeat.

    Keys must be unique (duplicates would be dropped as already stored); messages arrive in
    order, so their position is the truthful index when the source's own numbering clashes.
    """
    keys = [(m.thread, m.idx) for m in messages]
    if len(set(keys)) == len(keys):
        return
    positions: dict[str, int] = {}
    for m in messages:
        m.idx = positions.get(m.thread, 0)
        positions[m.thread] = m.idx + 1


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def normalize(record: CanonicalTrajectory) -> CanonicalTrajectory:
    """Fill derived fields in place (turns, rollups, content hash, id) and return the record."""
    messages = record.messages
    _renumber_if_ambiguous(messages)
    assign_turns(messages)
    if record.content_hash is None:
        record.content_hash = content_hash(messages)
    if not record.trajectory_id:
        record.trajectory_id = "h-" + record.content_hash[:32]
    for m in messages:
        m.trajectory_id = record.trajectory_id
    if record.n_messages is None:
        record.n_messages = len(messages)
    if record.n_turns is None:
        record.n_turns = sum(1 for m in messages if m.role == "assistant" and m.thread == "main")
    if record.n_tool_calls is None:
        record.n_tool_calls = sum(len(m.tool_calls or ()) for m in messages)
    assistant = [m for m in messages if m.role == "assistant"]
    if record.prompt_tokens is None:
        record.prompt_tokens = _sum_or_none(m.prompt_tokens for m in assistant)
    if record.completion_tokens is None:
        record.completion_tokens = _sum_or_none(m.completion_tokens for m in assistant)
    if record.cached_tokens is None:
        record.cached_tokens = _sum_or_none(m.cached_tokens for m in assistant)
    if record.reasoning_tokens is None:
        record.reasoning_tokens = _sum_or_none(m.reasoning_tokens for m in assistant)
    if record.total_tokens is None and record.prompt_tokens is not None:
        record.total_tokens = record.prompt_tokens + (record.completion_tokens or 0)
    return record


@functools.cache
def _defaults(table: str) -> dict[str, Any]:
    fields = RECORD_TYPES[table].model_fields
    return {
        name: info.default
        for name, info in fields.items()
        if info.default is not PydanticUndefined and info.default is not None
    }


def rows_for_table(table: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build one table's Arrow data from plain row dicts (JSON columns still as objects).

    Missing keys take the record type's defaults, so a row dict means what the record would.
    """
    schema = table_schema(table)
    json_cols = json_columns(table)
    defaults = _defaults(table)
    rows = [{**defaults, **r, **{c: dump_json(r.get(c)) for c in json_cols}} for r in rows]
    data = pa.Table.from_pylist(list(rows), schema=schema)
    sort_keys = SORT_KEYS.get(table)
    if sort_keys and data.num_rows > 1:
        data = data.sort_by([(k, "ascending") for k in sort_keys])
    return data


def records_to_table(table: str, records: Sequence[Any]) -> pa.Table:
    """Build one table's Arrow data from record models of that table."""
    return rows_for_table(table, [r.model_dump() for r in records])


def trajectories_to_tables(records: Sequence[CanonicalTrajectory]) -> dict[str, pa.Table]:
    """Arrow data for `trajectories` and `messages` from canonical records (normalised first)."""
    traj_rows: list[dict[str, Any]] = []
    message_rows: list[dict[str, Any]] = []
    for record in records:
        normalize(record)
        traj_rows.append(record.model_dump(exclude={"messages"}))
        message_rows.extend(m.model_dump() for m in record.messages)
    return {
        "trajectories": rows_for_table("trajectories", traj_rows),
        "messages": rows_for_table("messages", message_rows),
    }


def table_to_rows(table: str, data: pa.Table) -> list[dict[str, Any]]:
    """Plain row dicts from one table's Arrow data, JSON columns parsed, maps as dicts."""
    json_cols = json_columns(table)
    map_cols = [f.name for f in data.schema if pa.types.is_map(f.type)]
    rows: list[dict[str, Any]] = data.to_pylist()
    for row in rows:
        for c in json_cols:
            if row.get(c) is not None:
                row[c] = json.loads(row[c])
        for c in map_cols:
            if row.get(c) is not None:
                row[c] = dict(row[c])
    return rows


def assemble_canonical(
    trajectory_rows: Sequence[Mapping[str, Any]], message_rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Join trajectory rows with their message rows into canonical JSONL objects, in order."""
    by_trajectory: dict[str, list[dict[str, Any]]] = {}
    for m in message_rows:
        entry = {k: v for k, v in m.items() if k != "trajectory_id"}
        by_trajectory.setdefault(m["trajectory_id"], []).append(entry)
    out = []
    for t in trajectory_rows:
        obj = {k: t[k] for k in _TRAJECTORY_FIELDS if k in t}
        obj["messages"] = by_trajectory.get(t["trajectory_id"], [])
        out.append(obj)
    return out
