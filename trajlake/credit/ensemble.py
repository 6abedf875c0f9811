"""`ensemble:<a>+<b>+...` — value sources combined with weights cross-fitted by task.

V(s_t) = b + Σ_c w_c · V_c(s_t) (clipped to [0, 1]) with non-negative w_c and a free intercept b,
fitted by least squares against the trajectory's outcome on the states s_0 … s_{T−1} of the
tasks *outside* the fold being valued, so no trajectory is valued with weights fitted on its task.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trajlake.credit._folds import task_folds, task_key
from trajlake.credit._types import TrajectoryTurns, ValueSource
from trajlake.credit.prefix_mc import PrefixMCValues, action_key
from trajlake.credit.registry import value_source_spec
from trajlake.errors import TrajlakeError

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

__all__ = [
    "MAX_COMPONENTS",
    "EnsembleValues",
    "FoldWeights",
    "LeaveOneOutPrefixMC",
    "fit_nonnegative",
    "parse_ensemble",
]

log = logging.getLogger(__name__)

PREFIX = "ensemble:"
MAX_COMPONENTS = 8
"""The exact non-negative fit tries every subset of components: 2^8 tiny solves at most."""

_TIE = 1e-9


def parse_ensemble(name: str) -> list[str]:
    """The component names of `ensemble:<a>+<b>+...` (at least two, distinct, not nested)."""
    if not name.startswith(PREFIX):
        raise ValueError(f"an ensemble name starts with {PREFIX!r}, got {name!r}")
    parts = [p.strip() for p in name.removeprefix(PREFIX).split("+")]
    if any(not p for p in parts):
        raise ValueError(f"empty component in {name!r}; write ensemble:<a>+<b>+...")
    _check_names(parts)
    return parts


def _check_names(parts: Sequence[str]) -> None:
    if len(parts) < 2:
        raise ValueError(f"an ensemble needs at least 2 components, got {list(parts)}")
    if len(parts) > MAX_COMPONENTS:
        raise ValueError(f"an ensemble takes at most {MAX_COMPONENTS} components, got {len(parts)}")
    if len(set(parts)) != len(parts):
        raise ValueError(f"ensemble components repeat: {list(parts)}")
    nested = [p for p in parts if p.startswith(PREFIX)]
    if nested:
        raise ValueError(f"ensembles do not nest: {nested[0]!r}")


@dataclass(frozen=True)
class FoldWeights:
    """The combination used for one fold, fitted on the other folds' tasks."""

    intercept: float
    weights: dict[str, float]
    rows: int
    """Training states (s_0 … s_{T−1} of the labelled trajectories of the other folds)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"intercept": self.intercept, "weights": dict(self.weights), "rows": self.rows}


def fit_nonnegative(gram: np.ndarray, xty: np.ndarray, yty: float) -> tuple[np.ndarray, float]:
    """Exact least squares with a free intercept and non-negative weights, from sufficient stats.

    `gram` = ZᵀZ and `xty` = Zᵀy for Z = [1, X] (the intercept first). Every subset of the
    components is solved unconstrained; the best subset whose weights are all ≥ 0 is the
    non-negative optimum (ties go to the smaller subset). Returns ([b, w_1 … w_K], SSE).
    """
    k = gram.shape[0] - 1
    best: tuple[np.ndarray, float] | None = None
    for size in range(k + 1):
        for subset in itertools.combinations(range(1, k + 1), size):
            idx = [0, *subset]
            sol = np.linalg.lstsq(gram[np.ix_(idx, idx)], xty[idx], rcond=None)[0]
            if np.any(sol[1:] < 0):
                continue
            coef = np.zeros(k + 1)
            coef[idx] = sol
            sse = float(yty - 2 * coef @ xty + coef @ gram @ coef)
            if best is None or sse < best[1] - _TIE * max(abs(yty), 1.0):
                best = (coef, sse)
    assert best is not None  # the intercept-only subset is always feasible
    return best


class EnsembleValues:
    """Value source: a non-negative linear combination of other sources, cross-fitted by task.

    Labelled tasks are shuffled with `seed` and dealt into `folds` folds (the same deal as
    `crossfit:*` with the same seed and folds). For fold f, the weights are fitted on the
    states s_0 … s_{T−1} of the labelled trajectories of the other folds: least squares of the
    outcome on [1, V_1(s_t) … V_K(s_t)] with w ≥ 0. Trajectories of fold f (and unlabelled ones,
    dealt to a stable fold by task) are valued with those weights; V(s_T) is the outcome when
    known. After `values()`, `fold_weights`, `fold_of_task` and `train_tasks` say what was used.
    """

    def __init__(
        self,
        components: Sequence[str | ValueSource],
        *,
        folds: int = 5,
        seed: int = 0,
        component_options: Mapping[str, Mapping[str, Any]] | None = None,
        lake: LakeStore | None = None,
        at: SnapshotRef = None,
    ) -> None:
        """Build the components.

        Args:
            components: value source names (`value_source`) or value source objects.
            folds: task folds of the weight fit (≥ 2).
            seed: seed of the task shuffle.
            component_options: keyword arguments per component name, e.g.
                `{"judge": {"base_url": ..., "model": ...}, "crossfit:text-td": {"folds": 10}}`.
            lake, at: given to components that read observations or cache calls in the lake.
        """
        if folds < 2:
            raise ValueError(f"folds must be >= 2 (weights are fitted out of fold), got {folds}")
        names = [c if isinstance(c, str) else c.name for c in components]
        _check_names(names)
        options = dict(component_options or {})
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(f"component_options for {unknown} name no component of {names}")
        self.names = names
        self.name = PREFIX + "+".join(names)
        self.folds, self.seed = folds, seed
        self.sources: list[ValueSource] = [
            c if not isinstance(c, str) else _component(c, options.get(c, {}), lake, at)
            for c in components
        ]
        self.fold_of_task: dict[str, int] = {}
        self.train_tasks: list[set[str]] = []
        self.fold_weights: list[FoldWeights] = []
        self.left_out: list[str] = []
        """Trajectories left out because some component gave them no values."""

    def assign_folds(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, int]:
        """Fold of every task (`task_folds`: labelled tasks shuffled by `seed`, round-robin)."""
        return task_folds(
            trajectories,
            folds=self.folds,
            seed=self.seed,
            name=self.name,
            remedy="label more tasks",
        )

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Out-of-fold combined V(s_0) … V(s_T) of the trajectories every component valued."""
        curves = [source.values(trajectories) for source in self.sources]
        kept: list[TrajectoryTurns] = []
        self.left_out = []
        for t in trajectories:
            if all(
                _usable(c.get(t.trajectory_id), t, name)
                for c, name in zip(curves, self.names, strict=True)
            ):
                kept.append(t)
            else:
                self.left_out.append(t.trajectory_id)
        if self.left_out:
            log.warning(
                "%s: %d trajectories left out (some component gave them no values; first: %s)",
                self.name,
                len(self.left_out),
                self.left_out[0],
            )
        fold = self.fold_of_task = self.assign_folds(kept)
        k = max(fold.values()) + 1
        stats = self._fold_stats(kept, curves, fold, k)
        self.fold_weights, self.train_tasks = [], []
        for f in range(k):
            others = [s for g, s in enumerate(stats) if g != f]
            gram = np.sum([s[0] for s in others], axis=0)
            xty = np.sum([s[1] for s in others], axis=0)
            coef, _ = fit_nonnegative(gram, xty, sum(s[2] for s in others))
            weights = dict(zip(self.names, coef[1:].tolist(), strict=True))
            rows = sum(s[3] for s in others)
            self.fold_weights.append(FoldWeights(float(coef[0]), weights, rows))
            self.train_tasks.append(
                {task_key(t) for t in kept if t.outcome is not None and fold[task_key(t)] != f}
            )
        log.info("%s fold weights: %s", self.name, [w.to_dict() for w in self.fold_weights])
        return {t.trajectory_id: self._combine(t, curves, fold) for t in kept}

    def _fold_stats(
        self,
        kept: Sequence[TrajectoryTurns],
        curves: Sequence[Mapping[str, list[float]]],
        fold: Mapping[str, int],
        k: int,
    ) -> list[tuple[np.ndarray, np.ndarray, float, int]]:
        """Per fold: ZᵀZ, Zᵀy, yᵀy and the row count over its labelled states s_0 … s_{T−1}."""
        width = len(curves) + 1
        stats = [(np.zeros((width, width)), np.zeros(width), 0.0, 0) for _ in range(k)]
        for t in kept:
            if t.outcome is None or not t.turns:
                continue
            z = self._design(t, curves, len(t.turns))
            y = float(t.outcome)
            gram, xty, yty, rows = stats[fold[task_key(t)]]
            stats[fold[task_key(t)]] = (
                gram + z.T @ z,
                xty + z.sum(axis=0) * y,
                yty + y * y * len(z),
                rows + len(z),
            )
        return stats

    @staticmethod
    def _design(
        t: TrajectoryTurns, curves: Sequence[Mapping[str, list[float]]], n_states: int
    ) -> np.ndarray:
        """[1, V_1(s_t) … V_K(s_t)] for t < n_states."""
        z = np.ones((n_states, len(curves) + 1))
        for c, curve in enumerate(curves):
            z[:, c + 1] = curve[t.trajectory_id][:n_states]
        return z

    def _combine(
        self,
        t: TrajectoryTurns,
        curves: Sequence[Mapping[str, list[float]]],
        fold: Mapping[str, int],
    ) -> list[float]:
        w = self.fold_weights[fold[task_key(t)]]
        coef = np.asarray([w.intercept, *w.weights.values()])
        values: list[float] = np.clip(
            self._design(t, curves, len(t.turns) + 1) @ coef, 0.0, 1.0
        ).tolist()
        if t.outcome is not None:
            values[-1] = float(t.outcome)
        return values


