"""The allow-list: values redaction never replaces, from exact strings or whole-match regexes.

Its own module because it is configuration, read by the CLI and the proxy before any text is
redacted, and it travels to ingest workers inside the ingest stamp (frozen, picklable).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AllowList", "as_allow_list"]


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
