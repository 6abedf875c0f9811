"""Trajectories held as plain dicts on the hot ingest path: the item adapters yield for them,
and the shape check that lets a mapped record skip model validation.

A line-record chat adapter maps most lines to a dict that the record types would accept
unchanged; validating it into pydantic objects and dumping them again costs more than the rest
of ingest. Such a dict travels as a `ParsedRow` and becomes Arrow rows directly (the same rows
the model path gives: `tests/ingest/test_fast_path.py` compares every column); anything else
is validated as before, so bad input is reported exactly as it always was.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, cast

from trajlake.ingest._models import finish_model_fields
from trajlake.schema import CanonicalTrajectory

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_STATUSES = frozenset({"completed", "truncated", "error", "timeout"})
# Keys a mapped chat message may hold without validation (`parts` and others need it).
_PLAIN_MESSAGE_KEYS = frozenset(
    {"role", "content", "reasoning", "tool_calls", "tool_call_id", "name", "attrs"}
)
_PLAIN_CALL_KEYS = frozenset({"id", "name", "arguments", "type"})
# Trajectory keys the chat mapping writes, with the type each must have.
_PLAIN_TRAJECTORY_TYPES: dict[str, type | tuple[type, ...]] = {
    "trajectory_id": str,
    "task_id": str,
    "policy_model": str,
    "run_id": str,
    "exit_reason": str,
    "outcome_source": str,
    "resolved": bool,
    "reward": float,
    "tools": list,
    "attrs": dict,
    "messages": list,
}


# A JSON escape of a UTF-16 surrogate: fine in a pair (an emoji), unstorable alone.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def unpaired_surrogate(raw: bytes, value: Any) -> str | None:
    """Why a parsed line cannot be stored, when an escape in it leaves half a UTF-16 pair.

    `json` decodes `"\\ud800"` to a string that no UTF-8 writer (hashing, Arrow, Parquet)
    accepts; `iter_json_lines` calls this, so the line is quarantined instead of failing its
    whole file, in every line-reading adapter. The scan for the escape is cheap; only lines
    that have one are checked in full.
    """
    if _SURROGATE_ESCAPE.search(raw) is None:
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        half = ascii(e.object[e.start : e.end])
        where = _surrogate_path(value)
        at = f" at {where}" if where else ""
        return (
            f"an escape leaves an unpaired UTF-16 surrogate ({half}){at}, which UTF-8 cannot hold"
        )
    return None


def _surrogate_path(value: Any, path: str = "") -> str | None:
    """Where in a parsed line the first text UTF-8 cannot hold sits (`messages[0].content`)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "the line"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{path}.{key}" if path else str(key)
            found = _surrogate_path(key, inner) or _surrogate_path(item, inner)
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _surrogate_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


@dataclass
class ParsedRow:
    """A trajectory read from a source as a plain canonical dict (messages as dicts)."""

    record: dict[str, Any]
    line: int | None = None
    offset: int | None = None


class RowFields:
    """Attribute access over a row dict (absent keys read as None), so the functions that
    stamp a record object serve row dicts too and both paths stay the same by construction."""

    __slots__ = ("_row",)

    def __init__(self, row: dict[str, Any]) -> None:
        object.__setattr__(self, "_row", row)

    def __getattr__(self, name: str) -> Any:
        return self._row.get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._row[name] = value


class _MessageFields(RowFields):
    """A row message read as a `Message`: the thread defaults to the main one."""

    __slots__ = ()

    @property
    def thread(self) -> str:
        return self._row.get("thread") or "main"


class _ModelFields:
    """The fields `finish_model_fields` reads and writes, over a row trajectory."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.policy_model = row.get("policy_model")
        self.attrs = row.get("attrs")
        messages = row["messages"]
        # Only messages that name a model count; a chat export's rows name none (the plain
        # shape has no `model` key), and then none need wrapping.
        named = any(m.get("model") is not None for m in messages)
        self.messages = [_MessageFields(m) for m in messages] if named else []


def finish_row_models(record: dict[str, Any]) -> None:
    """`finish_model_fields` for a row trajectory, in place (the same policy and attrs)."""
    fields = _ModelFields(record)
    finish_model_fields(cast(CanonicalTrajectory, fields))
    record["policy_model"] = fields.policy_model
    record["attrs"] = fields.attrs


def _plain_calls(calls: Any) -> bool:
    if type(calls) is not list:
        return False
    for call in calls:
        if type(call) is not dict or type(call.get("name")) is not str:
            return False
        for key, value in call.items():
            if key not in _PLAIN_CALL_KEYS or (value is not None and type(value) is not str):
                return False
    return True


def _plain_message(m: Any) -> bool:
    # One pass over the few keys a message has: role, text fields, calls and attrs.
    role = m.get("role") if type(m) is dict else None
    if type(role) is not str or role not in _ROLES:  # any JSON value may stand there
        return False
    for key, value in m.items():
        if key == "tool_calls":
            if value is not None and not _plain_calls(value):
                return False
        elif key == "attrs":
            if value is not None and type(value) is not dict:
                return False
        elif key not in _PLAIN_MESSAGE_KEYS or (
            key != "role" and value is not None and type(value) is not str
        ):
            return False
    return True


def plain_chat_record(record: dict[str, Any], *, messages_plain: bool = False) -> bool:
    """Whether a mapped chat record is one the record types accept exactly as it is.

    True only for the shapes the chat mapping writes with every value already of its
    field's type (no coercion, no content parts): such a record needs no validation.
    `messages_plain`: its messages are known to be of that shape (built by a mapping that
    only writes it), so only the trajectory's own fields are checked.
    """
    for key, value in record.items():
        kind = _PLAIN_TRAJECTORY_TYPES.get(key)
        if key == "status":
            if value not in _STATUSES:
                return False
        elif kind is None or type(value) is not kind:
            return False
    tools = record.get("tools")
    if tools is not None and not all(type(t) is dict for t in tools):
        return False
    messages = record.get("messages")
    if not isinstance(messages, list):
        return False
    return messages_plain or all(_plain_message(m) for m in messages)
