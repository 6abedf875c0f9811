"""Value-model input normalisation: a trajectory in any supported shape → one `Conversation`.

Accepts canonical records and dicts, plain OpenAI chat message lists; keeps only the main thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from trajlake.schema import CanonicalTrajectory, Role

_ROLE_ALIASES: dict[str, Role] = {"developer": "system", "function": "tool"}
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


@dataclass(frozen=True)
class ChatMessage:
    """One normalised message: role, text, tool calls as (name, arguments string), tool name."""

    role: Role
    content: str
    tool_calls: tuple[tuple[str, str], ...] = ()
    name: str | None = None


@dataclass(frozen=True)
class Conversation:
    """A trajectory reduced to what a value model reads.

    Attributes:
        task: The issue / problem statement (explicit task text, else the first user message).
        messages: The main thread's messages, in order, including the system and task messages.
        final_output: The submitted patch or answer; None when absent or empty.
        task_id: The task id, when known.
        trajectory_id: The trajectory id, when known.
    """

    task: str
    messages: tuple[ChatMessage, ...]
    final_output: str | None = None
    task_id: str | None = None
    trajectory_id: str | None = None


def as_conversation(obj: Any) -> Conversation:
    """Normalise a trajectory given in any supported shape.

    Args:
        obj: A `Conversation`; a `CanonicalTrajectory`; a canonical dict (trajectory fields plus
            ``"messages"``, as read from canonical JSONL); a dict ``{"messages": [...], "task":
            ..., "final_output": ...}``; or a plain OpenAI chat message list. Tool calls may be
            OpenAI-nested (``{"function": {"name", "arguments"}}``) or flat (``{name,
            arguments}``); content may be a string or a list of ``{"type": "text"}`` parts.
            Only the main thread is kept.

    Returns:
        The conversation.

    Raises:
        TypeError: `obj` or one of its messages has none of these shapes.
        ValueError: A message has an unknown role.
    """
    if isinstance(obj, Conversation):
        return obj
    if isinstance(obj, CanonicalTrajectory):
        return _from_mapping(obj.model_dump(include=_CANONICAL_FIELDS))
    if isinstance(obj, Mapping) and isinstance(obj.get("messages"), Sequence):
        return _from_mapping(obj)
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes):
        return _from_mapping({"messages": obj})
    raise TypeError(
        "expected a Conversation, a CanonicalTrajectory, a dict with a 'messages' list or a list "
        f"of OpenAI chat messages, got {type(obj).__name__}"
    )


_MESSAGE_FIELDS = {
    *("role", "content", "parts", "tool_calls", "tool_call_id", "name", "thread"),
    "is_copied_context",
}
_CANONICAL_FIELDS: Any = {
    "task_id": True,
    "trajectory_id": True,
    "final_output": True,
    "messages": {"__all__": _MESSAGE_FIELDS},
}


def _from_mapping(data: Mapping[str, Any]) -> Conversation:
    call_names: dict[str, str] = {}
    messages, tasks = [], []
    for raw in data["messages"]:
        if not isinstance(raw, Mapping):
            raise TypeError(f"expected each message to be a dict, got {type(raw).__name__}")
        if (raw.get("thread") or "main") == "main":
            messages.append(_message(raw, call_names))
            if messages[-1].role == "user":
                # A copied demonstration is not the task (it stays in the log: turns keep the
                # lake's numbering).
                tasks.append((bool(raw.get("is_copied_context")), messages[-1].content))
    task = data.get("task")
    if not isinstance(task, str):
        task = min(tasks, key=lambda t: t[0], default=(False, ""))[1]
    final = data.get("final_output")
    return Conversation(
        task=task,
        messages=tuple(messages),
        final_output=final if isinstance(final, str) and final.strip() else None,
        task_id=_optional_str(data.get("task_id")),
        trajectory_id=_optional_str(data.get("trajectory_id")),
    )


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _message(raw: Mapping[str, Any], call_names: dict[str, str]) -> ChatMessage:
    role = raw.get("role")
    if not isinstance(role, str):
        raise TypeError(f"expected a message with a string 'role', got keys {sorted(raw)}")
    role = _ROLE_ALIASES.get(role, role)
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"unknown message role {role!r} (system, user, assistant or tool)")
    calls = []
    for call in raw.get("tool_calls") or ():
        call_id, call_name, arguments = _tool_call(call)
        if call_id is not None:
            call_names[call_id] = call_name
        calls.append((call_name, arguments))
    name = _optional_str(raw.get("name"))
    if name is None and role == "tool":
        name = call_names.get(str(raw.get("tool_call_id")))
    content = _text(raw.get("content"), raw.get("parts"))
    return ChatMessage(cast(Role, role), content, tuple(calls), name)


def _tool_call(call: Any) -> tuple[str | None, str, str]:
    if not isinstance(call, Mapping):
        raise TypeError(f"expected a tool call dict, got {type(call).__name__}")
    function = call.get("function")
    source = function if isinstance(function, Mapping) else call
    name, arguments = source.get("name"), source.get("arguments")
    if not isinstance(name, str):
        raise TypeError("expected a tool call with a string 'name' (flat or under 'function')")
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return _optional_str(call.get("id")), name, arguments


def _text(content: Any, parts: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return _join_parts(parts) if parts else ""
    if isinstance(content, Sequence):
        return _join_parts(content)
    raise TypeError(f"expected message content as a string or list of parts, got {content!r}")


def _join_parts(parts: Any) -> str:
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, Mapping):
            raise TypeError(f"expected content parts to be dicts, got {type(part).__name__}")
        elif part.get("type", "text") in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def n_turns(conv: Conversation) -> int:
    """Number of turns: assistant messages of the main thread (turn t = the t-th, 0-based)."""
    return sum(1 for m in conv.messages if m.role == "assistant")