def _usable(curve: list[float] | None, t: TrajectoryTurns, name: str) -> bool:
    if curve is None:
        return False
    if len(curve) != len(t.turns) + 1:
        raise TrajlakeError(
            f"ensemble component {name!r} gave {len(curve)} values for trajectory "
            f"{t.trajectory_id!r} with {len(t.turns)} turns (expected T + 1)"
        )
    if not all(math.isfinite(v) for v in curve):
        raise TrajlakeError(
            f"ensemble component {name!r} gave a non-finite value for trajectory "
            f"{t.trajectory_id!r}: {curve}"
        )
    return True


class LeaveOneOutPrefixMC(PrefixMCValues):
    """`prefix-mc` with each rollout's own outcome left out of the counts that value it.

    V(s_t) = (k − R + a) / (n − 1 + a + b) over the other rollouts of the task sharing the
    first t normalised actions (falling back to a shorter prefix below `min_visits` of them, as
    `PrefixMCValues` does); V(s_T) = R. Without this, a rollout's deep prefixes — seen by it
    alone — carry its own outcome, and a fit to the outcome rewards that leak.
    """

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Leave-one-out prefix values of the labelled trajectories."""
        labelled = [t for t in trajectories if t.outcome is not None]
        keys = {t.trajectory_id: [action_key(turn) for turn in t.turns] for t in labelled}
        visits: dict[tuple[Any, ...], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for t in labelled:
            acts = keys[t.trajectory_id]
            for depth in range(len(acts) + 1):
                node = visits[(task_key(t), *acts[:depth])]
                node[0] += 1
                node[1] += float(t.outcome)  # type: ignore[arg-type]
        a, b = self.prior
        out: dict[str, list[float]] = {}
        for t in labelled:
            r, acts = float(t.outcome), keys[t.trajectory_id]  # type: ignore[arg-type]
            curve: list[float] = []
            for depth in range(len(acts)):
                n, k = visits[(task_key(t), *acts[:depth])]
                n, k = n - 1, k - r
                if depth == 0 or n >= self.min_visits:
                    curve.append((k + a) / (n + a + b) if n + a + b > 0 else 0.0)
                else:
                    curve.append(curve[-1])
            out[t.trajectory_id] = [*curve, r]
        return out


def _component(
    name: str, options: Mapping[str, Any], lake: LakeStore | None, at: SnapshotRef
) -> ValueSource:
    """A component from the registry, given the lake when it reads observations or caches.

    `prefix-mc` and `anchor` are built leave-one-out unless `leave_one_out=False` is given.
    """
    kw = dict(options)
    if name in ("prefix-mc", "anchor"):
        kw.setdefault("leave_one_out", True)
    if name == "prefix-mc" and kw.pop("leave_one_out"):
        try:
            prior = kw.pop("prior", (1.0, 1.0))
            return LeaveOneOutPrefixMC(**kw, prior=(float(prior[0]), float(prior[1])))
        except (ValueError, TypeError) as e:
            raise ValueError(f"ensemble component {name!r}: {e}") from e
    try:
        spec = value_source_spec(name)
    except ValueError as e:
        raise ValueError(f"ensemble component {name!r}: {e}") from e
    if spec.leaks_outcome:
        log.warning(
            "ensemble component %r values each trajectory with its own outcome: the fit to the "
            "outcome will favour it for that reason alone",
            name,
        )
    if spec.needs_lake and lake is None:
        raise TrajlakeError(f"ensemble component {name!r} needs a lake (it caches its calls)")
    if lake is not None and (spec.needs_lake or spec.reads_observations):
        kw.setdefault("lake", lake)
        kw.setdefault("at", at)
    try:
        return spec.build(name, **kw)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"ensemble component {name!r}: {e} (options go in component_options={{{name!r}: "
            "{...}})"
        ) from e
