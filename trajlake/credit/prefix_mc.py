"""`prefix-mc` — Monte-Carlo values over rollouts of one task that share a normalised action
prefix, and the action normalisation (`action_key`) that decides when prefixes are shared.

A module of its own because two layers of credit build on it: the built-in registry
(`values`) and the ensemble's leave-one-out variant, which must not import each other.
"""

from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from trajlake.credit._types import TrajectoryTurns, Turn


def with_outcome(trajectories: Sequence[TrajectoryTurns]) -> list[TrajectoryTurns]:
    """The trajectories with an outcome (the only ones a value source must value)."""
    return [t for t in trajectories if t.outcome is not None]


def action_key(turn: Turn) -> str:
    """A turn's action normalised for prefix matching across rollouts of one task.

    Each tool call `name(arguments)` becomes `name`, plus — when its arguments are a JSON
    object — the first word of a string `command` argument (`grep`, `python`, `view`) and the
    base name of a string `path` / `file` / `file_path` argument. Other arguments (search
    strings, edit bodies) are dropped, so near-identical actions share a prefix node. A turn
    without tool calls is `text`.
    """
    parts: list[str] = []
    lines = turn.action_text.splitlines()
    for name in turn.tool_names:
        args: Any = None
        for line in lines:
            if line.startswith(name + "(") and line.endswith(")"):
                try:
                    args = json.loads(line[len(name) + 1 : -1])
                except ValueError:
                    args = None
                break
        key = name
        if isinstance(args, dict):
            command = args.get("command")
            if isinstance(command, str) and command.split():
                key += ":" + posixpath.basename(command.split()[0])
            for field in ("path", "file", "file_path"):
                value = args.get(field)
                if isinstance(value, str) and value:
                    key += ":" + posixpath.basename(value.rstrip("/"))
                    break
        parts.append(key)
    return "|".join(parts) if parts else "text"


class PrefixMCValues:
    """Monte-Carlo values over rollouts of the same task that share a normalised action prefix.

    V(s_t) of a trajectory is the smoothed success rate (k + a) / (n + a + b) of the n rollouts
    of its task whose first t actions match its own (`action_key`), k of them successful. Below
    `min_visits` rollouts the value of the longest shorter prefix with enough visits is used
    (the empty prefix, all rollouts of the task, is always used). V(s_T) is the outcome.
    Rollouts without a task id form a task of their own. (Prior (1, 1): RTMC's (k+1)/(n+2).)
    """

    name = "prefix-mc"

    def __init__(self, min_visits: int = 2, prior: tuple[float, float] = (1.0, 1.0)) -> None:
        if min_visits < 1:
            raise ValueError(f"min_visits must be >= 1, got {min_visits}")
        if prior[0] < 0 or prior[1] < 0:
            raise ValueError(f"prior pseudo-counts must be >= 0, got {prior}")
        self.min_visits = min_visits
        self.prior = (float(prior[0]), float(prior[1]))

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Prefix values of the labelled trajectories."""
        labelled = with_outcome(trajectories)
        keys = {t.trajectory_id: [action_key(turn) for turn in t.turns] for t in labelled}
        visits: dict[tuple[Any, ...], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for t in labelled:
            task = t.task_id if t.task_id is not None else "traj:" + t.trajectory_id
            acts = keys[t.trajectory_id]
            for depth in range(len(acts) + 1):
                node = visits[(task, *acts[:depth])]
                node[0] += 1
                node[1] += float(t.outcome)  # type: ignore[arg-type]
        a, b = self.prior
        out: dict[str, list[float]] = {}
        for t in labelled:
            task = t.task_id if t.task_id is not None else "traj:" + t.trajectory_id
            acts = keys[t.trajectory_id]
            curve: list[float] = []
            for depth in range(len(acts)):
                n, k = visits[(task, *acts[:depth])]
                if depth == 0 or n >= self.min_visits:
                    curve.append((k + a) / (n + a + b) if n + a + b > 0 else 0.0)
                else:
                    curve.append(curve[-1])
            curve.append(float(t.outcome))  # type: ignore[arg-type]
            out[t.trajectory_id] = curve
        return out
