"""Helpers shared by the chat-shaped adapters: OpenAI messages, content parts by reference.

Also timestamps, status words and whole-file JSON documents. Inline payloads (base64 images,
audio, files) are never stored: a part keeps `uri = "data-sha256:<hex>"` (the sha256 of the
decoded bytes) and its MIME type, so the same image read twice gets the same reference.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import IO, Any

from trajlake.ingest._adapter import BadRecord, bounded
from trajlake.schema import Status

DIGEST_SCHEME = "data-sha256:"
"""URI scheme of an inline payload kept by reference: `data-sha256:<hex of the decoded bytes>`."""

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_REASONING_PARTS = frozenset({"reasoning", "reasoning_text", "summary_text", "thinking"})
_IMAGE_PARTS = frozenset({"image", "image_url", "input_image"})
_AUDIO_PARTS = frozenset({"audio", "input_audio"})
_FILE_PARTS = frozenset({"file", "input_file", "document"})
_ROLES = {"developer": "system", "function": "tool"}
_MESSAGE_KEYS = frozenset(
    {"role", "content", "reasoning_content", "reasoning", "thinking", "tool_calls"}
    | {"function_call", "tool_call_id", "name"}
)
_STATUS_WORDS: dict[str, Status] = {
    **dict.fromkeys(("completed", "complete", "success", "succeeded", "done"), "completed"),
    **dict.fromkeys(("finished", "submitted"), "completed"),
    **dict.fromkeys(("error", "failed", "failure", "crashed", "cancelled"), "error"),
    **dict.fromkeys(("timeout", "timed_out", "time_limit"), "timeout"),
    **dict.fromkeys(("truncated", "incomplete", "max_turns", "max_steps"), "truncated"),
}
_TRUE_WORDS = frozenset({"resolved", "success", "succeeded", "pass", "passed", "true", "yes"})
_FALSE_WORDS = frozenset({"unresolved", "failure", "failed", "fail", "false", "no"})


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else an empty one (sources omit or null them)."""
    return value if isinstance(value, Mapping) else {}


def drop_none(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The mapping without its None values (absent means unknown in every record)."""
    return {k: v for k, v in obj.items() if v is not None}


def json_text(value: Any) -> str | None:
    """Tool-call arguments as JSON text: strings as given, objects serialised."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def maybe_json(value: Any) -> Any:
    """A value that may be a JSON-encoded string (Hugging Face string columns), decoded."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        return json.loads(value)
    return value


def as_bool(value: Any) -> bool | None:
    """A verdict as a bool: booleans, 0/1 and words (resolved/pass/success/true …)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def as_number(value: Any) -> float | None:
    """A finite number (not a bool) as float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def map_status(text: Any) -> Status | None:
    """A harness's exit status word mapped to completed|truncated|error|timeout (or None)."""
    if not isinstance(text, str):
        return None
    return _STATUS_WORDS.get(text.strip().lower().replace("-", "_").replace(" ", "_"))


def data_uri_part(kind: str, uri: str, mime: str | None = None) -> dict[str, Any]:
    """A part referring to an inline `data:` URI by the sha256 of its decoded bytes."""
    header, _, payload = uri.partition(",")
    mime = header[5:].split(";")[0] or mime
    if ";base64" in header:
        try:
            raw = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError):
            raw = payload.encode()
    else:
        raw = urllib.parse.unquote_to_bytes(payload)
    return digest_part(kind, raw, mime)


def digest_part(kind: str, raw: bytes, mime: str | None) -> dict[str, Any]:
    """A part that keeps only the content hash of an inline payload."""
    digest = hashlib.sha256(raw).hexdigest()
    return drop_none(
        {"type": kind, "uri": f"{DIGEST_SCHEME}{digest}", "mime_type": mime, "sha256": digest}
    )


def base64_part(kind: str, data: str, mime: str | None) -> dict[str, Any]:
    """A part for bare base64 data (no `data:` header)."""
    if data.startswith("data:"):
        return data_uri_part(kind, data, mime)
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        raw = data.encode()
    return digest_part(kind, raw, mime)


def media_part(kind: str, ref: Any, mime: str | None = None) -> dict[str, Any]:
    """A part for a URL/path reference or an inline data URI."""
    if isinstance(ref, Mapping):
        return _source_part(kind, ref, mime)
    if isinstance(ref, str) and ref.startswith("data:"):
        return data_uri_part(kind, ref, mime)
    if isinstance(ref, str) and ref.startswith(DIGEST_SCHEME):  # our own reference, read back
        return {"type": kind, "uri": ref, "mime_type": mime, "sha256": ref[len(DIGEST_SCHEME) :]}
    return drop_none(
        {"type": kind, "uri": ref if isinstance(ref, str) else None, "mime_type": mime}
    )


def _source_part(kind: str, source: Mapping[str, Any], mime: str | None) -> dict[str, Any]:
    """Anthropic/ATIF `source` objects: {media_type, data | url | path} (and OpenAI url dicts)."""
    mime = source.get("media_type") or source.get("mime_type") or mime
    if isinstance(source.get("data"), str):
        return base64_part(kind, source["data"], mime)
    ref = source.get("url") or source.get("path") or source.get("uri")
    return media_part(kind, ref, mime)


