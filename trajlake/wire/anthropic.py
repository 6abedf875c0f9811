"""Anthropic Messages-API content as canonical messages: text, media blocks, tool results.

An Anthropic message is a role and a string or a list of blocks. A user message may carry
`tool_result` blocks (each becomes a `tool` message, as in chat) beside its own text; an
assistant message carries `text`, `thinking` and `tool_use` blocks (content, reasoning and
tool calls). Claude Code transcripts store the same blocks line by line, so its adapter shares
`text_and_parts`; the proxy maps whole request and response messages with `canonical_messages` and
`assistant_message`. Inline base64 media is kept by its sha256, as everywhere in trajlake.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from trajlake.wire.parts import DIGEST_SCHEME
from trajlake.wire.values import drop_none

__all__ = ["assistant_message", "block_part", "blocks", "canonical_messages", "text_and_parts"]


def block_part(block: Mapping[str, Any]) -> dict[str, Any]:
    """An image/document block by reference: inline base64 is replaced by its sha256."""
    kind = "image" if block.get("type") == "image" else "file"
    source: Mapping[str, Any] = block["source"] if isinstance(block.get("source"), dict) else {}
    mime = source.get("media_type")
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return {"type": kind, "uri": source["url"], "mime_type": mime}
    data = source.get("data")
    if not isinstance(data, str):
        return {"type": kind, "mime_type": mime}
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        raw = data.encode()
    digest = hashlib.sha256(raw).hexdigest()
    return {"type": kind, "uri": f"{DIGEST_SCHEME}{digest}", "mime_type": mime, "sha256": digest}


def text_and_parts(content: object) -> tuple[str | None, list[dict[str, Any]] | None]:
    """Text of a content value (str or blocks) and, when it has media, its parts."""
    if isinstance(content, str):
        return content, None
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") in ("image", "document"):
            media.append(block_part(block))
    text = "\n".join(texts) if texts else None
    if not media:
        return text, None
    return text, ([{"type": "text", "text": text}] if text else []) + media


def blocks(content: list[Any]) -> list[Mapping[str, Any]]:
    """The content blocks, checked to be objects.

    Raises:
        ValueError: a block is not an object.
    """
    if not all(isinstance(b, Mapping) for b in content):
        raise ValueError("anthropic: every content block must be an object")
    return content


def canonical_messages(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One `{role, content}` message as canonical dicts.

    A user message's tool_result blocks are tool messages; its other blocks one user message.
    An assistant message is `assistant_message` of its blocks.

    Raises:
        ValueError: a content block is not an object.
    """
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    checked = blocks(content)
    if role == "assistant":
        return [assistant_message(checked)]
    out: list[dict[str, Any]] = []
    others = [b for b in checked if b.get("type") != "tool_result"]
    for block in checked:
        if block.get("type") != "tool_result":
            continue
        text, parts = text_and_parts(block.get("content"))
        is_error = block.get("is_error")
        out.append(
            drop_none(
                {"role": "tool", "content": text, "parts": parts}
                | {"tool_call_id": block.get("tool_use_id")}
                | {"is_error": is_error if isinstance(is_error, bool) else None}
            )
        )
    if others or not out:
        text, parts = text_and_parts(others)
        out.append(drop_none({"role": "user", "content": text, "parts": parts}))
    return out


def assistant_message(content: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Text blocks → content, thinking → reasoning, tool_use → tool_calls; others counted."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    others: dict[str, int] = {}
    for block in content:
        kind = str(block.get("type"))
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            thoughts.append(str(block.get("thinking", "")))
        elif kind in ("tool_use", "server_tool_use"):
            arguments = json.dumps(block.get("input"), ensure_ascii=False)
            call = {"id": block.get("id"), "name": block.get("name"), "arguments": arguments}
            calls.append(drop_none(call | {"type": "function" if kind == "tool_use" else kind}))
        else:
            others[kind] = others.get(kind, 0) + 1
    return drop_none(
        {
            "role": "assistant",
            "content": "\n".join(texts) if texts else None,
            "reasoning": "\n".join(thoughts) if thoughts else None,
            "tool_calls": calls or None,
            "attrs": {"other_blocks": others} if others else None,
        }
    )
