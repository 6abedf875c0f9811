"""Coercing raw source values that every adapter meets: times, integers, inline images."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
from typing import Any


def parse_time(value: Any) -> dt.datetime | None:
    """An aware UTC datetime from ISO text or unix seconds (milliseconds when huge)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = value / 1000 if value > 1e11 else value
        try:
            return dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    # A naive time is taken as UTC: harnesses that omit the offset log in UTC.
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.astimezone(dt.timezone.utc)


def as_int(value: object) -> int | None:
    """An integer, or None (booleans are not counts)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def image_part(url: str) -> dict[str, Any]:
    """An image part by reference: a data URL is replaced by its hash, never stored inline."""
    if not url.startswith("data:"):
        return {"type": "image", "uri": url}
    header, _, payload = url.partition(",")
    mime = header[5:].split(";")[0] or None
    try:
        raw = base64.b64decode(payload, validate=False) if ";base64" in header else payload.encode()
    except (binascii.Error, ValueError):
        raw = payload.encode()
    digest = hashlib.sha256(raw).hexdigest()
    return {"type": "image", "uri": f"data-sha256:{digest}", "mime_type": mime, "sha256": digest}
