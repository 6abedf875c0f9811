"""One base for adapters whose files hold one trajectory per JSON line.

Such formats differ only in two things: which first line is theirs (a key test) and how one
line's object maps to a trajectory (a record builder). The rest is the same for all and lives
here once: the sniff reads the first line of the head and, when that line is longer than the
head, lets the adapter judge by how it starts; the read goes through `iter_json_lines` (line
numbers, byte offsets, the byte-order mark, `max_line_bytes`, invalid UTF-8 and JSON as bad
records) and `to_parsed` (one error contract for mapping and validation). A subclass states
`sniff_value`, optionally `sniff_prefix`, and `builder`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from trajlake.ingest._adapter import BadRecord, Parsed, iter_json_lines, to_parsed
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory

Builder = Callable[[Any], dict[str, Any]]
"""One line's JSON value → a trajectory dict (raises ValueError/TypeError when it cannot)."""


@dataclass(frozen=True)
class FirstLine:
    """The first line of a file's head, for sniffing.

    Attributes:
        text: The line without leading whitespace and without its newline.
        complete: A newline ends it within the head (else it may go on past the head).
        parsed: The line is JSON.
        value: Its JSON value (None when it is not JSON).
    """

    text: bytes
    complete: bool
    parsed: bool
    value: Any


def first_line(head: bytes) -> FirstLine:
    """The first non-blank line of `head`, parsed when it is JSON."""
    text, newline, _ = head.lstrip().partition(b"\n")
    try:
        return FirstLine(text, bool(newline), True, json.loads(text))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return FirstLine(text, bool(newline), False, None)


def json_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object.

    Raises:
        TypeError: it is not (the message every adapter gives for such a line).
    """
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


class JsonLinesAdapter:
    """Base of the adapters that read one trajectory per JSON line."""

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Confidence from the first line: its JSON value, or how it starts when it is cut."""
        line = first_line(head)
        if line.parsed:
            return self.sniff_value(line.value)
        return self.sniff_prefix(line.text, line.complete)

    def sniff_value(self, value: Any) -> float:
        """Confidence in [0, 1] that a file whose first line is `value` is in this format."""
        raise NotImplementedError

    def sniff_prefix(self, text: bytes, complete: bool) -> float:
        """Confidence from a first line that is not JSON: often one longer than the head
        (`complete` False), judged by the keys it starts with. None by default."""
        return 0.0

    def builder(self, source: SourceFile, stream: IO[bytes]) -> Builder:
        """The record builder for this file (it may look at the file first, then rewind)."""
        raise NotImplementedError

    def finish(self, record: CanonicalTrajectory) -> CanonicalTrajectory:
        """The validated record completed (derived fields); as it is by default."""
        return record

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory per line; a line that does not map or validate becomes a BadRecord."""
        build = self.builder(source, stream)
        finish = None if type(self).finish is JsonLinesAdapter.finish else self.finish
        for line, offset, raw, value in iter_json_lines(stream):
            if isinstance(value, BadRecord):
                yield value
                continue
            mapped = functools.partial(build, value)
            yield to_parsed(mapped, line=line, offset=offset, raw=raw, finish=finish)
