"""The key structure of a JSON or JSON-lines file, read by streaming, for format detection.

A trajectory file's telling keys can sit far from its start (a mini-swe-agent file writes
`trajectory_format` after a long patch and all its messages), so the first 64 KiB do not
always show them. The scanner walks the first JSON value without building it: long strings
and deep containers are skipped, never held, and it stops after a byte budget. It keeps the
top-level keys (of the document, of the first line, or of the first array element), their
short scalar values, and one level below them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import IO, Literal

from trajlake.ingest._limits import MiB

SCAN_BUDGET = 64 * MiB
"""Bytes the scanner may read from a file (a long first value is judged by what it has)."""
_VALUE_KEPT = 256
_READ = 1 << 20
_STRUCTURAL = re.compile(rb'[\[\]{}"]')
_STRING_END = re.compile(rb'[\\"\n]')  # a raw newline cannot be inside a JSON string
_SCALAR = re.compile(rb"[^\s,\]}:]+")
_SPACE = b" \t\r\n"

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Shape:
    """The keys of one JSON object, in order, with the kind of each value."""

    keys: tuple[str, ...] = ()
    kinds: dict[str, str] = field(default_factory=dict)
    """key → object, array, string, number, true, false or null."""
    values: dict[str, Scalar] = field(default_factory=dict)
    """Short scalar values (strings up to 256 bytes)."""
    children: dict[str, Shape] = field(default_factory=dict)
    """key → the shape of an object value, or of the first object in an array value."""


@dataclass(frozen=True)
class KeyStructure:
    """What the start of a file shows about its structure."""

    container: Literal["object", "array", "none"]
    """The first JSON value: an object, an array, or no JSON at all."""
    shape: Shape = field(default_factory=Shape)
    """The object's keys, or those of the array's first object element."""
    records: int = 0
    """Top-level JSON values seen (two or more: a JSON-lines file)."""
    complete: bool = False
    """The first value was scanned to its end within the budget."""

    @property
    def json_lines(self) -> bool:
        """Whether a second JSON value follows the first (one record per line)."""
        return self.records >= 2

    def describe(self) -> str:
        """The keys seen, for messages (`{messages, info}` or `[{role, content}]`)."""
        keys = ", ".join(self.shape.keys[:12]) + (", …" if len(self.shape.keys) > 12 else "")
        if self.container == "array":
            return f"[{{{keys}}}]"
        return f"{{{keys}}}"


class _Truncated(Exception):
    """The data ended (or the budget ran out) inside the value being scanned."""

    def __init__(self) -> None:
        super().__init__()
        self.partials: list[Shape] = []
        """Shapes of the objects left open, innermost first, as far as they were read."""


class _NotJson(Exception):
    """The bytes are not JSON where a value was expected."""


class _Scanner:
    """A cursor over a stream that refills and forgets what it has passed."""

    def __init__(self, first: bytes, stream: IO[bytes] | None, budget: int) -> None:
        self.buf = first
        self.pos = 0
        self.stream = stream
        self.left = budget - len(first)

    def fill(self) -> bool:
        if self.stream is None or self.left <= 0:
            return False
        data = self.stream.read(min(_READ, self.left))
        if not data:
            self.stream = None
            return False
        self.left -= len(data)
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> int | None:
        """The next byte that is not whitespace (None at the end of the data)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return None

    def expect(self, char: bytes) -> None:
        if self.peek() != char[0]:
            raise _NotJson(f"expected {char.decode()!r}")
        self.pos += 1

    def string(self, keep: int) -> str | None:
        """Pass a string (cursor on its quote): its text when at most `keep` bytes, else None."""
        self.pos += 1
        kept = bytearray()
        long = False
        while True:
            match = _STRING_END.search(self.buf, self.pos)
            if match is None:
                long = long or len(kept) + len(self.buf) - self.pos > keep
                if not long:
                    kept += self.buf[self.pos :]
                self.pos = len(self.buf)
                if not self.fill():
                    raise _Truncated
                continue
            end = match.start()
            long = long or len(kept) + end - self.pos > keep
            if not long:
                kept += self.buf[self.pos : end]
            if self.buf[end] == 0x22:  # the closing quote
                self.pos = end + 1
                break
            if self.buf[end] == 0x0A:
                raise _NotJson("line break inside a string (a damaged line?)")
            while end + 1 >= len(self.buf):  # an escape split across reads
                self.pos = end
                if not self.fill():
                    raise _Truncated
                end = self.pos
            if not long:
                kept += self.buf[end : end + 2]
            self.pos = end + 2
        if long:
            return None
        try:
            text = json.loads(b'"' + bytes(kept) + b'"')
        except ValueError as e:
            raise _NotJson("bad string") from e
        return text if isinstance(text, str) else None

    def skip_container(self) -> None:
        """Pass an object or array (cursor on its bracket) without building it."""
        depth = 0
        while True:
            match = _STRUCTURAL.search(self.buf, self.pos)
            if match is None:
                self.pos = len(self.buf)
                if not self.fill():
                    raise _Truncated
                continue
            char = self.buf[match.start()]
            self.pos = match.start()
            if char == 0x22:
                self.string(0)
                continue
            self.pos += 1
            depth += 1 if char in b"[{" else -1
            if depth == 0:
                return

    def scalar(self) -> Scalar:
        while True:
            match = _SCALAR.match(self.buf, self.pos)
            if match is None:
                raise _NotJson("expected a value")
            if match.end() < len(self.buf) or not self.fill():
                break
        token = match.group()
        self.pos = match.end()
        if token in (b"true", b"false", b"null"):
            return {b"true": True, b"false": False, b"null": None}[token]
        try:
            number = json.loads(token)
        except ValueError as e:
            raise _NotJson("not JSON") from e
        if isinstance(number, (int, float)):
            return number
        raise _NotJson("not JSON")


