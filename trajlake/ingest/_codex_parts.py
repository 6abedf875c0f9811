"""Codex rollout lines → message dicts: the state machine behind `codex` (see its docstring).

A Codex rollout marks where one model call ends only implicitly (the next input, a token count), so
`Rollout` keeps the open assistant message and joins its pieces when the call closes. Kept apart
from `codex.py`, which owns detection and the trajectory record, so each stays readable on its own.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from trajlake.wire.parts import image_part
from trajlake.wire.values import as_int as _int

_CALLS = {
    "function_call": "function",
    "custom_tool_call": "custom",
    "local_shell_call": "local_shell",
}
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
_EXIT = re.compile(r"(?:Process exited with code|Exit code:)\s*(-?\d+)")
_ROLES = {"user": "user", "assistant": "assistant", "developer": "system", "system": "system"}


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _content(parts: object) -> tuple[str | None, list[dict[str, Any]] | None]:
    """Text of Responses content parts, and the parts when there are images."""
    if isinstance(parts, str):
        return parts, None
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for part in parts if isinstance(parts, list) else ():
        part = _dict(part)
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            images.append(image_part(part["image_url"]))
    text = "\n".join(texts) if texts else None
    if not images:
        return text, None
    return text, ([{"type": "text", "text": text}] if text else []) + images


def _tool_result(value: object) -> tuple[str | None, int | None]:
    """Text and exit code of a tool output (a string, JSON with metadata, or content parts)."""
    if isinstance(value, list):
        return _content(value)[0], None
    if not isinstance(value, str):
        return (None if value is None else json.dumps(value, ensure_ascii=False)), None
    exit_code = None
    if value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        exit_code = _int(_dict(_dict(parsed).get("metadata")).get("exit_code"))
    # Only the head is searched: a huge output costs no more than a small one.
    if exit_code is None and (match := _EXIT.search(value[:4000])) is not None:
        exit_code = int(match.group(1))
    return value, exit_code


class Rollout:
    """State of one rollout while its lines are read in order."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.thread = "main"
        self.compactions = 0
        self.meta: dict[str, Any] = {}
        self.models: Counter[str] = Counter()
        self.context: dict[str, Any] = {}
        self.other: Counter[str] = Counter()
        self.total: dict[str, Any] | None = None
        self.final_output: str | None = None
        self.last_event: str | None = None
        self.turn_id: str | None = None
        # The assistant message of the model call in progress; its texts and reasoning arrive
        # as separate items and are joined when the call closes (`_pieces`, keyed by id()).
        self._open: dict[str, Any] | None = None
        self._pieces: dict[int, tuple[list[str], list[str]]] = {}
        # Assistant messages since the last token count: a count's `last_token_usage` belongs
        # to a message only when exactly one was written in between.
        self._since_count: list[dict[str, Any]] = []
        self._names: dict[str, str] = {}
        # A `compacted` line and a `context_compacted` event can announce the same compaction;
        # this keeps the pair from opening two threads.
        self._just_compacted = False

    def item(self, payload: dict[str, Any], stamp: Any, copied: bool = False) -> None:
        """One Responses item (from the stream or from a replacement history)."""
        kind = payload.get("type")
        if kind == "message":
            self._message(payload, stamp, copied)
        elif kind == "reasoning":
            message = self._output(stamp, copied)
            summary = [_dict(s).get("text") for s in payload.get("summary") or ()]
            raw = [_dict(c).get("text") for c in payload.get("content") or ()]
            self._pieces[id(message)][1].extend(
                t for t in summary + raw if isinstance(t, str) and t
            )
            if payload.get("encrypted_content"):
                message["attrs"]["encrypted_reasoning"] = True
        elif kind in _CALLS or kind == "web_search_call":
            self._call(kind, payload, stamp, copied)
        elif kind in _OUTPUTS:
            self._tool_output(payload, stamp, copied)
        else:
            self.other[f"response_item:{kind}"] += 1
            return
        self._just_compacted = False

    def _message(self, payload: dict[str, Any], stamp: Any, copied: bool) -> None:
        role = _ROLES.get(str(payload.get("role")), "user")
        text, parts = _content(payload.get("content"))
        if role == "assistant":
            message = self._output(stamp, copied)
            if text is not None:
                self._pieces[id(message)][0].append(text)
            if parts:
                message.setdefault("parts", []).extend(parts)
            if payload.get("phase") is not None:
                message["attrs"].setdefault("phases", []).append(payload["phase"])
            return
        self.close()
        attrs = {} if role == payload.get("role") else {"role": payload.get("role")}
        self._add(role, stamp, copied, content=text, parts=parts, attrs=attrs)

    def _call(self, kind: str, payload: dict[str, Any], stamp: Any, copied: bool) -> None:
        message = self._output(stamp, copied)
        if kind == "web_search_call":
            name, arguments, call_id = "web_search", payload.get("action"), payload.get("id")
        else:
            name = str(payload.get("name"))
            arguments = payload.get("arguments", payload.get("input", payload.get("action")))
            call_id = payload.get("call_id")
        if not isinstance(arguments, str) and arguments is not None:
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_type = _CALLS.get(kind, kind)
        call = {"id": call_id, "name": name, "arguments": arguments, "type": call_type}
        message.setdefault("tool_calls", []).append(call)
        if isinstance(call_id, str):
            self._names[call_id] = name

    def _tool_output(self, payload: dict[str, Any], stamp: Any, copied: bool) -> None:
        self.close()
        call_id = payload.get("call_id")
        text, exit_code = _tool_result(payload.get("output"))
        name = self._names.get(call_id) if isinstance(call_id, str) else None
        fields = {"content": text, "tool_call_id": call_id, "name": name, "exit_code": exit_code}
        self._add("tool", stamp, copied, **fields)

    def _output(self, stamp: Any, copied: bool) -> dict[str, Any]:
        """The assistant message of the current model call, opened on its first output item.

        Everything a model call outputs (reasoning, text, calls, hosted web searches that
        run inside the call) until the next input or token count is one message.
        """
        if self._open is not None:
            return self._open
        model = self.context.get("model")
        attrs = {"turn_id": self.turn_id} if self.turn_id else {}
        message = self._add("assistant", stamp, copied, content=None, model=model, attrs=attrs)
        self._pieces[id(message)] = ([], [])
        self._open = message
        if not copied:
            self._since_count.append(message)
        return message

    def close(self) -> None:
        """End the current assistant message (its model call is over)."""
        if self._open is not None:
            texts, thoughts = self._pieces.pop(id(self._open))
            self._open["content"] = "\n\n".join(texts) if texts else None
            self._open["reasoning"] = "\n\n".join(thoughts) if thoughts else None
        self._open = None

    def _add(self, role: str, stamp: Any, copied: bool, **fields: Any) -> dict[str, Any]:
        message = {"role": role, "thread": self.thread, "timestamp": stamp, **fields}
        message.setdefault("attrs", {})
        message["is_copied_context"] = copied
        self.messages.append(message)
        return message

    def token_count(self, info: dict[str, Any]) -> None:
        """A cumulative count: a new total closes one model call, whose usage is `last`."""
        total = _dict(info.get("total_token_usage"))
        if not total or total == self.total:
            return  # counts are repeated after each tool output
        self.total = total
        self.close()
        last = _dict(info.get("last_token_usage"))
        if len(self._since_count) == 1 and last:
            message = self._since_count[0]
            message["prompt_tokens"] = _int(last.get("input_tokens"))
            message["completion_tokens"] = _int(last.get("output_tokens"))
            message["reasoning_tokens"] = _int(last.get("reasoning_output_tokens"))
            message["cached_tokens"] = _int(last.get("cached_input_tokens"))
        self._since_count = []

    def compacted(self, payload: dict[str, Any], stamp: Any) -> None:
        """A `compacted` line: a new thread that starts with the replacement history."""
        if not (self._just_compacted and self._thread_is_empty()):
            self._new_thread()
        start = len(self.messages)
        for item in payload.get("replacement_history") or ():
            self.item(_dict(item), stamp, copied=True)
        self.close()
        if start < len(self.messages) and payload.get("message"):
            self.messages[start]["attrs"]["compaction_message"] = payload["message"]
        self._just_compacted = True

    def context_compacted(self) -> None:
        """The `context_compacted` event: the same compaction, unless a line announced it."""
        if not self._just_compacted:
            self._new_thread()
            self._just_compacted = True

    def _new_thread(self) -> None:
        self.close()
        self.compactions += 1
        self.thread = f"compacted-{self.compactions}"
        self._since_count = []

    def _thread_is_empty(self) -> bool:
        return not self.messages or self.messages[-1]["thread"] != self.thread
