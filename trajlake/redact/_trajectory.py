"""Where the free text of a trajectory lives, and redacting it in place: for record models
(`redact_trajectory`) and for the plain row dicts of the fast ingest path (`redact_row`).

Both walk the same places in the same order (messages in order, then the trajectory's own
fields), because numbering follows that order: a trajectory gets the same placeholders
whichever path ingested it (`tests/ingest/test_fast_path.py` compares them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
from pydantic import BaseModel

from trajlake.redact._json import Slot, json_slots
from trajlake.redact._redactor import Redactor, redact_batch
from trajlake.schema import CanonicalTrajectory

__all__ = ["redact_row", "redact_rows", "redact_trajectory", "row_texts", "trajectory_texts"]


def _text_slots(record: CanonicalTrajectory) -> Iterator[Slot]:
    """Every free-text place of a trajectory: messages in order, then the trajectory's own."""
    for message in record.messages:
        for name in ("content", "reasoning"):
            if getattr(message, name) is not None:
                yield message, name
        for part in message.parts or ():
            if part.text is not None:
                yield part, "text"
        for call in message.tool_calls or ():
            if call.arguments is not None:
                yield call, "arguments"
        if message.attrs:
            yield from json_slots(message.attrs)
    for name in ("final_output", "exit_reason"):
        if getattr(record, name) is not None:
            yield record, name
    if record.attrs:
        yield from json_slots(record.attrs)
    if record.tools:
        yield from json_slots(record.tools)


def _get(slot: Slot) -> str:
    holder, key = slot
    value = getattr(holder, key) if isinstance(holder, BaseModel) else holder[key]
    assert isinstance(value, str)
    return value


def _set(slot: Slot, value: str) -> None:
    holder, key = slot
    if isinstance(holder, BaseModel):
        setattr(holder, key, value)
    else:
        holder[key] = value


def trajectory_texts(record: CanonicalTrajectory) -> list[str]:
    """The free texts of a trajectory in redaction order (what `redact_trajectory` scans)."""
    return [_get(slot) for slot in _text_slots(record)]


def redact_trajectory(record: CanonicalTrajectory, redactor: Redactor | None = None) -> int:
    """Replace the secrets of a trajectory in place; returns the number of replacements.

    Covers message content, reasoning, multimodal text parts, tool-call arguments (JSON stays
    valid: placeholders hold no quotes or backslashes), string values in message and
    trajectory `attrs` and in `tools` (recursively), `final_output` and `exit_reason`.
    `record.n_redactions` is left to the caller. Redacting a redacted record changes nothing.
    Without a `redactor`, credentials are replaced and personal data is kept.
    """
    slots = list(_text_slots(record))
    texts = [_get(slot) for slot in slots]
    new_texts, count = (redactor or Redactor()).redact_texts(texts)
    for slot, old, new in zip(slots, texts, new_texts, strict=True):
        if new is not old:
            _set(slot, new)
    return count


def _row_slots(record: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """The free-text places of a row trajectory, in the order `redact_trajectory` scans."""
    for m in record["messages"]:
        if m.get("content") is not None:
            yield m, "content"
        if m.get("reasoning") is not None:
            yield m, "reasoning"
        for part in m.get("parts") or ():
            if part.get("text") is not None:
                yield part, "text"
        for call in m.get("tool_calls") or ():
            if call.get("arguments") is not None:
                yield call, "arguments"
        if m.get("attrs"):
            yield from json_slots(m["attrs"])
    for name in ("final_output", "exit_reason"):
        if record.get(name) is not None:
            yield record, name
    if record.get("attrs"):
        yield from json_slots(record["attrs"])
    if record.get("tools"):
        yield from json_slots(record["tools"])


def _json_texts(value: Any, out: list[str]) -> None:
    """Append the strings of a JSON-like value to `out` in `json_slots` order."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items: Iterable[Any] = node.values()
        elif isinstance(node, list):
            items = node
        else:
            continue
        children = []
        for item in items:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, (dict, list)):
                children.append(item)
        stack.extend(reversed(children))


_TOOLS_TEXTS: dict[bytes, list[str]] = {}
_TOOLS_REMEMBERED = 64


def _tools_texts(tools: Any, out: list[str]) -> None:
    """`_json_texts` of a `tools` list. Every record of a run declares the same tools (often
    kilobytes of schemas), so their texts are remembered by the tools' JSON."""
    try:
        key = orjson.dumps(tools)
    except TypeError:  # not plain JSON (an int past 64 bits): walk it each time
        _json_texts(tools, out)
        return
    texts = _TOOLS_TEXTS.get(key)
    if texts is None:
        if len(_TOOLS_TEXTS) >= _TOOLS_REMEMBERED:
            _TOOLS_TEXTS.clear()
        texts = _TOOLS_TEXTS[key] = []
        _json_texts(tools, texts)
    out.extend(texts)


def row_texts(record: dict[str, Any]) -> list[str]:
    """The free texts of a row trajectory in redaction order (`_row_slots`, without slots)."""
    out: list[str] = []
    add = out.append
    for m in record["messages"]:
        if (text := m.get("content")) is not None:
            add(text)
        if (text := m.get("reasoning")) is not None:
            add(text)
        for part in m.get("parts") or ():
            if (text := part.get("text")) is not None:
                add(text)
        for call in m.get("tool_calls") or ():
            if (text := call.get("arguments")) is not None:
                add(text)
        if m.get("attrs"):
            _json_texts(m["attrs"], out)
    for name in ("final_output", "exit_reason"):
        if (text := record.get(name)) is not None:
            add(text)
    if record.get("attrs"):
        _json_texts(record["attrs"], out)
    if record.get("tools"):
        _tools_texts(record["tools"], out)
    return out


def redact_row(record: dict[str, Any], redactor: Redactor) -> int:
    """Replace the secrets of a row trajectory in place, as `redact_trajectory` does."""
    texts = row_texts(record)
    new_texts, count = redactor.redact_texts(texts)
    return _put_back(record, texts, new_texts, count)


def redact_rows(batch: Sequence[tuple[dict[str, Any], Redactor]]) -> list[int]:
    """`redact_row` for each pair, detectors ruled out for the batch at once (`redact_batch`):
    the same rows and numbers, for a fraction of the scanning. Returns the counts."""
    texts = [row_texts(record) for record, _ in batch]
    results = redact_batch([(t, redactor) for t, (_, redactor) in zip(texts, batch, strict=True)])
    return [
        _put_back(record, old, new, count)
        for (record, _), old, (new, count) in zip(batch, texts, results, strict=True)
    ]


def _put_back(record: dict[str, Any], texts: list[str], new_texts: list[str], count: int) -> int:
    if not count:  # most trajectories hold no secret: their places are never looked up
        return 0
    slots = list(_row_slots(record))
    for (holder, key), old, new in zip(slots, texts, new_texts, strict=True):
        if new is not old:
            holder[key] = new
    return count