def _kind(char: int) -> str:
    return {0x7B: "object", 0x5B: "array", 0x22: "string", 0x74: "true", 0x66: "false"}.get(
        char, "null" if char == 0x6E else "number"
    )


def _object(scan: _Scanner, depth: int) -> Shape:
    """The shape of the object at the cursor; values below `depth` levels are skipped."""
    scan.expect(b"{")
    keys: list[str] = []
    kinds: dict[str, str] = {}
    values: dict[str, Scalar] = {}
    children: dict[str, Shape] = {}
    try:
        if scan.peek() == 0x7D:
            scan.pos += 1
            return Shape()
        while True:
            if scan.peek() != 0x22:
                raise _Truncated if scan.peek() is None else _NotJson("expected a key")
            key = scan.string(_VALUE_KEPT) or ""
            scan.expect(b":")
            char = scan.peek()
            if char is None:
                raise _Truncated
            keys.append(key)
            kinds[key] = _kind(char)
            _value(scan, key, char, depth, values, children)
            after = scan.peek()
            scan.pos += 1
            if after == 0x7D:
                return Shape(tuple(keys), kinds, values, children)
            if after != 0x2C:
                raise _Truncated if after is None else _NotJson("expected ',' or '}'")
    except _Truncated as e:
        e.partials.append(Shape(tuple(keys), kinds, values, children))
        raise


def _value(
    scan: _Scanner,
    key: str,
    char: int,
    depth: int,
    values: dict[str, Scalar],
    children: dict[str, Shape],
) -> None:
    """Pass the value of `key`, keeping a short scalar or the shape one level down."""
    if char == 0x22:
        text = scan.string(_VALUE_KEPT)
        if text is not None:
            values[key] = text
    elif char in b"{[" and depth > 1:
        try:
            child = _object(scan, depth - 1) if char == 0x7B else _array(scan, depth - 1)
        except _Truncated as e:
            if e.partials:
                children[key] = e.partials.pop()
            raise
        if child is not None:
            children[key] = child
    elif char in b"{[":
        scan.skip_container()
    else:
        values[key] = scan.scalar()


def _array(scan: _Scanner, depth: int) -> Shape | None:
    """The shape of the array's first element when it is an object; the rest is skipped."""
    start = scan.pos
    scan.expect(b"[")
    if scan.peek() != 0x7B:
        scan.pos = start
        scan.skip_container()
        return None
    first = _object(scan, depth)
    try:
        while True:  # the remaining elements
            after = scan.peek()
            scan.pos += 1
            if after == 0x5D:
                return first
            if after != 0x2C:
                raise _Truncated if after is None else _NotJson("expected ',' or ']'")
            char = scan.peek()
            if char is None:
                raise _Truncated
            if char in b"{[":
                scan.skip_container()
            elif char == 0x22:
                scan.string(0)
            else:
                scan.scalar()
    except _Truncated as e:
        e.partials.append(first)
        raise


def scan_keys(head: bytes, stream: IO[bytes] | None, budget: int = SCAN_BUDGET) -> KeyStructure:
    """The key structure of the data that starts with `head` and goes on in `stream`.

    Reads at most `budget` bytes in all; `stream` is None when `head` is the whole file.
    """
    scan = _Scanner(head.removeprefix(b"\xef\xbb\xbf"), stream, budget)
    char = scan.peek()
    if char not in (0x7B, 0x5B):
        return KeyStructure("none")
    container: Literal["object", "array"] = "object" if char == 0x7B else "array"
    try:
        shape = _object(scan, 2) if container == "object" else _array(scan, 2)
    except _Truncated as e:
        return KeyStructure(container, e.partials[-1] if e.partials else Shape(), 1)
    except _NotJson:
        return KeyStructure("none")
    records = 1
    try:
        if scan.peek() in (0x7B, 0x5B):  # a second value: JSON lines
            records = 2
    except _Truncated:
        pass
    return KeyStructure(container, shape or Shape(), records, complete=True)
