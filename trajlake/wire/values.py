"""Coercing raw wire and log values: JSON objects, numbers, verdicts, status words, times.

Every format trajlake reads (chat dumps, Responses rollouts, Anthropic messages, harness logs)
spells the same facts loosely: a count may be a bool, a verdict a word, a time ISO text or unix
milliseconds, an object null. One set of total functions, each returning None for "not that",
keeps the adapters and the proxy agreeing on what a value means; none of them raises.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from trajlake.schema import Status

__all__ = [
    "as_bool",
    "as_int",
    "as_number",
    "drop_none",
    "first_str",
    "json_text",
    "map_status",
    "mapping",
    "maybe_json",
    "parse_time",
]

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
    """A value that may be a JSON-encoded string (Hugging Face string columns), decoded.

    Raises:
        json.JSONDecodeError: the string looks like JSON (`{`/`[`) but does not parse.
    """
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


def as_int(value: object) -> int | None:
    """An integer, or None (booleans are not counts)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def map_status(text: Any) -> Status | None:
    """A harness's exit status word mapped to completed|truncated|error|timeout (or None)."""
    if not isinstance(text, str):
        return None
    return _STATUS_WORDS.get(text.strip().lower().replace("-", "_").replace(" ", "_"))


def first_str(values: Iterable[Any]) -> str | None:
    """The first non-empty string among the values."""
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def parse_time(value: Any) -> dt.datetime | None:
    """An aware UTC datetime from ISO text or unix seconds (milliseconds when huge)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = value / 1000 if value > 1e11 else value
        try:
            return dt.datetime.fromtimestamp(seconds, dt.UTC)
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
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC)