def _file_part(part: Mapping[str, Any]) -> dict[str, Any]:
    body = mapping(part.get("file")) or part
    mime = body.get("mime_type")
    if isinstance(body.get("file_data"), str):
        return base64_part("file", body["file_data"], mime)
    if isinstance(body.get("document"), str):
        return media_part("file", body["document"], mime)
    ref = body.get("file_url") or (f"file-id:{body['file_id']}" if body.get("file_id") else None)
    return drop_none({"type": "file", "uri": ref, "mime_type": mime, "text": body.get("filename")})


def _image_part(part: Mapping[str, Any]) -> dict[str, Any]:
    for key in ("image_url", "image", "source"):
        ref = part.get(key)
        if ref is not None:
            return media_part("image", ref, part.get("mime_type"))
    file_id = part.get("file_id")
    return drop_none({"type": "image", "uri": f"file-id:{file_id}" if file_id else None})


def _audio_part(part: Mapping[str, Any]) -> dict[str, Any]:
    body = mapping(part.get("input_audio")) or part
    fmt = body.get("format")
    mime = f"audio/{fmt}" if isinstance(fmt, str) else None
    data = body.get("data") if body.get("data") is not None else body.get("audio")
    if isinstance(data, str) and "://" not in data[:16]:
        return base64_part("audio", data, mime)
    return media_part("audio", data, mime)


def convert_part(part: Any) -> tuple[str, Any]:
    """One content part as ("text", str), ("reasoning", str) or ("part", ContentPart dict)."""
    if isinstance(part, str):
        return "text", part
    if not isinstance(part, Mapping):
        return "part", {"type": "other", "text": json.dumps(part, ensure_ascii=False)}
    kind = part.get("type")
    if kind in _TEXT_PARTS or kind == "refusal":
        return "text", part.get("text") if kind != "refusal" else part.get("refusal")
    if kind in _REASONING_PARTS:
        if part.get("redacted"):
            return "reasoning", None
        return "reasoning", part.get("reasoning") or part.get("text") or part.get("thinking")
    if kind in _IMAGE_PARTS:
        return "part", _image_part(part)
    if kind in _AUDIO_PARTS:
        return "part", _audio_part(part)
    if kind in _FILE_PARTS:
        return "part", _file_part(part)
    ref = part.get(kind) if isinstance(kind, str) and isinstance(part.get(kind), str) else None
    if ref is not None and (ref.startswith("data:") or "://" in ref[:16]):
        fmt = part.get("format")  # Inspect video parts: {video, format: "mp4"}
        mime = part.get("mime_type") or (f"{kind}/{fmt}" if isinstance(fmt, str) else None)
        return "part", media_part("other", ref, mime)
    text = part.get("text")
    if not isinstance(text, str):
        text = json.dumps({k: v for k, v in part.items() if k != "type"}, ensure_ascii=False)
    return "part", {"type": "other", "text": text}


def content_fields(content: Any) -> tuple[str | None, list[dict[str, Any]] | None, str | None]:
    """(content text, parts, reasoning) of a message's content: a string or a list of parts.

    Text parts are joined with newlines into `content`; `parts` is kept (text parts included, in
    order) only when there is a non-text part, whose payload is stored by reference.
    """
    if content is None or isinstance(content, str):
        return content, None, None
    items = content if isinstance(content, list) else [content]
    texts: list[str] = []
    reasoning: list[str] = []
    parts: list[dict[str, Any]] = []
    has_media = False
    for item in items:
        kind, value = convert_part(item)
        if kind == "text":
            if isinstance(value, str):
                texts.append(value)
                parts.append({"type": "text", "text": value})
        elif kind == "reasoning":
            if isinstance(value, str):
                reasoning.append(value)
        else:
            has_media = True
            parts.append(value)
    text = "\n".join(texts) if texts else None
    return text, (parts if has_media else None), ("\n".join(reasoning) if reasoning else None)


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


def read_document(stream: IO[bytes]) -> Any | BadRecord:
    """A whole-file JSON document, or one BadRecord for the file when it does not parse."""
    return parse_document(stream.read())


def parse_document(data: bytes) -> Any | BadRecord:
    """The JSON document in `data`, or one BadRecord for the file when it does not parse."""
    kept, size = bounded(data)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return BadRecord(f"invalid UTF-8 at byte {e.start} of the file", None, 0, None, kept, size)
    except json.JSONDecodeError as e:
        where = f"line {e.lineno} column {e.colno}"
        return BadRecord(f"malformed JSON: {e.msg} at {where}", e.lineno, 0, None, kept, size)


def raw_json(value: Any) -> tuple[bytes, int]:
    """A parsed value re-serialised for quarantine (bounded) and its size."""
    return bounded(json.dumps(value, ensure_ascii=False, default=str).encode())


def first_str(values: Iterable[Any]) -> str | None:
    """The first non-empty string among the values."""
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None
