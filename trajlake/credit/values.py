"""Credit's built-in value sources and their registration: V(s_0) … V(s_T) per trajectory from
outcomes, prefix Monte Carlo, groups, the prefix logistic model, cross-fitted text models,
anchors, progress, the judge and ensembles.

Every built-in is one `ValueSourceSpec` in `trajlake.credit.registry`, registered when this
module is imported (`trajlake.credit` imports it). The heavier sources are imported inside their
builders, so naming one costs nothing until it is built, and so that `ensemble` (which looks its
components up in the registry) and this table do not import each other. Sources that need torch
(`value-model:<dir>`, `hindsight:`) live in `trajlake.value` and arrive through entry points.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from trajlake.credit._types import TrajectoryTurns, ValueSource
from trajlake.credit.prefix_mc import PrefixMCValues, action_key, with_outcome
from trajlake.credit.registry import ValueSourceSpec, register_value_source
from trajlake.errors import TrajlakeError

__all__ = ["AdvantageSource", "GroupValues", "OutcomeValues", "PrefixMCValues", "action_key"]


class OutcomeValues:
    """The baseline: V(s_t) = outcome for every t, so every TD credit is 0."""

    name = "outcome"

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Outcome broadcast to the T + 1 states (trajectories without outcome left out)."""
        return {
            t.trajectory_id: [float(t.outcome)] * (len(t.turns) + 1)  # type: ignore[arg-type]
            for t in with_outcome(trajectories)
        }


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
        for t in with_outcome(trajectories):
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
            for t in with_outcome(trajectories)
        }


# -- builders (lazy imports: see the module docstring) ----------------------------------------


def _outcome(name: str, **kw: Any) -> ValueSource:
    return OutcomeValues(**kw)


def _prefix_mc(name: str, **kw: Any) -> ValueSource:
    if "prior" in kw:
        kw["prior"] = tuple(kw["prior"])
    return PrefixMCValues(**kw)


def _group(name: str, **kw: Any) -> ValueSource:
    return GroupValues("rloo" if name == "group:rloo" else "grpo", **kw)


def _crossfit(name: str, **kw: Any) -> ValueSource:
    from trajlake.credit.crossfit import CrossFitTextValues

    if name.endswith("-task"):  # the task's leave-one-out success rate as two scalars
        kw.setdefault("task_prior", True)
    return CrossFitTextValues("td" if name.startswith("crossfit:text-td") else "mc", **kw)


def _progress(name: str, **kw: Any) -> ValueSource:
    from trajlake.credit.progress import ProgressValues

    return ProgressValues("spa" if name == "progress" else "td", **kw)


def _anchor(name: str, **kw: Any) -> ValueSource:
    from trajlake.credit.anchored import AnchoredValues

    return AnchoredValues(**kw)


def _prefix_model(name: str, **kw: Any) -> ValueSource:
    from trajlake.credit.value_model import PrefixModelValues

    target = name.removeprefix("value-model:")
    if target in ("", "builtin"):
        return PrefixModelValues(**kw)
    return PrefixModelValues.load(target)


def _ensemble(name: str, **kw: Any) -> ValueSource:
    from trajlake.credit.ensemble import EnsembleValues, parse_ensemble

    return EnsembleValues(parse_ensemble(name), **kw)


def _judge(name: str, **kw: Any) -> ValueSource:
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


def _not_a_directory(target: str) -> bool:
    # A directory is a neural prefix model from `trajlake train value`: the value package's
    # `value-model:` spec (an entry point) takes it. `builtin` and "" are checked first, as
    # `Path("")` is the current directory.
    return target in ("", "builtin") or not Path(target).is_dir()


_VALUE_MODEL_USAGE = "value-model:<path.json|model dir|builtin>"

BUILTIN_SOURCES: tuple[ValueSourceSpec, ...] = (
    ValueSourceSpec("outcome", _outcome, leaks_outcome=True),
    ValueSourceSpec("prefix-mc", _prefix_mc),
    ValueSourceSpec("group", _group, leaks_outcome=True),
    ValueSourceSpec("group:grpo", _group, usage="group", leaks_outcome=True),
    ValueSourceSpec("group:rloo", _group),
    ValueSourceSpec(
        "value-model:builtin", _prefix_model, usage=_VALUE_MODEL_USAGE, leaks_outcome=True
    ),
    ValueSourceSpec(
        "value-model:",
        _prefix_model,
        usage=_VALUE_MODEL_USAGE,
        accepts=_not_a_directory,
    ),
    ValueSourceSpec("judge", _judge, needs_lake=True),
    ValueSourceSpec("judge:rubric", _judge, needs_lake=True, reads_observations=True),
    *(
        ValueSourceSpec(name, _crossfit, reads_observations=True)
        for name in (
            "crossfit:text",
            "crossfit:text-td",
            "crossfit:text-task",
            "crossfit:text-td-task",
        )
    ),
    ValueSourceSpec("anchor", _anchor, reads_observations=True),
    ValueSourceSpec("progress", _progress, reads_observations=True),
    ValueSourceSpec("progress-td", _progress, reads_observations=True),
    ValueSourceSpec("ensemble:", _ensemble, usage="ensemble:<a>+<b>+...", reads_observations=True),
)
"""Credit's own value sources (no torch), in the order they are listed."""

for _spec in BUILTIN_SOURCES:
    register_value_source(_spec)
