"""History-entry pieces of SWE-agent `.traj` files: content parts, inline images, tool calls.

Inline base64 images become `data-sha256:<hash>` references with an image part, so binary payloads
stay out of message text (as `schema.ContentPart` requires); the hash is of the decoded bytes, as a
content-addressed blob store would name them. Used by `swe_agent` (and `mini_swe_agent` for
`number_messages`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from trajlake.schema import ContentPart, Message, ToolCall

_DATA_URL = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,([A-Za-z0-9+/]{16,}={0,2})")


def obj(value: Any) -> dict[str, Any]:
    """The value if it is a JSON object, else an empty one (for optional sections)."""
    return value if isinstance(value, dict) else {}


def number_messages(messages: list[Message]) -> list[Message]:
    """Set each message's `idx`: its position within its thread."""
    positions: dict[str, int] = {}
    for message in messages:
        message.idx = positions.get(message.thread, 0)
        positions[message.thread] = message.idx + 1
    return messages


def images_to_references(text: str) -> tuple[str, list[ContentPart]]:
    """Replace inline base64 images by `data-sha256:<hash>` references, returned as parts."""
    parts: list[ContentPart] = []

    def replace(match: re.Match[str]) -> str:
        # The hash of the decoded bytes, as a content-addressed blob store would name them.
        try:
            payload = base64.b64decode(match.group(2), validate=True)
        except ValueError:
            payload = match.group(2).encode()
        digest = hashlib.sha256(payload).hexdigest()
        uri = f"data-sha256:{digest}"
        part = {"type": "image", "uri": uri, "mime_type": match.group(1), "sha256": digest}
        parts.append(ContentPart.model_validate(part))
        return uri

    return _DATA_URL.sub(replace, text), parts


def content_and_parts(value: Any) -> tuple[str | None, list[ContentPart] | None]:
    """Text (parts joined) and parts of a history entry's content (str or OpenAI part list)."""
    if value is None:
        return None, None
    if isinstance(value, str):
        text, images = images_to_references(value)
        return text, (
            [ContentPart.model_validate({"type": "text", "text": text}), *images]
            if images
            else None
        )
    parts: list[ContentPart] = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and item.get("type") == "text":
            text, images = images_to_references(str(item.get("text") or ""))
            parts.extend([ContentPart.model_validate({"type": "text", "text": text}), *images])
        elif isinstance(item, dict) and item.get("type") == "image_url":
            url = item.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            _, images = images_to_references(str(url or ""))
            parts.extend(images or [ContentPart.model_validate({"type": "image", "uri": str(url)})])
        else:
            other = {"type": "other", "text": json.dumps(item, ensure_ascii=False)}
            parts.append(ContentPart.model_validate(other))
    text = "\n".join(p.text for p in parts if p.type == "text" and p.text is not None)
    return text, parts


def openai_tool_call(call: Any) -> ToolCall:
    """An OpenAI-shaped tool call (arguments kept as the JSON text the model emitted)."""
    function = obj(call.get("function"))
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall.model_validate(
        {"id": call.get("id"), "name": function.get("name") or "", "arguments": arguments,
         "type": call.get("type")}
    )  # fmt: skip
