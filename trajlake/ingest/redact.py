"""Secret redaction: typed, deterministic placeholders in every free-text field the lake writes.

A secret becomes `<SECRET:kind:n>`: the same value gets the same placeholder throughout a
trajectory, numbered per kind by first appearance, so models still see where a key went and
references stay consistent. Credentials are replaced by default, personal data (family
`personal`: e-mail addresses, phone numbers) on request; an `AllowList` keeps named values.
The detectors live in `_secret_patterns`; URLs that name a source go through `redact_uri`.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel

from trajlake.ingest import _secret_patterns as _patterns
from trajlake.ingest._redact_uri import redact_uri
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
    "PERSONAL_KINDS",
    "PLACEHOLDER_RE",
    "AllowList",
    "Finding",
    "Redactor",
    "as_allow_list",
    "evaluate",
    "family",
    "placeholder",
    "redact_bytes",
    "redact_json",
    "redact_text",
    "redact_trajectory",
    "redact_uri",
]

PERSONAL = "personal"
"""The family of personal data (e-mail, phone): redacted only when asked for."""

_FALLBACK_FAMILY = {"email": PERSONAL, "phone": PERSONAL}


def family(kind: str) -> str:
    """The family of a secret kind: `personal` for personal data, else a credential family."""
    table: Mapping[str, str] | None = getattr(_patterns, "FAMILY", None)
    if table is not None and kind in table:
        return table[kind]
    return _FALLBACK_FAMILY.get(kind, "credential")


PERSONAL_KINDS: frozenset[str] = frozenset(k for k in KINDS if family(k) == PERSONAL)
"""Kinds of the `personal` family: kept unless `personal=True` / `--redact-personal`."""


def placeholder(kind: str, number: int) -> str:
    """The placeholder of the `number`-th distinct secret of `kind` (1-based)."""
    return f"<SECRET:{kind}:{number}>"


@dataclass(frozen=True)
class AllowList:
    """Values never redacted: exact strings, and regexes that must match a whole finding.

    Frozen and picklable (compiled patterns pickle by source), so it travels to ingest workers.
    """

    exact: frozenset[str] = frozenset()
    patterns: tuple[re.Pattern[str], ...] = ()

    def allows(self, value: str) -> bool:
        """Whether a found secret `value` is to be kept as it is."""
        return value in self.exact or any(p.fullmatch(value) for p in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.exact or self.patterns)

    @classmethod
    def parse(cls, text: str, source: str = "<allow-list>") -> AllowList:
        """An allow-list from its text: one entry a line, `re:` before a regex, `#` comments.

        Raises:
            ValueError: A regex does not compile (the message names `source` and the line).
        """
        exact: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        for n, line in enumerate(text.splitlines(), 1):
            entry = line.strip()
            if not entry or entry.startswith("#"):
                continue
            if not entry.startswith("re:"):
                exact.add(entry)
                continue
            try:
                patterns.append(re.compile(entry[3:]))
            except re.error as e:
                raise ValueError(f"{source}:{n}: bad regex {entry[3:]!r}: {e}") from e
        return cls(frozenset(exact), tuple(patterns))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AllowList:
        """Read an allow-list file (UTF-8); see `parse` for the format."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read the allow-list {os.fspath(path)}: {e}") from e
        return cls.parse(text, os.fspath(path))


def as_allow_list(value: AllowList | str | os.PathLike[str] | None) -> AllowList | None:
    """An `AllowList` as given, or loaded from a path; None stays None."""
    if value is None or isinstance(value, AllowList):
        return value
    return AllowList.load(value)


class Finding(NamedTuple):
    """A secret found by `Redactor.findings`: `texts[text][start:end]` and its placeholder."""

    text: int
    start: int
    end: int
    kind: str
    placeholder: str


_SEPARATOR = "\n\0\n"


def _propagates(value: str) -> bool:
    """A found secret random enough to be replaced wherever else it occurs, context or not.

    `DB_PASSWORD=Xy7!pQ2z` is found by its key name; a later `mysql -pXy7!pQ2z` is caught only
    because the value is already known. Weak values (`postgres`) would hit ordinary words.
    """
    classes = char_classes(value)
    return (len(value) >= 8 and classes >= 3) or (len(value) >= 12 and classes >= 2)


_CREDENTIAL_KINDS = frozenset(KINDS) - PERSONAL_KINDS
_DEFAULT_KINDS = {False: _CREDENTIAL_KINDS, True: _CREDENTIAL_KINDS | PERSONAL_KINDS}


def _selected_kinds(kinds: Iterable[str] | None, personal: bool) -> frozenset[str]:
    if kinds is None:  # the common case: one redactor per trajectory, so worth keeping
        return _DEFAULT_KINDS[personal]
    chosen = set(kinds)
    if not chosen <= set(KINDS):
        unknown = ", ".join(sorted(chosen - set(KINDS)))
        raise ValueError(f"unknown secret kind(s) {unknown}; known: {', '.join(KINDS)}")
    return frozenset(chosen | PERSONAL_KINDS if personal else chosen)


