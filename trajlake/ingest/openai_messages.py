"""OpenAI chat conversations as JSONL: `{messages, tools?, metadata?, ...}` per line.

Covers plain chat-format dumps and the Hugging Face `microsoft/Orchard` layout, whose `tools`
and `metadata` columns are JSON strings (objects are accepted too). `metadata.instance_id` or
`task_id` names the task; `verify_status` (booleans or resolved/unresolved, success/failure,
pass/fail, true/false), else `resolved`, is the verdict and `reward` the scalar reward; every
other metadata key is kept in `attrs`, so `json_extract_string(attrs, '$.rollout_id')` works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    bounded,
    iter_json_lines,
    stable_id,
    to_parsed,
)
from trajlake.ingest._jsonl_adapter import Builder, JsonLinesAdapter
from trajlake.ingest._rows import ParsedRow, plain_chat_record
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory, Message
from trajlake.wire.chat import chat_message, name_tool_results
from trajlake.wire.parts import media_part
from trajlake.wire.values import as_bool, as_number, drop_none, first_str, map_status, maybe_json

_CANONICAL_KEYS = frozenset(CanonicalTrajectory.model_fields)
# Keys only a canonical message has: their presence means the line is trajlake's own JSONL.
_CANONICAL_MESSAGE_KEYS = frozenset(Message.model_fields) - {
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning",
}
_ID_KEYS = ("rollout_id", "trajectory_id", "traj_id", "session_id", "conversation_id", "uuid", "id")
_TASK_KEYS = ("instance_id", "task_id")
_MODEL_KEYS = ("policy_model", "model", "model_name")
_VERDICT_KEYS = ("verify_status", "resolved")
_LINE_KEYS = frozenset({"messages", "tools", "metadata", "images"})


def _looks_like_chat(obj: Any) -> bool:
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        return False
    messages = obj["messages"][:50]
    return bool(messages) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    )


# An Orchard RL rollout carries its token ids beside `messages`: the `orchard-rl` adapter's.
_ORCHARD_KEYS = frozenset({"prompt_token_ids", "response_token_ids", "loss_mask"})


def _orchard_shaped(obj: dict[str, Any]) -> bool:
    return bool(_ORCHARD_KEYS & set(obj))


def _canonical_shaped(obj: dict[str, Any]) -> bool:
    """A trajlake canonical line: canonical keys with an id or provenance, and no metadata."""
    keys = set(obj)
    if "metadata" in keys:
        return False
    if keys <= _CANONICAL_KEYS and ("trajectory_id" in keys or "source_format" in keys):
        return True
    for m in obj["messages"]:
        if _CANONICAL_MESSAGE_KEYS & set(m):
            return True
        for call in m.get("tool_calls") or ():
            if isinstance(call, dict) and "name" in call and "function" not in call:
                return True
    return False


class OpenAIMessagesAdapter(JsonLinesAdapter):
    """Reads one OpenAI chat conversation per JSONL line (Orchard included)."""

    name: ClassVar[str] = "openai-messages"
    description: ClassVar[str] = (
        "*.jsonl — OpenAI chat conversations {messages, tools, metadata} per line "
        "(Hugging Face microsoft/Orchard layout included)"
    )
    line_records: ClassVar[bool] = True
    """Every line is a whole conversation: big files can be parsed in chunks."""

    def sniff_value(self, value: Any) -> float:
        """Sure when the first line is a chat conversation that is not a canonical line."""
        if not _looks_like_chat(value) or _canonical_shaped(value) or _orchard_shaped(value):
            return 0.0
        return 1.0 if "metadata" in value else 0.9

    def sniff_prefix(self, text: bytes, complete: bool) -> float:
        """A first line longer than the sniffed head: judge by how it starts."""
        starts = text.startswith((b'{"messages"', b'{"tools"', b'{"metadata"'))
        return 0.6 if starts and not complete and b'"role"' in text else 0.0

    def builder(self, source: SourceFile, stream: IO[bytes]) -> Builder:
        """Every line maps alone."""
        return _record

    def read_rows(self, source: SourceFile, stream: IO[bytes]) -> Iterator[ParsedRow | Parsed]:
        """As `read`, but lines whose mapping needs no validation come as plain `ParsedRow`s."""
        for line, offset, raw, value in iter_json_lines(stream):
            if isinstance(value, BadRecord):
                yield value
                continue
            plain = _plain_messages(value)
            try:
                record = _record(value, plain)
            except (ValueError, TypeError) as e:
                kept, size = bounded(raw)
                yield BadRecord(str(e), line, offset, None, kept, size)
                continue
            if plain_chat_record(record, messages_plain=plain is not None):
                yield ParsedRow(record, line=line, offset=offset)
            else:
                yield to_parsed(record, line=line, offset=offset, raw=raw)


def _decoded(obj: Mapping[str, Any], key: str, kind: type) -> Any:
    try:
        value = maybe_json(obj.get(key))
    except json.JSONDecodeError as e:
        raise ValueError(f"field {key!r}: not valid JSON ({e.msg})") from None
    if value is not None and not isinstance(value, kind):
        raise ValueError(f"field {key!r}: expected a JSON {kind.__name__}")
    return value


def _outcome(metadata: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """resolved / reward / outcome_source from the verdict keys (metadata first, then top level)."""
    out: dict[str, Any] = {}
    for where, holder in (("metadata", metadata), ("", top)):
        for key in _VERDICT_KEYS:
            verdict = as_bool(holder.get(key))
            if verdict is not None and "resolved" not in out:
                out["resolved"] = verdict
                out["outcome_source"] = f"{where}.{key}" if where else key
        reward = as_number(holder.get("reward"))
        if reward is not None and "reward" not in out:
            out["reward"] = reward
            out.setdefault("outcome_source", f"{where}.reward" if where else "reward")
    return out


def _attach_images(messages: list[dict[str, Any]], images: Any) -> None:
    """Top-level `images` (Orchard gui screenshots) as parts of the last user message.

    Payloads are never stored: bytes become `data-sha256:` references, paths stay paths.
    """
    if not isinstance(images, list) or not images:
        return
    parts = []
    for image in images:
        if isinstance(image, Mapping) and isinstance(image.get("bytes"), str):
            parts.append(media_part("image", {"data": image["bytes"]}))
        else:
            parts.append(media_part("image", image))
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise ValueError("field 'images': no user message to attach the images to")
    target = users[-1]
    text = target.get("content")
    prefix = [{"type": "text", "text": text}] if isinstance(text, str) else []
    target["parts"] = [*(target.get("parts") or prefix), *parts]


_PLAIN_ROLES = frozenset({"system", "user", "assistant", "tool"})
_PLAIN_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def _plain_messages(obj: Any) -> list[dict[str, Any]] | None:
    """The messages `chat_message` and `name_tool_results` make of a line, built in one pass,
    when every message has the shape most chat dumps hold and the row path stores as it is;
    None otherwise (the general mapping and the shape check then decide).

    That shape: one of the four roles, text or no content, a text `tool_call_id`, calls of
    the form `{id, type, function: {name, arguments}}` with text values, and no images to
    attach. `tests/ingest/test_plain_messages.py` holds it to the general mapping.
    """
    if type(obj) is not dict or type(obj.get("messages")) is not list:
        return None
    images = obj.get("images")
    if isinstance(images, list) and images:
        return None
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id → tool name, for the results that do not say it
    for m in obj["messages"]:
        if type(m) is not dict or not m.keys() <= _PLAIN_MESSAGE_KEYS:
            return None
        role, content, call_id = m.get("role"), m.get("content"), m.get("tool_call_id")
        if type(role) is not str or role not in _PLAIN_ROLES:
            return None
        if (content is not None and type(content) is not str) or (
            call_id is not None and type(call_id) is not str
        ):
            return None
        row: dict[str, Any] = {"role": role}
        if content is not None:
            row["content"] = content
        if calls := m.get("tool_calls"):
            mapped = _plain_calls(calls, names)
            if mapped is None:
                return None
            row["tool_calls"] = mapped
        if call_id is not None:
            row["tool_call_id"] = call_id
        name = m.get("name")
        if isinstance(name, str):
            row["name"] = name
        elif role == "tool" and call_id in names:
            row["name"] = names[call_id]
        out.append(row)
    return out


def _plain_calls(calls: Any, names: dict[str, str]) -> list[dict[str, Any]] | None:
    """`chat_tool_call` of each call of the plain shape (their names noted by id), or None."""
    if type(calls) is not list:
        return None
    mapped = []
    for call in calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is not dict:
            return None
        call_id, kind = call.get("id"), call.get("type")
        name, arguments = function.get("name"), function.get("arguments")
        if type(name) is not str or not all(
            v is None or type(v) is str for v in (call_id, kind, arguments)
        ):
            return None
        row = {"id": call_id, "name": name, "arguments": arguments, "type": kind}
        mapped.append({k: v for k, v in row.items() if v is not None})
        if call_id is not None:
            names[call_id] = name
    return mapped


def _record(obj: Any, plain: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The trajectory dict of one line (`plain`: its messages already mapped)."""
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    if not isinstance(obj.get("messages"), list):
        raise ValueError("field 'messages': expected a list of chat messages")
    metadata = _decoded(obj, "metadata", dict) or {}
    tools = _decoded(obj, "tools", list)
    if plain is not None:
        messages = plain
    else:
        messages = [chat_message(m) for m in obj["messages"]]
        name_tool_results(messages)
        _attach_images(messages, obj.get("images"))
    top = {k: v for k, v in obj.items() if k not in _LINE_KEYS}
    outcome = _outcome(metadata, top)
    task_id = first_str(metadata.get(k) for k in _TASK_KEYS) or first_str(
        top.get(k) for k in _TASK_KEYS
    )
    status_text = metadata.get("status", top.get("status"))
    # Every key is kept, mapped or not: attrs stays a faithful copy of the source's metadata.
    attrs = {**top, **metadata}
    ident = first_str(str(attrs[k]) for k in _ID_KEYS if attrs.get(k) is not None)
    if ident is not None:
        trajectory_id = stable_id("openai-messages", task_id, ident)
    else:
        # No id of its own: the content decides (formatting-independent, location-free).
        decoded = {**obj, "metadata": metadata or None, "tools": tools}
        canonical = json.dumps(decoded, sort_keys=True, ensure_ascii=False, default=str)
        trajectory_id = stable_id("openai-messages", canonical)
    return drop_none(
        {
            "trajectory_id": trajectory_id,
            "task_id": task_id,
            "policy_model": first_str(metadata.get(k) for k in _MODEL_KEYS),
            "run_id": first_str([metadata.get("run_id")]),
            "status": map_status(status_text),
            "exit_reason": status_text if isinstance(status_text, str) else None,
            **outcome,
            "tools": tools,
            "attrs": attrs or None,
            "messages": messages,
        }
    )
