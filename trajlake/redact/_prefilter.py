"""A native prefilter: which detectors cannot match a trajectory, decided for a batch at once.

Python's `re` scans a long text once per detector; most agent trajectories hold words every
detector stops at (`key = ...` in code, `-p` in a command) but no secret. Each costly detector
therefore has a *prefilter*: a pattern in RE2 syntax that matches every text the detector can
find anything in (a superset: it may match where nothing is found, never the reverse). A batch
of joined trajectories goes through Arrow's RE2 kernels, one scan for all prefilters and then
one per prefilter over the few texts that matched; a detector whose prefilter misses a text is
not run on it. Same spans, fewer Python scans (`tests/redact/test_prefilter.py` checks both).

RE2 has no lookarounds and reads `\\w`/`\\d`/`\\s` as ASCII where Python reads Unicode;
`relaxed` turns a Python pattern into a superset in RE2 syntax (lookarounds dropped, `\\w` and
`\\d` widened to Unicode letters and numbers) and refuses what it cannot widen safely.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["relaxed", "ruled_out", "unled"]

# Python's Unicode `\w` and `\d` take ASCII word characters (digits) and some non-ASCII ones:
# every non-ASCII character stands in for those (RE2's `\pL` classes make its automaton large).
_WORD = r"0-9A-Za-z_\x{80}-\x{10FFFF}"
_NUMBER = r"[0-9\x{80}-\x{10FFFF}]"
_NARROWER_IN_RE2 = ("\\w", "\\d", "\\s", "\\b", "\\B")


def _group_end(pattern: str, start: int) -> int:
    """The index just past the group opened at `pattern[start]` (`(`), nesting and escapes."""
    depth, i, in_class = 0, start, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # `[]...]`: a literal `]` first
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced group in {pattern!r}")


def _negated_class(out: list[str]) -> bool:
    """Whether the character class being written into `out` is negated (`[^...`)."""
    text = "".join(out)
    return text[text.rindex("[") + 1 : text.rindex("[") + 2] == "^"


def _escape(escape: str, in_class: bool, out: list[str], pattern: str) -> str:
    """The RE2 form of one escape that matches at least what Python's does."""
    if escape[1:].isdigit():
        raise ValueError(f"no RE2 superset of a backreference in {pattern!r}")
    if escape not in _NARROWER_IN_RE2 or (in_class and _negated_class(out)):
        return escape  # in `[^...]` RE2's ASCII reading excludes less: the class takes more
    if escape == "\\w":
        return _WORD if in_class else f"[{_WORD}]"
    if escape == "\\d":
        return _NUMBER
    raise ValueError(f"no RE2 superset of {escape} in {pattern!r}")


# Counted repetitions make RE2's automaton large (a state per count: `{36,251}` of a class in
# an alternation of fifty rules sends it from its DFA to a slow NFA). A smaller least count
# and no most match more, so they keep the superset and the automaton small.
_MOST_COUNTED = 16
_REPEAT = re.compile(r"\{(\d+)(,\d*)?\}")


def _repeat(bound: re.Match[str]) -> str:
    least = int(bound.group(1))
    if bound.group(2) is None and least <= _MOST_COUNTED:
        return bound.group()
    return f"{{{min(least, _MOST_COUNTED)},}}"


def relaxed(pattern: str) -> str:
    """A superset of `pattern` (Python `re` syntax) in RE2 syntax.

    Lookarounds are dropped (a zero-width condition less can only match more); `\\w` and
    `\\d` become Unicode classes; counted repetitions lose their most and keep at most 16 as
    their least. A positive `\\s`, `\\b`, `$` or a backreference is refused:
    RE2 reads them more narrowly than Python, so no superset would follow.
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if pattern.startswith(("\\x{", "\\p{"), i):  # RE2's own forms: kept whole
                end = pattern.index("}", i) + 1
                out.append(pattern[i:end])
                i = end
                continue
            out.append(_escape(pattern[i : i + 2], in_class, out, pattern))
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            i = _group_end(pattern, i)
            continue
        elif c == "$":  # Python's also matches before a final newline, RE2's does not
            raise ValueError(f"no RE2 superset of $ in {pattern!r}")
        elif c == "{" and (bound := _REPEAT.match(pattern, i)):
            out.append(_repeat(bound))
            i = bound.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


_LEADING_CLASS = re.compile(r"\[(?:\\.|[^\]\\])*\](?:\{\d+,?\d*\}|[*+?])?")


def unled(pattern: str) -> str:
    """`pattern` (one RE2 concatenation, no top-level `|`) without the character classes it
    starts with, when a literal follows them: `[sr]k_live_…` → `k_live_…`.

    The rest of a match still occurs, so this stays a superset; and an automaton that starts
    at a literal stays small, where one led by a class is alive at most positions.
    """
    rest = pattern
    while lead := _LEADING_CLASS.match(rest):
        rest = rest[lead.end() :]
    escaped_literal = rest[:1] == "\\" and not rest[1:2].isalnum()  # `\.`, not `\d`
    literal = escaped_literal or rest[:1] not in ("", "\\", "(", "|", ")", "*", "+", "?", "{", ".")
    return rest if rest is not pattern and literal else pattern


def _utf8_array(texts: Sequence[str]) -> Any:
    """`texts` as an Arrow array; a text Arrow cannot hold (a lone surrogate is not UTF-8) is
    a null, for which nothing is ruled out."""
    import pyarrow as pa

    try:
        return pa.array(texts, pa.large_string())
    except UnicodeEncodeError:
        return pa.array([_encodable_or_none(t) for t in texts], pa.large_string())


def _encodable_or_none(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def ruled_out(
    texts: Sequence[str], groups: Sequence[tuple[frozenset[int], str]]
) -> list[frozenset[int]]:
    """For each text, the detectors (by id) that the prefilters of `groups` rule out.

    `groups` are `(detector ids, RE2 pattern)`: a text the pattern misses rules out all the
    ids. One scan for all groups finds the texts any may match (most texts: none); each group
    then scans only those texts. (Each scan costs a compilation, a few milliseconds for a long
    pattern: detectors whose prefilters seldom match share one.)
    """
    import pyarrow.compute as pc

    if not texts or not groups:
        return [frozenset()] * len(texts)
    array = _utf8_array(texts)
    combined = "|".join(f"(?:{pattern})" for _, pattern in groups)
    anything = pc.match_substring_regex(array, combined).to_pylist()
    every = frozenset().union(*(ids for ids, _ in groups))
    # A null (a text Arrow could not hold) rules nothing out and is not scanned again.
    out = [every if hit is False else frozenset() for hit in anything]
    candidates = [i for i, hit in enumerate(anything) if hit]
    if not candidates:
        return out
    subset = array.take(candidates)
    misses: list[set[int]] = [set() for _ in candidates]
    for ids, pattern in groups:
        for row, hit in enumerate(pc.match_substring_regex(subset, pattern).to_pylist()):
            if not hit:
                misses[row].update(ids)
    for row, i in enumerate(candidates):
        out[i] = frozenset(misses[row])
    return out
