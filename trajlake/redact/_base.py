"""Shared pieces of the secret detectors: spans, placeholders, value-shape tests, intervals."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from typing import NamedTuple


class Span(NamedTuple):
    """A secret found in a text: `text[start:end]`, of a kind such as `openai_key`."""

    start: int
    end: int
    kind: str


PLACEHOLDER_RE = re.compile(r"<SECRET:[a-z_]+:\d+>")
"""A placeholder written by redaction; never detected as (part of) a secret again."""

_PLACEHOLDER_WORDS = frozenset(
    (
        "password", "passwd", "secret", "token", "none", "null", "nil", "true", "false",
        "undefined", "required", "optional", "str", "string", "bytes", "int", "env", "default",
        "empty", "value", "key", "apikey", "api_key", "test", "testing", "todo", "tbd", "n/a",
        "hidden", "masked", "sensitive", "redacted", "changeme", "placeholder", "dummy", "sample",
        "pass", "pwd", "pw", "foo", "bar", "baz",
    )
)  # fmt: skip
_PLACEHOLDER_PARTS = (
    "your", "example", "placeholder", "changeme", "change_me", "change-me", "redacted",
    "dummy", "xxxx", "****", "...", "${", "{{", "_here", "-here", "<secret:",
)  # fmt: skip
_MASK_CHARS = frozenset("xX*.-_#?0•")


def is_placeholder(value: str) -> bool:
    """A value that stands for a secret without being one (`YOUR_API_KEY`, `$TOKEN`, `xxx`)."""
    if not value or value[0] in "$%{<[*#@&":
        return True
    if set(value) <= _MASK_CHARS:
        return True
    low = value.lower()
    return low in _PLACEHOLDER_WORDS or any(p in low for p in _PLACEHOLDER_PARTS)


def char_classes(value: str) -> int:
    """How many of lower case, upper case, digits and symbols (not `_`) a value mixes."""
    lower = upper = digit = symbol = False
    for c in value:
        if c.islower():
            lower = True
        elif c.isupper():
            upper = True
        elif c.isdigit():
            digit = True
        elif c != "_":
            symbol = True
    return lower + upper + digit + symbol


def strong(value: str) -> bool:
    """Random-looking enough to be a credential wherever it stands (not a word or a name)."""
    classes = char_classes(value)
    return (len(value) >= 8 and classes >= 3) or (len(value) >= 12 and classes >= 2)


_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{16,}")


def random_run(token: str) -> bool:
    """Holds a 16+ character alphanumeric run mixing two classes: random, not words."""
    return any(char_classes(run) >= 2 for run in _ALNUM_RUN.findall(token))


def mixed_case(token: str) -> bool:
    """Holds both lower and upper case letters."""
    return any(c.islower() for c in token) and any(c.isupper() for c in token)


def at_boundary(text: str, start: int) -> bool:
    """A token starts here: after a non-word character, or right after a JSON escape.

    Tool-call arguments are JSON text, where a key at the start of a line follows a literal
    backslash-n. (Checked here, not in a lookbehind: a pattern that starts with a literal is
    scanned many times faster by `re`.)
    """
    if start == 0:
        return True
    before = text[start - 1]
    if not (before.isalnum() or before in "_-"):
        return True
    return before in "nrt" and start >= 2 and text[start - 2] == "\\"


def before(text: str, pos: int, n: int) -> str:
    """The `n` characters before `pos` (fewer at the start; never wrapping around)."""
    return text[max(0, pos - n) : pos]


def unescaped_backslash(text: str, index: int) -> bool:
    """`text[index]` is a backslash that escapes the next character."""
    n = 0
    while index - n >= 0 and text[index - n] == "\\":
        n += 1
    return n % 2 == 1


class Intervals:
    """Disjoint `[start, end)` intervals with a logarithmic overlap test."""

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in intervals:
            self.add(start, end)

    def overlaps(self, start: int, end: int) -> bool:
        """Whether `[start, end)` overlaps an interval held."""
        i = bisect.bisect_right(self._starts, start)
        if i and self._ends[i - 1] > start:
            return True
        return i < len(self._starts) and self._starts[i] < end

    def add(self, start: int, end: int) -> None:
        """Hold `[start, end)`, which must not overlap an interval held."""
        i = bisect.bisect_right(self._starts, start)
        self._starts.insert(i, start)
        self._ends.insert(i, end)
