"""OpenAI chat-completions messages as canonical message dicts.

One mapping, used by every chat-shaped log adapter and by the proxy for the `chat` dialect, so a
conversation read from a dump and the same conversation recorded live become the same rows:
`developer` is `system`, the legacy `function` role and `function_call` are a tool and a tool
call, reasoning comes from whichever key a server used (`reasoning_content`, `reasoning`,
`thinking` or reasoning parts), and keys without a column are kept in `attrs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trajlake.wire.parts import content_fields
from trajlake.wire.values import drop_none, json_text

__all__ = ["chat_message", "chat_tool_call", "name_tool_results"]

_ROLES = {"developer": "system", "function": "tool"}
_MESSAGE_KEYS = frozenset(
    {"role", "content", "reasoning_content", "reasoning", "thinking", "tool_calls"}
    | {"function_call", "tool_call_id", "name"}
)


def _reasoning_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):  # {"content": ...} / {"summary": [...]} shapes
        for key in ("content", "text", "summary"):
            inner = value.get(key)
            if isinstance(inner, str):
                return inner
            if isinstance(inner, list):
                return content_fields(inner)[0] or content_fields(inner)[2]
    return None


def chat_tool_call(call: Any) -> dict[str, Any]:
    """An OpenAI `{id, type, function: {name, arguments}}` call as a ToolCall dict."""
    if not isinstance(call, Mapping):
        return {"name": None}
    function = call.get("function")
    if isinstance(function, Mapping):
        name, arguments = function.get("name"), function.get("arguments")
    else:  # already flat: {id, name, arguments}
        name, arguments = call.get("name"), call.get("arguments")
    return drop_none(
        {
            "id": call.get("id"),
            "name": name,
            "arguments": json_text(arguments),
            "type": call.get("type"),
        }
    )


# The keys of most chat messages: with text content these map without the general walk.
_PLAIN_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def _plain_chat_message(message: dict[str, Any], content: str | None) -> dict[str, Any]:
    """`chat_message` for a message of `_PLAIN_KEYS` with text (or no) content: the same
    dict, built without the part and reasoning walk (most messages of a chat dump)."""
    raw_role = message.get("role")
    role = _ROLES.get(raw_role, raw_role) if isinstance(raw_role, str) else raw_role
    out: dict[str, Any] = {"role": role} if role is not None else {}
    if content is not None:
        out["content"] = content
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [chat_tool_call(c) for c in calls]
    call_id = message.get("tool_call_id")
    if call_id is not None:
        out["tool_call_id"] = call_id
    name = message.get("name")
    if isinstance(name, str):
        out["name"] = name
    if role != raw_role:
        out["attrs"] = {"role": raw_role}
    return out


def chat_message(message: Any) -> dict[str, Any]:
    """One OpenAI chat-completions message as a canonical message dict (no ids).

    `developer` becomes `system` and the legacy `function` role becomes `tool`; the original
    role and any keys without a column are kept in `attrs`.
    """
    if not isinstance(message, Mapping):
        return {"role": None, "attrs": {"value": message}}
    if type(message) is dict and message.keys() <= _PLAIN_KEYS:
        content = message.get("content")
        if content is None or type(content) is str:
            return _plain_chat_message(message, content)
    raw_role = message.get("role")
    role = _ROLES.get(raw_role, raw_role) if isinstance(raw_role, str) else raw_role
    content, parts, part_reasoning = content_fields(message.get("content"))
    reasoning = (
        _reasoning_text(message.get("reasoning_content"))
        or _reasoning_text(message.get("reasoning"))
        or _reasoning_text(message.get("thinking"))
        or part_reasoning
    )
    calls = [chat_tool_call(c) for c in message.get("tool_calls") or ()]
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        calls.append(chat_tool_call(legacy))
    attrs = {k: v for k, v in message.items() if k not in _MESSAGE_KEYS and v is not None}
    if role != raw_role:
        attrs["role"] = raw_role
    name = message.get("name")
    return drop_none(
        {
            "role": role,
            "content": content,
            "parts": parts,
            "reasoning": reasoning,
            "tool_calls": calls or None,
            "tool_call_id": message.get("tool_call_id"),
            "name": name if isinstance(name, str) else None,
            "attrs": attrs or None,
        }
    )


def name_tool_results(messages: list[dict[str, Any]]) -> None:
    """Give tool results without a name the name of the call they answer (by call id)."""
    names: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or ():
            if isinstance(call.get("id"), str) and isinstance(call.get("name"), str):
                names[call["id"]] = call["name"]
        call_id = m.get("tool_call_id")
        if (
            m.get("role") == "tool"
            and "name" not in m
            and isinstance(call_id, str)
            and call_id in names
        ):
            m["name"] = names[call_id]
