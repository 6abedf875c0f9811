"""The shapes credit assignment works on: turns of a trajectory and per-turn values.

A turn t (0-based) is the t-th assistant message of a thread together with the tool results /
observations that follow it. A value source gives, for a trajectory with T turns, the T + 1
values V(s_0) … V(s_T): V(s_t) is the value before turn t, and V(s_T) is the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Turn:
    """One agent turn: the action and what came back."""

    trajectory_id: str
    thread: str
    turn: int
    action_text: str
    """The assistant's content plus its tool calls rendered as `name(arguments)`, one per line."""
    tool_names: tuple[str, ...]
    is_error: bool
    """Some observation of the turn reported an error (tool error flag or non-zero exit code)."""
    tokens: int | None
    """Completion tokens of the assistant message, when known."""


@dataclass
class TrajectoryTurns:
    """A trajectory's turns in one thread, with its task and outcome."""

    trajectory_id: str
    task_id: str | None
    outcome: float | None
    """1.0 resolved / 0.0 unresolved (or the reward), None when unknown."""
    thread: str = "main"
    turns: list[Turn] = field(default_factory=list)


class ValueSource(Protocol):
    """Gives V(s_0) … V(s_T) for each trajectory (T + 1 values, the last one the outcome)."""

    name: str

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Values by trajectory id; trajectories without an outcome may be left out."""
        ...
