"""Redacting JSON-like values (dicts and lists, nested): proxy request and response bodies,
label payloads, trajectory `attrs` and `tools`, and the `calls` rows of a trajectory.

`json_slots` fixes the order strings are visited in (depth first), which is the order
placeholders are numbered in; the trajectory walkers use it for their JSON fields too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from trajlake.redact._redactor import Redactor

__all__ = ["CALL_TEXT_FIELDS", "Slot", "json_slots", "redact_calls", "redact_json"]

# A slot is a place that holds a string: (model, attribute name), (dict, key) or (list, index).
Slot = tuple[Any, Any]

CALL_TEXT_FIELDS = ("request_params", "new_input", "response", "error")
"""The fields of a `calls` row that hold free text (verbatim request, input, response, error)."""


def json_slots(value: Any) -> Iterator[Slot]:
    """Every string inside a JSON-like value (dicts and lists, nested), depth first.

    The order is the order redaction numbers placeholders in; row-based paths use it too.
    """
    stack = [value]
    while stack:
        node = stack.pop()
        items: Iterable[tuple[Any, Any]]
        if isinstance(node, dict):
            items = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        children = []
        for key, item in items:
            if isinstance(item, str):
                yield node, key
            elif isinstance(item, (dict, list)):
                children.append(item)
        stack.extend(reversed(children))


def _copy_json(value: Any) -> Any:
    """A copy of the dicts and lists of a JSON-like value (strings and scalars shared)."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_json(v) for v in value]
    return value


def redact_json(
    value: Any, redactor: Redactor, cache: dict[str, str] | None = None
) -> tuple[Any, int]:
    """A redacted copy of a JSON-like value (every string at any depth; keys are kept).

    The input is left untouched: a proxy still forwards and answers with the original.
    Returns the copy and the replacements made. With a `cache` (original → redacted, kept by
    the caller across calls), a string seen before gets the same text again without a scan:
    the history a chat request repeats is redacted once and reads the same in every call.
    """
    if not isinstance(value, (str, dict, list, tuple)):
        return value, 0
    holder: Any = [value] if isinstance(value, str) else _copy_json(value)
    slots = list(json_slots(holder))
    texts = [h[k] for h, k in slots]
    todo = texts if cache is None else list(dict.fromkeys(t for t in texts if t not in cache))
    new_texts, count = redactor.redact_texts(todo)
    if cache is None:
        done = dict(zip(todo, new_texts, strict=True))
    else:
        cache.update(zip(todo, new_texts, strict=True))
        done = cache
    for (h, k), old in zip(slots, texts, strict=True):
        new = done[old]
        if new is not old:
            h[k] = new
    return (holder[0] if isinstance(value, str) else holder), count


def redact_calls(rows: Iterable[Mapping[str, Any]], redactor: Redactor) -> int:
    """Replace the secrets of `calls` rows in place; returns the number of replacements.

    Every string of each row's `CALL_TEXT_FIELDS`, row by row, in `json_slots` order. Pass the
    redactor the rows' trajectory was redacted with: a secret the messages hold gets the same
    placeholder in the calls that repeat it, and new ones are numbered on from there.
    """
    slots: list[Slot] = []
    for row in rows:
        for key in CALL_TEXT_FIELDS:
            value = row.get(key)
            if isinstance(value, str):
                slots.append((row, key))
            elif isinstance(value, (dict, list)):
                slots.extend(json_slots(value))
    if not slots:
        return 0
    texts = [holder[key] for holder, key in slots]
    new_texts, count = redactor.redact_texts(texts)
    for (holder, key), old, new in zip(slots, texts, new_texts, strict=True):
        if new is not old:
            holder[key] = new
    return count
