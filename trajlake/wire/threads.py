"""Message threads rebuilt from model calls that each resend their history.

A recorded call (the proxy's) or a chat span (an OpenTelemetry trace's) carries the whole input
it was sent. Storing each input again would grow quadratically with the rollout, so the calls of
a rollout are laid out as threads: a call whose input starts with a thread's messages so far
extends it by its new input and its output; any other (compaction, a rewritten history, a
subagent) starts a thread of its own, the messages it repeats from earlier threads flagged
`is_copied_context`. Both sources compare messages the same way (`message_key`), so a rollout
recorded live and the same rollout read from its trace become the same messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajlake.records import normalise_json_text
from trajlake.wire.values import drop_none

__all__ = ["MessageKey", "Placement", "Threads", "message_key"]

MessageKey = tuple[Any, ...]
"""What two messages must share to count as the same message (`message_key`)."""


def message_key(message: Mapping[str, Any]) -> MessageKey:
    """Role, trimmed text, tool calls (id, name, normalised arguments) and tool call id.

    Harnesses and instrumentations reformat the rest (spacing, part layout, extra fields) when
    they send a history again, so only these decide whether a message was seen before.
    """
    calls = tuple(
        (c.get("id"), c.get("name"), normalise_json_text(c.get("arguments")))
        for c in message.get("tool_calls") or ()
    )
    content = message.get("content")
    text = content.strip() if isinstance(content, str) else ""
    return (message.get("role"), text, calls, message.get("tool_call_id"))


@dataclass(frozen=True)
class Placement:
    """Where a call landed: its thread, how much of its input the thread already held, and,
    when it opened the thread, how many of its input messages an earlier thread had."""

    thread: str
    prefix: int
    opened: bool
    copied: int


@dataclass
class Threads:
    """The threads built so far: per thread the keys of its messages, and every message row.

    Rows are the messages as given plus `thread`, `timestamp` and the fields passed to `place`;
    `idx` is left to the trajectory (its position in the thread), so rows may still be inserted
    (tool results a trace reports apart from its calls) before the record is validated.
    """

    keys: dict[str, list[MessageKey]] = field(default_factory=dict)
    seen: set[MessageKey] = field(default_factory=set)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def match(self, keys: Sequence[MessageKey]) -> tuple[str, int] | None:
        """The thread an input with these keys extends: the longest whose messages it starts
        with (ties: the latest); (thread, its length), or None."""
        best: tuple[str, int] | None = None
        for name in reversed(list(self.keys)):
            thread = self.keys[name]
            if list(keys[: len(thread)]) == thread and (best is None or len(thread) > best[1]):
                best = (name, len(thread))
        return best

    def place(
        self,
        inputs: Sequence[Mapping[str, Any]],
        outputs: Sequence[Mapping[str, Any]],
        *,
        input_fields: Mapping[str, Any],
        output_fields: Mapping[str, Any],
        last_output_fields: Mapping[str, Any],
        call_id: str | None = None,
    ) -> Placement:
        """Append a call's new input and its output to the thread it extends (or a new one).

        Args:
            inputs: The messages the call was sent, history included.
            outputs: The messages it produced.
            input_fields: Fields of each new input message (e.g. its `timestamp`).
            output_fields: Fields of each output message (model, finish reason, end time).
            last_output_fields: Fields of the last output message only (usage, token ids):
                a call's usage is counted once.
            call_id: Recorded in each output message's `attrs.call_id` (joins it to `calls`).

        Returns:
            The thread, the length of the history it already held, whether the call opened
            it, and how many of its input messages an earlier thread already had.
        """
        keys = [message_key(m) for m in inputs]
        found = self.match(keys)
        copied = 0
        if found is None:
            name, prefix = ("main" if not self.keys else f"t{len(self.keys)}"), 0
            self.keys[name] = []
            copied = sum(1 for k in keys if k in self.seen)
        else:
            name, prefix = found
        for message, key in zip(inputs[prefix:], keys[prefix:], strict=True):
            extra = {**input_fields, "is_copied_context": found is None and key in self.seen}
            self._append(name, message, key, extra, None)
        for i, message in enumerate(outputs):
            extra = {**output_fields, **(last_output_fields if i == len(outputs) - 1 else {})}
            self._append(name, message, message_key(message), extra, call_id)
        return Placement(name, prefix, found is None, copied)

    def _append(
        self,
        thread: str,
        message: Mapping[str, Any],
        key: MessageKey,
        extra: Mapping[str, Any],
        call_id: str | None,
    ) -> None:
        row = {**message, **drop_none(dict(extra)), "thread": thread}
        if call_id is not None:
            row["attrs"] = {**(message.get("attrs") or {}), "call_id": call_id}
        self.messages.append(row)
        self.keys[thread].append(key)
        self.seen.add(key)
