"""Value sources: V(s_0) … V(s_T) per trajectory from outcomes, prefix Monte Carlo, groups, models.

`value_source(name)` resolves the names the CLI and `run_credit` accept: `outcome`, `prefix-mc`,
`group` (GRPO), `group:rloo`, `value-model:<path.json | builtin>` and `judge`.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from trajlake.credit._types import TrajectoryTurns, Turn, ValueSource
from trajlake.errors import TrajlakeError


def _labelled(trajectories: Sequence[TrajectoryTurns]) -> list[TrajectoryTurns]:
    return [t for t in trajectories if t.outcome is not None]


class OutcomeValues:
    """The baseline: V(s_t) = outcome for every t, so every TD credit is 0."""

    name = "outcome"

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Outcome broadcast to the T + 1 states (trajectories without outcome left out)."""
        return {
            t.trajectory_id: [float(t.outcome)] * (len(t.turns) + 1)  # type: ignore[arg-type]
            for t in _labelled(trajectories)
        }


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
        labelled = _labelled(trajectories)
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


@runtime_checkable
class AdvantageSource(Protocol):
    """A source that also gives one advantage per trajectory, broadcast to its turns."""

    def advantages(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, float]:
        """Advantage by trajectory id."""
        ...


class GroupValues:
    """Group-relative (critic-free) estimates over the rollouts of each task.

    - `grpo`: A_i = (r_i − mean_j r_j) / (std_j r_j + eps), std with `ddof` (default 0);
    - `rloo`: A_i = r_i − mean_{j≠i} r_j (0 for a single rollout).

    How it plugs in: `advantages()` gives A_i, which `run_credit` broadcasts to every turn of
    rollout i (the `advantage` column). `values()` expresses the same baseline as values —
    V(s_t) = b_i for t < T (b = the group mean for GRPO, the leave-one-out mean for RLOO) and
    V(s_T) = r_i — so TD credit is r_i − b_i on the last turn and 0 elsewhere, and
    GAE(γ=1, λ=1) gives r_i − b_i on every turn (the unnormalised GRPO / exact RLOO advantage).
    """

    def __init__(self, kind: Literal["grpo", "rloo"] = "grpo", eps: float = 1e-4, ddof: int = 0):
        if kind not in ("grpo", "rloo"):
            raise ValueError(f"kind must be 'grpo' or 'rloo', got {kind!r}")
        self.kind = kind
        self.eps = eps
        self.ddof = ddof
        self.name = "group" if kind == "grpo" else "group:rloo"

    def _groups(self, trajectories: Sequence[TrajectoryTurns]) -> list[list[TrajectoryTurns]]:
        groups: dict[str, list[TrajectoryTurns]] = defaultdict(list)
        for t in _labelled(trajectories):
            groups[t.task_id if t.task_id is not None else "traj:" + t.trajectory_id].append(t)
        return list(groups.values())

    def baselines(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, float]:
        """b_i: the group mean (GRPO) or the mean of the other rollouts (RLOO; r_i if alone)."""
        out: dict[str, float] = {}
        for group in self._groups(trajectories):
            rewards = [float(t.outcome) for t in group]  # type: ignore[arg-type]
            total, n = sum(rewards), len(rewards)
            for t, r in zip(group, rewards, strict=True):
                if self.kind == "grpo":
                    out[t.trajectory_id] = total / n
                else:
                    out[t.trajectory_id] = (total - r) / (n - 1) if n > 1 else r
        return out

    def advantages(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, float]:
        """A_i per trajectory (GRPO: 0 when every rollout of the task scored the same)."""
        out: dict[str, float] = {}
        base = self.baselines(trajectories)
        for group in self._groups(trajectories):
            rewards = [float(t.outcome) for t in group]  # type: ignore[arg-type]
            mean = sum(rewards) / len(rewards)
            dof = len(rewards) - self.ddof
            var = sum((r - mean) ** 2 for r in rewards) / dof if dof > 0 else 0.0
            std = math.sqrt(var)
            for t, r in zip(group, rewards, strict=True):
                diff = r - base[t.trajectory_id]
                if self.kind == "rloo":
                    out[t.trajectory_id] = diff
                else:
                    out[t.trajectory_id] = 0.0 if std == 0 else diff / (std + self.eps)
        return out

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """V(s_t) = b_i for t < T, V(s_T) = r_i."""
        base = self.baselines(trajectories)
        return {
            t.trajectory_id: [base[t.trajectory_id]] * len(t.turns) + [float(t.outcome)]  # type: ignore[arg-type]
            for t in _labelled(trajectories)
        }


