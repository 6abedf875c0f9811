"""Message content parts of every wire format, with inline payloads kept by reference.

Chat, Responses and Anthropic content is a string or a list of typed parts (text, reasoning,
image, audio, file …). `content_fields` splits such a list into the message's text, its
reasoning and, when there is media, its parts. Inline payloads (base64 images, audio, files) are
never stored: a part keeps `uri = "data-sha256:<hex>"` (the sha256 of the decoded bytes) and its
MIME type, so the same image read twice, from a log or through the proxy, gets the same
reference and the lake holds no megabytes of base64.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from trajlake.wire.values import drop_none, mapping

__all__ = [
    "DIGEST_SCHEME",
    "base64_part",
    "content_fields",
    "convert_part",
    "data_uri_part",
    "digest_part",
    "image_part",
    "media_part",
]

DIGEST_SCHEME = "data-sha256:"
"""URI scheme of an inline payload kept by reference: `data-sha256:<hex of the decoded bytes>`."""

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_REASONING_PARTS = frozenset({"reasoning", "reasoning_text", "summary_text", "thinking"})
_IMAGE_PARTS = frozenset({"image", "image_url", "input_image"})
_AUDIO_PARTS = frozenset({"audio", "input_audio"})
_FILE_PARTS = frozenset({"file", "input_file", "document"})


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


def image_part(url: str) -> dict[str, Any]:
    """An image part by reference: a data URL is replaced by its hash, never stored inline.

    The bare-URL form of harness logs (Aider, Codex, OpenHands). It differs from `media_part`
    in two ways that stored rows already depend on: `mime_type` is always present, and a
    percent-encoded (non-base64) data URL is hashed as written, not decoded.
    """
    if not url.startswith("data:"):
        return {"type": "image", "uri": url}
    header, _, payload = url.partition(",")
    mime = header[5:].split(";")[0] or None
    try:
        raw = base64.b64decode(payload, validate=False) if ";base64" in header else payload.encode()
    except (binascii.Error, ValueError):
        raw = payload.encode()
    digest = hashlib.sha256(raw).hexdigest()
    return {"type": "image", "uri": f"{DIGEST_SCHEME}{digest}", "mime_type": mime, "sha256": digest}
