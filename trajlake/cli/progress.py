"""Progress bars (rich, on stderr) for long commands, drawn only when stderr is a terminal.

The library reports progress through the `trajlake._progress.Progress` protocol and never draws;
this is the one implementation that does. Bars and log records share one stderr console so log
lines print above a live bar, and stdout stays free for results.
"""

from __future__ import annotations

import sys
from typing import Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichBar

from trajlake._progress import Progress

Unit = Literal["bytes", "items"]

_STDERR = Console(stderr=True)
"""Shared by progress bars and log records, so log lines print above a live bar."""


def stderr_console() -> Console:
    """The console progress and logs draw on."""
    return _STDERR


class RichProgress:
    """A `trajlake._progress.Progress` drawn as a rich progress bar."""

    def __init__(self, console: Console, unit: Unit = "bytes") -> None:
        self._console = console
        self._unit = unit
        self._bar: RichBar | None = None
        self._task: TaskID | None = None

    def _columns(self) -> list[ProgressColumn | str]:
        head: list[ProgressColumn | str] = [
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
        ]
        if self._unit == "bytes":
            return [*head, DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()]
        return [*head, MofNCompleteColumn(), TimeElapsedColumn()]

    def start(self, description: str, total: float | None) -> None:
        """Show the bar (`total` None: an open-ended count)."""
        self.finish()
        self._bar = RichBar(*self._columns(), console=self._console, transient=True)
        self._bar.start()
        self._task = self._bar.add_task(description, total=total or None)

    def advance(self, amount: float) -> None:
        """Move the bar."""
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, amount)

    def finish(self) -> None:
        """Remove the bar."""
        if self._bar is not None:
            self._bar.stop()
        self._bar = None
        self._task = None


def progress_for(unit: Unit) -> Progress | None:
    """A progress bar when stderr is a terminal, else None (the library reports nothing)."""
    # isatty, not rich's terminal detection: FORCE_COLOR in CI must not draw bars into logs.
    isatty = getattr(sys.stderr, "isatty", None)
    if isatty is None or not isatty():
        return None
    return RichProgress(stderr_console(), unit)
