"""Claude Code records → message dicts: checking records, choosing the main line, merging.

Decisions (documented here once, used by `claude_code`):

- The records form a tree through `parentUuid`. The main line is the chain that ends at the
  last user/assistant/system record; a compaction boundary continues through
  `logicalParentUuid`, and a record whose parent is missing (or a file of several roots, as in
  hand-made fixtures) continues with the record before it. Records off that chain (abandoned
  branches after an edit or rewind) are left out and counted — except two kinds the chain skips
  by construction: further lines of an assistant message already on the chain (same
  `message.id`) and the results of its tool calls (parallel calls hang off different lines).
- Lines sharing `message.id` are one assistant message: text blocks → content (whitespace-only
  stream artefacts dropped), thinking → reasoning, tool_use → tool_calls; usage is taken once,
  from the message's last line (earlier lines carry partial output counts).
- `prompt_tokens` is the whole input: `input_tokens + cache_creation_input_tokens +
  cache_read_input_tokens` (Anthropic reports them apart); `cached_tokens` is the cache read.
- A failed Bash result starts `Exit code N`: that is its `exit_code`. Successful results state
  none, so none is inferred.
- `isMeta` user records (injected skill text, reminders, caveats) are kept as user messages with
  `attrs.is_meta`: the model saw them. A compaction summary is a user message with
  `attrs.is_compact_summary`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trajlake.ingest._adapter import BadRecord, bounded
from trajlake.wire.anthropic import text_and_parts
from trajlake.wire.values import parse_time

MESSAGE_TYPES = frozenset({"user", "assistant"})
_LEAF_TYPES = frozenset({"user", "assistant", "system"})
_ATTR_TEXT_LIMIT = 200
_EXIT_LINE = re.compile(r"Exit code (-?\d+)\b")


@dataclass
class Rec:
    """A checked record: its line, byte offset and object."""

    line: int
    offset: int
    obj: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.obj["type"])

    @property
    def uuid(self) -> str | None:
        value = self.obj.get("uuid")
        return value if isinstance(value, str) else None

    @property
    def message(self) -> dict[str, Any]:
        return self.obj["message"] if self.type in MESSAGE_TYPES else {}


def check(value: object, line: int, offset: int, raw: bytes) -> Rec | BadRecord:
    """The record, or why it is malformed (not an object, no type, no message content)."""
    kept, size = bounded(raw)
    where: dict[str, Any] = {"line": line, "offset": offset, "raw": kept, "raw_size": size}
    if not isinstance(value, dict):
        return BadRecord(f"expected a JSON object, got {type(value).__name__}", **where)
    if not isinstance(value.get("type"), str):
        return BadRecord("record has no `type`", field="type", **where)
    if value["type"] in MESSAGE_TYPES:
        message = value.get("message")
        if not isinstance(message, dict):
            return BadRecord("`message` is not an object", field="message", **where)
        content = message.get("content")
        if not isinstance(content, str | list):
            return BadRecord("`message.content` is missing", field="message.content", **where)
        for i, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                error = f"content block {i} is a {type(block).__name__}, not an object"
                return BadRecord(error, field=f"message.content.{i}", **where)
    return Rec(line, offset, value)


def main_line(records: Sequence[Rec]) -> tuple[list[Rec], int]:
    """The records of the main line in file order, and how many messages were left off it."""
    chain = [r for r in records if r.uuid is not None or r.type in MESSAGE_TYPES]
    leaves = [i for i, r in enumerate(chain) if r.type in _LEAF_TYPES]
    if not leaves:
        return [], 0
    positions: dict[str, list[int]] = {}
    for i, r in enumerate(chain):
        if r.uuid is not None:
            positions.setdefault(r.uuid, []).append(i)
    on_chain: set[int] = set()
    at: int | None = leaves[-1]
    while at is not None and at not in on_chain:
        on_chain.add(at)
        obj = chain[at].obj
        parent = obj.get("parentUuid") or obj.get("logicalParentUuid")
        before = [j for j in positions.get(parent, ()) if j < at] if isinstance(parent, str) else []
        at = before[-1] if before else (at - 1 if at > 0 else None)
    ids = {_message_id(chain[i]) for i in on_chain if chain[i].type == "assistant"}
    ids.discard(None)
    kept = {i for i, r in enumerate(chain) if i in on_chain or _message_id(r) in ids}
    calls = {c for i in kept for c in _tool_use_ids(chain[i])}
    kept |= {i for i, r in enumerate(chain) if _answers_only(r, calls)}
    dropped = sum(1 for i, r in enumerate(chain) if i not in kept and r.type in MESSAGE_TYPES)
    return [chain[i] for i in sorted(kept)], dropped


def _message_id(rec: Rec) -> str | None:
    if rec.type != "assistant":
        return None
    value = rec.message.get("id")
    return value if isinstance(value, str) else rec.uuid


def _blocks(rec: Rec) -> list[dict[str, Any]]:
    content = rec.message.get("content")
    return content if isinstance(content, list) else []


def _tool_use_ids(rec: Rec) -> list[str]:
    if rec.type != "assistant":
        return []
    return [b["id"] for b in _blocks(rec) if "tool_use" in str(b.get("type")) and "id" in b]


def _answers_only(rec: Rec, calls: set[str]) -> bool:
    blocks = _blocks(rec)
    return (
        rec.type == "user"
        and bool(blocks)
        and all(b.get("type") == "tool_result" and b.get("tool_use_id") in calls for b in blocks)
    )


def small_scalars(values: Mapping[str, Any]) -> dict[str, Any]:
    """Scalar fields of a vendor dict worth keeping in attrs (long text is left out)."""
    kept: dict[str, Any] = {}
    for key, value in values.items():
        short_text = isinstance(value, str) and len(value) <= _ATTR_TEXT_LIMIT
        if short_text or isinstance(value, bool | int | float):
            kept[key] = value
    return kept


def _exit_code(tool: str | None, text: str | None, failed: bool) -> int | None:
    """A failed Bash result's exit code: Claude Code starts its text with `Exit code N`.
    Successful results state no code (and background commands have none), so none is set."""
    match = _EXIT_LINE.match(text or "") if failed and tool == "Bash" else None
    return int(match.group(1)) if match else None


def _usage(message: dict[str, Any], out: dict[str, Any]) -> None:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return
    counts = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
    fresh = counts.get("input_tokens")
    write, read = counts.get("cache_creation_input_tokens"), counts.get("cache_read_input_tokens")
    out["prompt_tokens"] = None if fresh is None else fresh + (write or 0) + (read or 0)
    out["completion_tokens"] = counts.get("output_tokens")
    out["cached_tokens"] = read
    out["attrs"]["input_tokens"] = fresh
    out["attrs"]["cache_creation_input_tokens"] = write


class Converter:
    """Turns the records of one thread, in order, into message dicts."""

    def __init__(self, thread: str) -> None:
        self.thread = thread
        self.messages: list[dict[str, Any]] = []
        self._assistant: dict[str, dict[str, Any]] = {}
        self._parts: dict[int, dict[str, list[str]]] = {}
        self._tool_names: dict[str, str] = {}

    def add(self, rec: Rec) -> None:
        """Add a user or assistant record (other record types are not messages)."""
        if rec.type == "assistant":
            self._add_assistant(rec)
        elif rec.type == "user":
            self._add_user(rec)

    def finish(self) -> list[dict[str, Any]]:
        """The message dicts, with the merged text and reasoning of each assistant message."""
        for message in self.messages:
            parts = self._parts.get(id(message))
            if parts is None:
                continue
            texts = [t for t in parts["text"] if t.strip()]
            thoughts = [t for t in parts["thinking"] if t.strip()]
            message["content"] = "\n\n".join(texts) if texts else None
            message["reasoning"] = "\n\n".join(thoughts) if thoughts else None
        return self.messages

    def _new(self, role: str, rec: Rec, **fields: Any) -> dict[str, Any]:
        attrs = {"uuid": rec.uuid}
        message: dict[str, Any] = {
            "role": role,
            "thread": self.thread,
            "timestamp": parse_time(rec.obj.get("timestamp")),
        }
        message.update(fields)
        message["attrs"] = {**attrs, **fields.get("attrs", {})}
        self.messages.append(message)
        return message

    def _add_assistant(self, rec: Rec) -> None:
        body = rec.message
        key = _message_id(rec) or f"line:{rec.line}"
        message = self._assistant.get(key)
        if message is None:
            attrs = {"message_id": body.get("id"), "request_id": rec.obj.get("requestId")}
            if rec.obj.get("isApiErrorMessage"):
                attrs["is_api_error"] = True
            message = self._new("assistant", rec, model=body.get("model"), attrs=attrs)
            self._assistant[key] = message
            self._parts[id(message)] = {"text": [], "thinking": []}
        parts = self._parts[id(message)]
        if isinstance(body.get("content"), str):  # plain-text content (old transcripts)
            parts["text"].append(body["content"])
        for block in _blocks(rec):
            kind = block.get("type")
            if kind == "text":
                parts["text"].append(str(block.get("text", "")))
            elif kind == "thinking":
                parts["thinking"].append(str(block.get("thinking", "")))
            elif kind in ("tool_use", "server_tool_use"):
                call = {
                    "id": block.get("id"),
                    "name": str(block.get("name")),
                    "arguments": json.dumps(block.get("input"), ensure_ascii=False),
                    "type": kind,
                }
                message.setdefault("tool_calls", []).append(call)
                if isinstance(block.get("id"), str):
                    self._tool_names[block["id"]] = call["name"]
            else:
                skipped = message["attrs"].setdefault("other_blocks", {})
                skipped[str(kind)] = skipped.get(str(kind), 0) + 1
        if isinstance(body.get("stop_reason"), str):
            message["finish_reason"] = body["stop_reason"]
        _usage(body, message)  # the last line of a message carries its final usage

    def _add_user(self, rec: Rec) -> None:
        content = rec.message.get("content")
        flags: dict[str, Any] = {}
        for source, name in (("isMeta", "is_meta"), ("isCompactSummary", "is_compact_summary")):
            if rec.obj.get(source):
                flags[name] = True
        if isinstance(content, str):
            self._new("user", rec, content=content, attrs=flags)
            return
        others: list[dict[str, Any]] = []
        for block in _blocks(rec):
            if block.get("type") != "tool_result":
                others.append(block)
                continue
            text, parts = text_and_parts(block.get("content"))
            call_id = block.get("tool_use_id")
            attrs = dict(flags)
            result = rec.obj.get("toolUseResult")
            if isinstance(result, dict):
                attrs["tool_use_result"] = small_scalars(result)
            elif isinstance(result, str) and len(result) <= _ATTR_TEXT_LIMIT:
                attrs["tool_use_result"] = result
            is_error = block.get("is_error")
            tool = self._tool_names.get(call_id) if isinstance(call_id, str) else None
            self._new(
                "tool",
                rec,
                content=text,
                parts=parts,
                tool_call_id=call_id,
                name=tool,
                is_error=is_error if isinstance(is_error, bool) else None,
                exit_code=_exit_code(tool, text, is_error is True),
                attrs=attrs,
            )
        if others:
            text, parts = text_and_parts(others)
            self._new("user", rec, content=text, parts=parts, attrs=flags)
