"""OpenAI Responses-API items as canonical messages: one assistant message per model turn.

A Responses history is a flat list of items (`message`, `reasoning`, `function_call` and the
other `*_call` items, `*_call_output`), where chat has one assistant message holding its text
and calls. `ResponsesMessageBuilder` folds consecutive reasoning, text and calls of one turn into
one assistant message, so a Responses rollout (NeMo Gym dumps, Codex-style logs, or a call the
proxy recorded) has the same message grain as a chat one; tool outputs get the name of the call
they answer, and the item ids are kept in `attrs.item_ids`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trajlake.wire.parts import content_fields
from trajlake.wire.values import drop_none, json_text

__all__ = ["ResponsesMessageBuilder"]

_ROLES = {"developer": "system"}
_CALL_TYPES = {"custom_tool": "custom"}  # item type without `_call` → ToolCall.type


class ResponsesMessageBuilder:
    """Turns Responses items into canonical messages, one assistant message per model turn.

    Feed items in order with `add`, call `flush` where a turn must end (a request boundary),
    then `finish` for the message dicts. `messages` may be seeded (an `instructions` system
    message); `skipped` lists the item types that are no message (web search results, …).
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None
        self.names: dict[str, str] = {}
        self.skipped: list[str] = []

    def flush(self) -> None:
        """Close the open assistant message, if any."""
        if self.pending is not None:
            self.messages.append(drop_none(self.pending))
            self.pending = None

    def turn(self, *, fresh: bool, model: str | None) -> dict[str, Any]:
        """The open assistant message; `fresh` closes one that already spoke or called."""
        if fresh and self.pending and (self.pending.get("content") or self.pending["tool_calls"]):
            self.flush()
        if self.pending is None:
            self.pending = {"role": "assistant", "tool_calls": [], "model": model, "ids": []}
        return self.pending

    def add(self, item: Any, model: str | None) -> None:
        """Add one item (a bare string is a user message); `model` names who wrote outputs.

        Raises:
            TypeError: `item` is neither a string nor an object.
        """
        if isinstance(item, str):
            item = {"type": "message", "role": "user", "content": item}
        if not isinstance(item, Mapping):
            raise TypeError(f"expected a Responses item object, got {type(item).__name__}")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            self._message(item, model)
        elif kind == "reasoning":
            self._reasoning(item, model)
        elif isinstance(kind, str) and kind.endswith("_call_output"):
            self._output(item)
        elif isinstance(kind, str) and kind.endswith("_call"):
            self._call(item, kind, model)
        else:
            self.skipped.append(str(kind))

    def _message(self, item: Mapping[str, Any], model: str | None) -> None:
        content, parts, reasoning = content_fields(item.get("content"))
        role = item.get("role")
        if role == "assistant":
            turn = self.turn(fresh=True, model=model)
            turn.update(content=content, parts=parts)
            turn["reasoning"] = turn.get("reasoning") or reasoning
            turn["ids"].append(item.get("id"))
            return
        self.flush()
        mapped = _ROLES.get(role, role) if isinstance(role, str) else role
        attrs = {"role": role} if mapped != role else None
        self.messages.append(
            drop_none(
                {"role": mapped, "content": content, "parts": parts}
                | {"reasoning": reasoning, "attrs": attrs}
            )
        )

    def _reasoning(self, item: Mapping[str, Any], model: str | None) -> None:
        turn = self.turn(fresh=True, model=model)
        text = content_fields(item.get("content"))[2] or content_fields(item.get("summary"))[2]
        if text:
            turn["reasoning"] = f"{turn['reasoning']}\n{text}" if turn.get("reasoning") else text
        turn["ids"].append(item.get("id"))

    def _call(self, item: Mapping[str, Any], kind: str, model: str | None) -> None:
        call_id = item.get("call_id") or item.get("id")
        name = item.get("name") or kind.removesuffix("_call")
        arguments = item.get("arguments", item.get("input", item.get("action")))
        if isinstance(call_id, str) and isinstance(name, str):
            self.names[call_id] = name
        kind = kind.removesuffix("_call")
        call = {"id": call_id, "name": name, "arguments": json_text(arguments)}
        call["type"] = _CALL_TYPES.get(kind, kind)
        turn = self.turn(fresh=False, model=model)
        turn["tool_calls"].append(drop_none(call))
        if item.get("id") != call_id:  # `fc_…` item ids differ from the `call_…` ids
            turn["ids"].append(item.get("id"))

    def _output(self, item: Mapping[str, Any]) -> None:
        self.flush()
        output = item.get("output")
        content, parts, _ = content_fields(output if isinstance(output, (str, list)) else None)
        if content is None and parts is None and output is not None:
            content = json_text(output)
        call_id = item.get("call_id")
        self.messages.append(
            drop_none(
                {"role": "tool", "content": content, "parts": parts, "tool_call_id": call_id}
                | {"name": self.names.get(call_id) if isinstance(call_id, str) else None}
            )
        )

    def finish(self) -> list[dict[str, Any]]:
        """The canonical message dicts (the open turn closed, item ids moved to `attrs`)."""
        self.flush()
        for m in self.messages:
            if m.get("role") == "assistant":
                ids = [i for i in m.pop("ids", []) if isinstance(i, str)]
                m["attrs"] = {"item_ids": ids} if ids else None
                m["tool_calls"] = m.get("tool_calls") or None
        return [drop_none(m) for m in self.messages]
