"""The redactor: typed, deterministic placeholders for the secrets of one trajectory.

A secret becomes `<SECRET:kind:n>`: the same value gets the same placeholder throughout a
trajectory, numbered per kind by first appearance, so models still see where a key went and
references stay consistent. Credentials are replaced by default, personal data (family
`personal`: e-mail addresses, phone numbers) on request; an `AllowList` keeps named values.
A `Redactor` scans all fields of a trajectory joined into one text: a trajectory has thousands
of small fields, and one call per field and detector would cost more than the scanning.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

from trajlake.redact._allow import AllowList
from trajlake.redact._patterns import (
    FAMILY,
    KINDS,
    PLACEHOLDER_RE,
    Intervals,
    Span,
    char_classes,
    find_secrets,
    rule_out,
)

PERSONAL = "personal"
"""The family of personal data (e-mail, phone): redacted only when asked for."""


def family(kind: str) -> str:
    """The family of a secret kind: `personal` for personal data, else a credential family."""
    return FAMILY.get(kind, "credential")


PERSONAL_KINDS: frozenset[str] = frozenset(k for k in KINDS if family(k) == PERSONAL)
"""Kinds of the `personal` family: kept unless `personal=True` / `--redact-personal`."""


def placeholder(kind: str, number: int) -> str:
    """The placeholder of the `number`-th distinct secret of `kind` (1-based)."""
    return f"<SECRET:{kind}:{number}>"


class Finding(NamedTuple):
    """A secret found by `Redactor.findings`: `texts[text][start:end]` and its placeholder."""

    text: int
    start: int
    end: int
    kind: str
    placeholder: str


_SEPARATOR = "\n\0\n"


def join_texts(texts: Sequence[str]) -> str:
    """The fields of a trajectory as one text, the way a `Redactor` scans them."""
    return _SEPARATOR.join(texts)


def redact_batch(
    batch: Sequence[tuple[Sequence[str], Redactor]],
) -> list[tuple[list[str], int]]:
    """`redactor.redact_texts(texts)` for each pair, with detectors ruled out for the whole
    batch by native scans first (`rule_out`): the same results, fewer Python scans."""
    joined = [join_texts(texts) for texts, _ in batch]
    results = []
    by_kinds: dict[frozenset[str], list[int]] = {}
    for i, (_, redactor) in enumerate(batch):
        by_kinds.setdefault(redactor.kinds, []).append(i)
    skipped: list[frozenset[int]] = [frozenset()] * len(batch)
    for kinds, members in by_kinds.items():
        ruled = rule_out([joined[i] for i in members], kinds=kinds)
        for i, out in zip(members, ruled, strict=True):
            skipped[i] = out
    for i, (texts, redactor) in enumerate(batch):
        results.append(redactor.redact_texts(texts, ruled_out=skipped[i], joined=joined[i]))
    return results


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

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds this redactor replaces."""
        return self._kinds

    def _locate(
        self, texts: Sequence[str], ruled_out: Collection[int] = (), joined: str | None = None
    ) -> dict[int, list[Span]]:
        """The spans to replace, in order, by index of the texts holding any; numbers every
        secret found. (Most trajectories hold none: then nothing is built per text.)"""
        # One scan over all fields joined: a trajectory has thousands of small fields, and a
        # call per field and detector would cost more than the scanning itself. The separator
        # ends a line (line-bound patterns stop there) and holds a NUL: spans holding one are
        # dropped, so no secret is pieced together from two fields.
        if joined is None:
            joined = join_texts(texts)
        # Detectors run only for the kinds asked for: keeping personal data costs nothing.
        # No `GATE` scan of the whole: joined fields of an agent trajectory hold some trigger
        # (a URL, an `@`, a `key`) all but always, so it would only add a pass; short texts
        # are gated inside `find_secrets`, and batches of trajectories ruled out natively
        # (`redact_batch`).
        found_spans = find_secrets(joined, kinds=self._kinds, ruled_out=ruled_out)
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

    def redact_texts(
        self, texts: Sequence[str], *, ruled_out: Collection[int] = (), joined: str | None = None
    ) -> tuple[list[str], int]:
        """Redact texts that belong together (the fields of one trajectory), in order.

        Returns the new texts (the same objects where nothing changed) and the number of
        replacements. Numbering follows the order of `texts`, then the order within a text.
        `ruled_out` and `joined` come from `redact_batch`: detectors its native scans ruled
        out for `join_texts(texts)`, and that joined text.
        """
        found = self._locate(texts, ruled_out, joined)
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
        """`spans` plus every other occurrence of a known secret that propagates.

        Longest secrets first, each found with `str.find` (a regex alternation of this
        trajectory's secrets would be compiled anew for every trajectory that has one).
        """
        present = [v for v in sorted(self._propagating, key=len, reverse=True) if v in text]
        if not present:
            return spans
        taken = Intervals((s.start, s.end) for s in spans)
        for m in PLACEHOLDER_RE.finditer(text):
            if not taken.overlaps(m.start(), m.end()):
                taken.add(m.start(), m.end())
        extra = []
        for value in present:
            kind = self._known[value][0]
            start = text.find(value)
            while start >= 0:
                end = start + len(value)
                if not taken.overlaps(start, end):
                    taken.add(start, end)
                    extra.append(Span(start, end, kind))
                start = text.find(value, end)
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
