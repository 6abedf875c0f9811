"""Progress reporting as an injected protocol: the library never draws; the CLI may.

Long operations (ingest, export, training) take a `Progress` and default to `NullProgress`, so the
library has no dependency on a terminal or on rich; `trajlake.cli.progress` supplies the bars.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives progress of long work (ingest, export, training)."""

    def start(self, description: str, total: float | None) -> None:
        """Work begins; `total` in the unit `advance` uses (bytes, rows...), None if unknown."""

    def advance(self, amount: float) -> None:
        """`amount` more units are done."""

    def finish(self) -> None:
        """Work is done."""


class NullProgress:
    """The default: reports nothing."""

    def start(self, description: str, total: float | None) -> None:
        """Ignore."""

    def advance(self, amount: float) -> None:
        """Ignore."""

    def finish(self) -> None:
        """Ignore."""