VALUE_SOURCES: tuple[str, ...] = (
    "outcome",
    "prefix-mc",
    "group",
    "group:rloo",
    "value-model:<path.json|model dir|builtin>",
    "judge",
    "crossfit:text",
    "crossfit:text-td",
    "crossfit:text-task",
    "crossfit:text-td-task",
    "anchor",
    "progress",
    "progress-td",
    "judge:rubric",
    "ensemble:<a>+<b>+...",
    "hindsight:<model name|model dir|fit>",
)
"""Names `value_source` accepts."""


class _SourceNames(tuple[str, ...]):
    """Source names; an entry ending in ':' also matches every name it prefixes (`ensemble:`)."""

    def __contains__(self, name: object) -> bool:
        return tuple.__contains__(self, name) or (
            isinstance(name, str) and any(p.endswith(":") and name.startswith(p) for p in self)
        )


TRANSCRIPT_SOURCES: tuple[str, ...] = _SourceNames(
    (
        "crossfit:text",
        "crossfit:text-td",
        "crossfit:text-task",
        "crossfit:text-td-task",
        "anchor",
        "progress",
        "progress-td",
        "judge:rubric",
        "ensemble:",
        "hindsight:",
    )
)
"""Sources that read the turns' observations from the lake (`run_credit` passes `lake`, `at`)."""


def value_source(name: str, **kw: Any) -> ValueSource:
    """The value source called `name`, built with keyword arguments `kw`.

    Names: `outcome`, `prefix-mc` (min_visits, prior), `group` / `group:grpo` (eps, ddof),
    `group:rloo`, `value-model:builtin` (a `PrefixModelValues` fitted on the labelled
    trajectories it values), `value-model:<path.json>` (a saved one), `value-model:<dir>` (a
    neural prefix-value model; needs `lake` and `at`), `judge`
    (`trajlake.credit.judge.JudgeValues`), `crossfit:text` / `crossfit:text-td` (a
    `CrossFitTextValues` with MC or TD(λ) targets: folds, seed, td_lambda, sweeps, l2, …) and
    `anchor` (`AnchoredValues`: prior, leave_one_out); the last three read observations when
    given `lake` (and `at`). `judge:rubric` is the judge with `prompt="rubric"` (rubric=<file>);
    `ensemble:<a>+<b>+...` an `EnsembleValues` of those sources (folds, seed,
    component_options). `hindsight:<model name|dir>` / `hindsight:fit` is a `HindsightValues`
    (causal-LM hindsight log-ratios; fit, folds, beta, max_tokens, device, …).
    """
    if name in ("crossfit:text", "crossfit:text-td", "crossfit:text-task", "crossfit:text-td-task"):
        from trajlake.credit.crossfit import CrossFitTextValues

        if name.endswith("-task"):  # the task's leave-one-out success rate as two scalars
            kw.setdefault("task_prior", True)
        return CrossFitTextValues("td" if name.startswith("crossfit:text-td") else "mc", **kw)
    if name in ("progress", "progress-td"):
        from trajlake.credit.progress import ProgressValues

        return ProgressValues("spa" if name == "progress" else "td", **kw)
    if name == "anchor":
        from trajlake.credit.anchored import AnchoredValues

        return AnchoredValues(**kw)
    if name == "outcome":
        return OutcomeValues(**kw)
    if name == "prefix-mc":
        if "prior" in kw:
            kw["prior"] = tuple(kw["prior"])
        return PrefixMCValues(**kw)
    if name in ("group", "group:grpo"):
        return GroupValues("grpo", **kw)
    if name == "group:rloo":
        return GroupValues("rloo", **kw)
    if name.startswith("value-model:"):
        from trajlake.credit.value_model import PrefixModelValues

        target = name.removeprefix("value-model:")
        if target in ("", "builtin"):
            return PrefixModelValues(**kw)
        if Path(target).is_dir():  # a neural prefix model from `trajlake train value`
            from trajlake.value.prefix_source import NeuralPrefixValues

            return NeuralPrefixValues(target, **kw)
        return PrefixModelValues.load(target)
    if name.startswith("hindsight:"):
        from trajlake.credit.hindsight import HindsightValues

        target = name.removeprefix("hindsight:")
        if target in ("", "fit"):
            return HindsightValues(None, fit=True, **kw)
        return HindsightValues(target, **kw)
    if name.startswith("ensemble:"):
        from trajlake.credit.ensemble import EnsembleValues, parse_ensemble

        return EnsembleValues(parse_ensemble(name), **kw)
    if name in ("judge", "judge:rubric"):
        if name == "judge:rubric":
            kw.setdefault("prompt", "rubric")
        try:
            from trajlake.credit.judge import JudgeValues  # type: ignore[import-not-found,unused-ignore]
        except ImportError as e:
            raise TrajlakeError(
                "the 'judge' value source is not available in this installation "
                f"(trajlake.credit.judge could not be imported: {e})"
            ) from e
        source: ValueSource = JudgeValues(**kw)
        return source
    raise ValueError(f"unknown value source {name!r}; known: {', '.join(VALUE_SOURCES)}")
