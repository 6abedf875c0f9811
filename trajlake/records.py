"""Records ↔ Arrow tables, and the derived fields every stored trajectory carries.

`normalize` fills what can be computed from a trajectory's own messages (turns, rollups,
content hash, a deterministic id) without inventing anything the source did not say.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
from pydantic_core import PydanticUndefined

from trajlake._arrow_types import dump_json
from trajlake.errors import InvalidRecord
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
    return _hash_items(
        (
            m.thread,
            m.role,
            m.content,
            m.reasoning,
            [(c.name, c.arguments) for c in m.tool_calls] if m.tool_calls else (),
        )
        for m in messages
    )


def _hash_items(items: Iterable[tuple[Any, Any, Any, Any, Any]]) -> str:
    """The hash of (thread, role, content, reasoning, [(tool name, arguments)]) per message.

    Each message is hashed as the compact JSON list `[thread, role, content, reasoning,
    [[name, arguments], ...]]` with content and reasoning trimmed and arguments normalised,
    one line each (`_item_json`).
    """
    digest = hashlib.sha256()
    for thread, role, content, reasoning, calls in items:
        item = [
            thread,
            role,
            (content or "").strip(),
            (reasoning or "").strip(),
            [(name, normalise_json_text(arguments)) for name, arguments in calls],
        ]
        digest.update(_item_json(item))
        digest.update(b"\n")
    return digest.hexdigest()


def _item_json(item: list[Any]) -> bytes:
    """The compact JSON bytes of one message's hash item.

    orjson writes exactly what `json.dumps(ensure_ascii=False, separators=(",", ":"))` writes
    for strings and lists, at a fraction of the cost. Text holding a lone UTF-16 surrogate (what
    `json` makes of a `"\\ud800"` escape) is refused by orjson and by UTF-8 alike; it is written
    by `json` with `surrogatepass`, which is deterministic, leaves every other hash as it was,
    and collides with no valid text (no UTF-8 string encodes to a surrogate's bytes).
    """
    try:
        return orjson.dumps(item)
    except orjson.JSONEncodeError:
        return _COMPACT_ENCODER.encode(item).encode("utf-8", "surrogatepass")


# Built once: `json.dumps` with non-default options builds a new encoder on every call.
_SORTED_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_COMPACT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


# A digit before `.`/`e`: a float (or a string holding one), where orjson's number format
# differs from `json`'s (`1e-05`, `1e+16`) and integers past 64 bits come back as floats.
_FLOAT_LIKE = re.compile(rb"[0-9][.eE]")


def normalise_json_text(text: str | None) -> str:
    """JSON text with sorted keys and no spacing (ASCII-escaped); other text trimmed.

    orjson gives the same text as `json.dumps(..., sort_keys=True, separators=(",", ":"))`
    whenever its output is ASCII without floats; anything else takes the `json` round trip.
    """
    if not text:
        return ""
    try:
        fast = orjson.dumps(orjson.loads(text), option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    else:
        if fast.isascii() and not _FLOAT_LIKE.search(fast):
            return fast.decode()
    try:
        return _SORTED_ENCODER.encode(json.loads(text))
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


def normalize_row(record: dict[str, Any]) -> dict[str, Any]:
    """`normalize` for a canonical record held as plain dicts (messages included), in place.

    The hot ingest path builds no pydantic objects; this gives its rows exactly what
    `normalize` gives a record: message keys (position in the thread where `idx` is missing),
    turns, rollups, content hash and id. Absent keys mean the field's default.
    """
    messages: list[dict[str, Any]] = record["messages"]
    n_turns, n_tool_calls, assistant = _row_keys_and_turns(messages)
    if record.get("content_hash") is None:
        record["content_hash"] = _row_hash(messages)
    if not record.get("trajectory_id"):
        record["trajectory_id"] = "h-" + record["content_hash"][:32]
    trajectory_id = record["trajectory_id"]
    for m in messages:
        m["trajectory_id"] = trajectory_id
    _fill(record, "n_messages", len(messages))
    _fill(record, "n_turns", n_turns)
    _fill(record, "n_tool_calls", n_tool_calls)
    # Most sources give no token counts per message: one look at the keys settles all four.
    counted = set().union(*assistant)
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"):
        if record.get(name) is None:
            record[name] = _sum_or_none(m.get(name) for m in assistant) if name in counted else None
    if record.get("total_tokens") is None and record.get("prompt_tokens") is not None:
        record["total_tokens"] = record["prompt_tokens"] + (record.get("completion_tokens") or 0)
    return record


def _row_keys_and_turns(
    messages: list[dict[str, Any]],
) -> tuple[int, int, list[dict[str, Any]]]:
    """Thread and idx (renumbered if keys repeat) and turns of row messages, in one pass.

    Returns the main thread's assistant turns, the tool calls and the assistant messages.
    """
    positions: dict[str, int] = {}
    counters: dict[str, int] = {}
    keys = set()
    assistant = []
    n_turns = n_tool_calls = 0
    for m in messages:
        thread = m.setdefault("thread", "main")
        key = thread or "main"  # as `CanonicalTrajectory` counts positions
        position = positions.get(key, 0)
        positions[key] = position + 1
        keys.add((thread, m.setdefault("idx", position)))
        calls = m.get("tool_calls")
        if calls:
            n_tool_calls += len(calls)
        if m["role"] == "assistant":
            assistant.append(m)
            counters[thread] = counters.get(thread, -1) + 1
            n_turns += thread == "main"
        if m.get("turn") is None and thread in counters:
            m["turn"] = counters[thread]
    if len(keys) != len(messages):
        positions = {}
        for m in messages:
            m["idx"] = positions.get(m["thread"], 0)
            positions[m["thread"]] = m["idx"] + 1
    return n_turns, n_tool_calls, assistant


def _row_hash(messages: list[dict[str, Any]]) -> str:
    """`content_hash` of row messages (the `_hash_items` definition, inlined for speed)."""
    digest = hashlib.sha256()
    for m in messages:
        calls = m.get("tool_calls")
        item = [
            m["thread"],
            m["role"],
            (m.get("content") or "").strip(),
            (m.get("reasoning") or "").strip(),
            [(c["name"], normalise_json_text(c.get("arguments"))) for c in calls] if calls else [],
        ]
        digest.update(_item_json(item))
        digest.update(b"\n")
    return digest.hexdigest()


def _fill(record: dict[str, Any], name: str, value: Any) -> None:
    if record.get(name) is None:
        record[name] = value


def record_rows(record: CanonicalTrajectory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The `trajectories` row and `messages` rows of a record (normalised first)."""
    normalize(record)
    return record.model_dump(exclude={"messages"}), [m.model_dump() for m in record.messages]


def dict_rows(record: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`record_rows` for a record held as plain dicts (normalised first; consumes `record`)."""
    normalize_row(record)
    messages = record.pop("messages")
    return record, messages


def rows_to_tables(
    trajectory_rows: Sequence[Mapping[str, Any]], message_rows: Sequence[Mapping[str, Any]]
) -> dict[str, pa.Table]:
    """Arrow data for `trajectories` and `messages` from their row dicts."""
    return {
        "trajectories": rows_for_table("trajectories", trajectory_rows),
        "messages": rows_for_table("messages", message_rows),
    }


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
    rows = rows if isinstance(rows, list) else list(rows)
    n = len(rows)
    # Column by column: one list per column given to Arrow with its schema type. Most columns
    # are absent from every row of a source (tokens, logprobs, timestamps of a chat export):
    # those cost one constant array, not a look-up per row. A missing key takes the default,
    # a key given as None stays None, as `{**defaults, **row}` would have it.
    present: set[str] = set().union(*rows) if rows else set()
    # The plain columns (present, not JSON, no default) are converted in one call: Arrow reads
    # each row dict's keys itself, where a list per column would cost a Python look-up each.
    plain = [f for f in schema if f.name in present and f.name not in json_cols]
    plain = [f for f in plain if f.name not in defaults]
    try:
        together = pa.array(rows, type=pa.struct(plain)) if plain else None
    except (UnicodeEncodeError, TypeError, pa.ArrowException):
        together = None  # column by column below, which names the column that fails
    columns = []
    for f in schema:
        name = f.name
        default = defaults.get(name)
        try:
            if name not in present:
                constant = (
                    pa.nulls(n, f.type) if default is None else pa.array([default] * n, f.type)
                )
                columns.append(constant)
            elif name in json_cols:
                columns.append(pa.array([dump_json(r.get(name)) for r in rows], type=f.type))
            elif default is not None:
                columns.append(pa.array([r.get(name, default) for r in rows], type=f.type))
            elif together is not None:
                columns.append(together.field(name))
            else:
                columns.append(pa.array([r.get(name) for r in rows], type=f.type))
        except UnicodeEncodeError as e:
            raise _unstorable_text(table, name, rows, e) from e
    data = pa.Table.from_arrays(columns, schema=schema)
    sort_keys = SORT_KEYS.get(table)
    if sort_keys and data.num_rows > 1:
        data = data.sort_by([(k, "ascending") for k in sort_keys])
    return data


def _unstorable_text(
    table: str, name: str, rows: Sequence[Mapping[str, Any]], error: UnicodeEncodeError
) -> InvalidRecord:
    """The error for text UTF-8 cannot hold (a lone surrogate, from a `"\\ud800"` escape):
    ingest quarantines such source lines; rows given to the lake directly are refused, named."""
    bad = ascii(error.object[error.start : error.end])
    row = next((r for r in rows if bad[1:-1] in ascii(r.get(name))), {})
    where = f" of trajectory {row['trajectory_id']!r}" if row.get("trajectory_id") else ""
    return InvalidRecord(
        f"{table}.{name}{where} holds an unpaired UTF-16 surrogate ({bad}), which UTF-8 cannot "
        "hold: repair or drop that text before writing it (ingest quarantines such lines)"
    )


def records_to_table(table: str, records: Sequence[Any]) -> pa.Table:
    """Build one table's Arrow data from record models of that table."""
    return rows_for_table(table, [r.model_dump() for r in records])


def trajectories_to_tables(records: Sequence[CanonicalTrajectory]) -> dict[str, pa.Table]:
    """Arrow data for `trajectories` and `messages` from canonical records (normalised first)."""
    traj_rows: list[dict[str, Any]] = []
    message_rows: list[dict[str, Any]] = []
    for record in records:
        row, messages = record_rows(record)
        traj_rows.append(row)
        message_rows.extend(messages)
    return rows_to_tables(traj_rows, message_rows)


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