class Redactor:
    """Replaces secrets with placeholders; one instance numbers the secrets of one trajectory.

    Use a fresh instance per trajectory: numbering restarts, and nothing learnt from one
    trajectory's secrets leaks into another's text.

    Args:
        kinds: replace only secrets of these kinds (see `KINDS`); when None, every credential
            kind (all kinds outside `PERSONAL_KINDS`).
        personal: also replace personal data (`PERSONAL_KINDS`: e-mail addresses, phones).
        allow: values never replaced, whatever their kind.
    """

    def __init__(
        self,
        kinds: Iterable[str] | None = None,
        *,
        personal: bool = False,
        allow: AllowList | None = None,
    ) -> None:
        self._kinds = _selected_kinds(kinds, personal)
        self._allow = allow or None
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

    def reserve(self, texts: Iterable[str]) -> int:
        """Number new secrets after the placeholders already in `texts` (text redacted
        earlier by another instance, e.g. a rollout's spooled calls after a restart).

        Returns how many distinct placeholders the texts hold.
        """
        seen: set[str] = set()
        for text in texts:
            for m in PLACEHOLDER_RE.finditer(text):
                seen.add(m.group())
                _, kind, number = m.group()[1:-1].split(":")
                self._counts[kind] = max(self._counts.get(kind, 0), int(number))
        return len(seen)

    def _keep(self, joined: str, span: Span) -> bool:
        if span.kind not in self._kinds or "\0" in joined[span.start : span.end]:
            return False
        return self._allow is None or not self._allow.allows(joined[span.start : span.end])

    def _locate(self, texts: Sequence[str]) -> dict[int, list[Span]]:
        """The spans to replace, in order, by index of the texts holding any; numbers every
        secret found. (Most trajectories hold none: then nothing is built per text.)"""
        # One scan over all fields joined: a trajectory has thousands of small fields, and a
        # call per field and detector would cost more than the scanning itself. The separator
        # ends a line (line-bound patterns stop there) and holds a NUL: spans holding one are
        # dropped, so no secret is pieced together from two fields.
        joined = _SEPARATOR.join(texts)
        # Detectors run only for the kinds asked for: keeping personal data costs nothing.
        # No `GATE` scan of the whole: joined fields of an agent trajectory hold some trigger
        # (a URL, an `@`, a `key`) all but always, so it would only add a pass; short texts
        # are gated inside `find_secrets`.
        found_spans = find_secrets(joined, kinds=self._kinds)
        spans = [s for s in found_spans if self._keep(joined, s)]
        for start, end, kind in spans:
            self._placeholder(joined[start:end], kind)
        if self._propagating:
            spans = self._add_known(joined, spans)
        found: dict[int, list[Span]] = {}
        if not spans:
            return found
        starts = list(itertools.accumulate((len(t) + len(_SEPARATOR) for t in texts), initial=0))
        for start, end, kind in spans:
            i = bisect.bisect_right(starts, start) - 1
            found.setdefault(i, []).append(Span(start - starts[i], end - starts[i], kind))
        return found

    def redact_texts(self, texts: Sequence[str]) -> tuple[list[str], int]:
        """Redact texts that belong together (the fields of one trajectory), in order.

        Returns the new texts (the same objects where nothing changed) and the number of
        replacements. Numbering follows the order of `texts`, then the order within a text.
        """
        found = self._locate(texts)
        out = list(texts)
        for i, text_spans in found.items():
            text = texts[i]
            pieces: list[str] = []
            last = 0
            for start, end, _ in text_spans:
                pieces += (text[last:start], self._known[text[start:end]][1])
                last = end
            pieces.append(text[last:])
            out[i] = "".join(pieces)
        return out, sum(len(s) for s in found.values())

    def findings(self, texts: Sequence[str]) -> list[Finding]:
        """What `redact_texts(texts)` would replace, with positions; the texts stay as they are.

        Numbering advances exactly as redacting would, so the placeholders are the ones the
        lake would hold.
        """
        return [
            Finding(i, start, end, kind, self._known[texts[i][start:end]][1])
            for i, spans in sorted(self._locate(texts).items())
            for start, end, kind in spans
        ]

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


def redact_text(text: str, *, personal: bool = False) -> tuple[str, int]:
    """Redact a standalone text with fresh numbering; returns the new text and the count."""
    return Redactor(personal=personal).redact_text(text)


def redact_bytes(raw: bytes, redactor: Redactor) -> tuple[bytes, int]:
    """Redact raw record bytes read as UTF-8; bytes that do not decode are kept as they are."""
    text = raw.decode("utf-8", "surrogateescape")
    new, count = redactor.redact_text(text)
    return (raw, 0) if new is text else (new.encode("utf-8", "surrogateescape"), count)


# A slot is a place that holds a string: (model, attribute name), (dict, key) or (list, index).
_Slot = tuple[Any, Any]


def json_slots(value: Any) -> Iterator[_Slot]:
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
            yield from json_slots(message.attrs)
    for name in ("final_output", "exit_reason"):
        if getattr(record, name) is not None:
            yield record, name
    if record.attrs:
        yield from json_slots(record.attrs)
    if record.tools:
        yield from json_slots(record.tools)


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

    Every kind is evaluated, personal data included (`redact_text(text, personal=True)`).

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
        out, _ = redact_text(text, personal=True)
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
        out, _ = redact_text(text, personal=True)
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
