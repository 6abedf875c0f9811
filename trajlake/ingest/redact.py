"""Secret redaction at ingest: typed, deterministic placeholders in every free-text field.

A secret becomes `<SECRET:kind:n>`: the same value gets the same placeholder throughout a
trajectory, numbered per kind by first appearance, so models still see where a key went and
references stay consistent. The detectors live in `_secret_patterns`.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from trajlake.ingest._secret_patterns import (
    KINDS,
    PLACEHOLDER_RE,
    Intervals,
    Span,
    char_classes,
    find_secrets,
)
from trajlake.schema import CanonicalTrajectory

__all__ = [
    "KINDS",
    "PLACEHOLDER_RE",
    "Redactor",
    "evaluate",
    "placeholder",
    "redact_text",
    "redact_trajectory",
]


def placeholder(kind: str, number: int) -> str:
    """The placeholder of the `number`-th distinct secret of `kind` (1-based)."""
    return f"<SECRET:{kind}:{number}>"


_SEPARATOR = "\n\0\n"


def _propagates(value: str) -> bool:
    """A found secret random enough to be replaced wherever else it occurs, context or not.

    `DB_PASSWORD=Xy7!pQ2z` is found by its key name; a later `mysql -pXy7!pQ2z` is caught only
    because the value is already known. Weak values (`postgres`) would hit ordinary words.
    """
    classes = char_classes(value)
    return (len(value) >= 8 and classes >= 3) or (len(value) >= 12 and classes >= 2)


class Redactor:
    """Replaces secrets with placeholders; one instance numbers the secrets of one trajectory.

    Use a fresh instance per trajectory: numbering restarts, and nothing learnt from one
    trajectory's secrets leaks into another's text.

    Args:
        kinds: replace only secrets of these kinds (see `KINDS`); all kinds when None.
    """

    def __init__(self, kinds: Iterable[str] | None = None) -> None:
        self._kinds = None if kinds is None else frozenset(kinds)
        if self._kinds is not None and not self._kinds <= set(KINDS):
            unknown = ", ".join(sorted(self._kinds - set(KINDS)))
            raise ValueError(f"unknown secret kind(s) {unknown}; known: {', '.join(KINDS)}")
        self._known: dict[str, tuple[str, str]] = {}  # secret → (kind, placeholder)
        self._counts: dict[str, int] = {}
        self._propagating: list[str] = []

    def _placeholder(self, value: str, kind: str) -> str:
        known = self._known.get(value)
        if known is not None:
            return known[1]
        number = self._counts.get(kind, 0) + 1
        self._counts[kind] = number
        text = placeholder(kind, number)
        self._known[value] = (kind, text)
        if _propagates(value):
            self._propagating.append(value)
        return text

    def redact_texts(self, texts: Sequence[str]) -> tuple[list[str], int]:
        """Redact texts that belong together (the fields of one trajectory), in order.

        Returns the new texts (the same objects where nothing changed) and the number of
        replacements. Numbering follows the order of `texts`, then the order within a text.
        """
        # One scan over all fields joined: a trajectory has thousands of small fields, and a
        # call per field and detector would cost more than the scanning itself. The separator
        # ends a line (line-bound patterns stop there) and holds a NUL: spans holding one are
        # dropped, so no secret is pieced together from two fields.
        joined = _SEPARATOR.join(texts)
        starts = list(itertools.accumulate((len(t) + len(_SEPARATOR) for t in texts), initial=0))
        spans = [
            s
            for s in find_secrets(joined)
            if "\0" not in joined[s.start : s.end]
            and (self._kinds is None or s.kind in self._kinds)
        ]
        for start, end, kind in spans:
            self._placeholder(joined[start:end], kind)
        if self._propagating:
            spans = self._add_known(joined, spans)
        found: list[list[Span]] = [[] for _ in texts]
        for start, end, kind in spans:
            i = bisect.bisect_right(starts, start) - 1
            found[i].append(Span(start - starts[i], end - starts[i], kind))
        out: list[str] = []
        for text, text_spans in zip(texts, found, strict=True):
            if not text_spans:
                out.append(text)
                continue
            pieces: list[str] = []
            last = 0
            for start, end, _ in text_spans:
                pieces += (text[last:start], self._known[text[start:end]][1])
                last = end
            pieces.append(text[last:])
            out.append("".join(pieces))
        return out, len(spans)

    def _add_known(self, text: str, spans: list[Span]) -> list[Span]:
        """`spans` plus every other occurrence of a known secret that propagates."""
        pattern = re.compile(
            "|".join(re.escape(v) for v in sorted(self._propagating, key=len, reverse=True))
        )
        taken = Intervals((s.start, s.end) for s in spans)
        extra = []
        for m in itertools.chain(PLACEHOLDER_RE.finditer(text), pattern.finditer(text)):
            if taken.overlaps(m.start(), m.end()):
                continue
            taken.add(m.start(), m.end())
            if m.re is pattern:
                extra.append(Span(m.start(), m.end(), self._known[m.group()][0]))
        return sorted(spans + extra) if extra else spans

    def redact_text(self, text: str) -> tuple[str, int]:
        """Redact one text; returns the new text and the number of replacements."""
        texts, count = self.redact_texts([text])
        return texts[0], count


def redact_text(text: str) -> tuple[str, int]:
    """Redact a standalone text with fresh numbering; returns the new text and the count."""
    return Redactor().redact_text(text)


# A slot is a place that holds a string: (model, attribute name), (dict, key) or (list, index).
_Slot = tuple[Any, Any]


def _json_slots(value: Any) -> Iterator[_Slot]:
    """Every string inside a JSON-like value (dicts and lists, nested), depth first."""
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


def _text_slots(record: CanonicalTrajectory) -> Iterator[_Slot]:
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
            yield from _json_slots(message.attrs)
    for name in ("final_output", "exit_reason"):
        if getattr(record, name) is not None:
            yield record, name
    if record.attrs:
        yield from _json_slots(record.attrs)
    if record.tools:
        yield from _json_slots(record.tools)


def _get(slot: _Slot) -> str:
    holder, key = slot
    value = getattr(holder, key) if isinstance(holder, BaseModel) else holder[key]
    assert isinstance(value, str)
    return value


def _set(slot: _Slot, value: str) -> None:
    holder, key = slot
    if isinstance(holder, BaseModel):
        setattr(holder, key, value)
    else:
        holder[key] = value


def redact_trajectory(record: CanonicalTrajectory, redactor: Redactor | None = None) -> int:
    """Replace the secrets of a trajectory in place; returns the number of replacements.

    Covers message content, reasoning, multimodal text parts, tool-call arguments (JSON stays
    valid: placeholders hold no quotes or backslashes), string values in message and
    trajectory `attrs` and in `tools` (recursively), `final_output` and `exit_reason`.
    `record.n_redactions` is left to the caller. Redacting a redacted record changes nothing.
    """
    slots = list(_text_slots(record))
    texts = [_get(slot) for slot in slots]
    new_texts, count = (redactor or Redactor()).redact_texts(texts)
    for slot, old, new in zip(slots, texts, new_texts, strict=True):
        if new is not old:
            _set(slot, new)
    return count


def _cases(source: Iterable[Mapping[str, Any]] | str | Path) -> list[Mapping[str, Any]]:
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    return list(source)


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def evaluate(
    positives: Iterable[Mapping[str, Any]] | str | Path,
    negatives: Iterable[Mapping[str, Any]] | str | Path,
) -> dict[str, Any]:
    """Recall and false-positive rate of redaction on a labelled corpus, overall and per kind.

    Args:
        positives: cases `{"kind", "text", "secret"}` (or a JSONL path). A case is caught when
            `secret` no longer occurs in the redacted text and a placeholder of `kind` does.
        negatives: cases `{"kind", "text"}` (or a JSONL path), `kind` naming the near-miss
            category. Any change to the text is a false positive.

    Returns:
        `recall`, `false_positive_rate`, counts, `per_kind` (recall per secret kind),
        `per_category` (false-positive rate per negative category), and the failing cases
        under `misses` and `false_positives`.
    """
    per_kind: dict[str, list[int]] = {}
    misses: list[dict[str, str]] = []
    pos = _cases(positives)
    for case in pos:
        kind, text, secret = case["kind"], case["text"], case["secret"]
        if secret not in text:
            raise ValueError(f"positive case's secret does not occur in its text: {text!r}")
        out, _ = redact_text(text)
        caught = secret not in out and f"<SECRET:{kind}:" in out
        stats = per_kind.setdefault(kind, [0, 0])
        stats[0] += 1
        stats[1] += caught
        if not caught:
            misses.append({"kind": kind, "text": text, "redacted": out})
    per_category: dict[str, list[int]] = {}
    false_positives: list[dict[str, str]] = []
    neg = _cases(negatives)
    for case in neg:
        text = case["text"]
        out, _ = redact_text(text)
        category = case.get("kind", "other")
        stats = per_category.setdefault(category, [0, 0])
        stats[0] += 1
        if out != text:
            stats[1] += 1
            false_positives.append({"kind": category, "text": text, "redacted": out})
    return {
        "recall": _rate(len(pos) - len(misses), len(pos)),
        "false_positive_rate": _rate(len(false_positives), len(neg)),
        "positives": len(pos),
        "negatives": len(neg),
        "per_kind": {k: {"n": n, "recall": _rate(c, n)} for k, (n, c) in sorted(per_kind.items())},
        "per_category": {
            k: {"n": n, "false_positive_rate": _rate(c, n)}
            for k, (n, c) in sorted(per_category.items())
        },
        "misses": misses,
        "false_positives": false_positives,
    }
