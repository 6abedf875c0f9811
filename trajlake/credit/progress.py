"""`progress` — a cross-fitted progress regressor whose per-turn contributions sum to the outcome.

Each turn t gets a contribution p_t = w·φ_t from its own features φ_t (the hashed n-grams of its
action, text and observation, and a few per-turn scalars); w is fitted so that V(s_0) +
Σ_t p_t ≈ R over each training trajectory (stepwise progress attribution), and
V(s_t) = V(s_0) + Σ_{k<t} p_k. `progress-td` also fits the states between to MC and then
TD(λ) targets. Folds and features are those of `crossfit:text`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from trajlake._text_hashing import NgramHasher
from trajlake.credit._folds import task_key
from trajlake.credit._sparse_logit import (
    N_SCALARS,
    Floats,
    Ints,
    PrefixDesign,
    fit_prefix_logit,
    sigmoid,
)
from trajlake.credit._text_features import Key, Observation
from trajlake.credit._types import TrajectoryTurns
from trajlake.credit.crossfit import CrossFitTextValues, TextFeaturiser, lambda_targets

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Link = Literal["linear", "logit"]


def turn_design(prefix: PrefixDesign) -> PrefixDesign:
    """The per-turn features of a prefix design, laid out so that a row's score is a sum.

    Row t + 1 of a trajectory holds turn t's features φ_t: the n-grams of the turn (the prefix
    design's block B) and those first seen at the turn (its block A) as one block of
    2 × buckets, and the per-turn scalars (a turn, the turn failed, its budget fraction, both)
    accumulated along the trajectory. `scores(w)` of row t is then w_0 + Σ_{k<t} w·φ_k.
    """
    lengths = np.diff(prefix.row_start)
    first = np.zeros(prefix.n_rows, dtype=bool)
    first[prefix.row_start[:-1]] = True
    per_turn = np.zeros((prefix.n_rows, N_SCALARS))
    failed = prefix.scalars[:, 3]
    position = prefix.scalars[:, 0]
    per_turn[:, 0] = 1.0
    per_turn[:, 1] = failed
    per_turn[:, 2] = position
    per_turn[:, 3] = failed * position
    per_turn[first] = 0.0  # s_0 follows no turn
    running = np.cumsum(per_turn, axis=0)
    running -= np.repeat(running[prefix.row_start[:-1]], lengths, axis=0)
    empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
    return PrefixDesign(
        prefix.a_size + prefix.b_size,
        0,
        prefix.row_start,
        running,
        np.concatenate([prefix.a_index, prefix.b_index + prefix.a_size]),
        np.concatenate([prefix.a_sign, prefix.b_sign]),
        np.concatenate([prefix.a_row, prefix.b_row]),
        empty_i,
        empty_f,
        empty_i,
    )


def endpoints(design: PrefixDesign) -> PrefixDesign:
    """Each trajectory as two rows: s_0 (the bias alone) and s_T (every turn's features)."""
    n = len(design.row_start) - 1
    ends = design.row_start[1:] - 1
    traj = design.traj_of_row()
    scalars = np.zeros((2 * n, N_SCALARS))
    scalars[1::2] = design.scalars[ends]
    return PrefixDesign(
        design.a_size,
        design.b_size,
        np.arange(0, 2 * n + 1, 2, dtype=np.int64),
        scalars,
        design.a_index,
        design.a_sign,
        2 * traj[design.a_row] + 1,
        design.b_index,
        design.b_sign,
        2 * traj[design.b_row] + 1,
    )


def fit_ridge(
    design: PrefixDesign,
    target: Floats,
    weight: Floats,
    *,
    l2: float,
    iterations: int,
    start: Floats | None = None,
) -> Floats:
    """Weights minimising Σ weight_r (score_r − target_r)² + l2 |w|² (bias unpenalised), by
    conjugate gradients on the normal equations over the buckets that occur (others stay 0)."""
    full, active = design, design.active_weights()
    design = design.compact(active)
    penalty = np.full(design.n_weights, l2)
    penalty[0] = 0.0

    def normal(v: Floats) -> Floats:
        return design.gradient(weight * design.scores(v)) + penalty * v

    # Xᵀ W target: the gradient is linear in the residual, and scores(0) is 0 everywhere.
    b = design.gradient(weight * target)
    w = np.zeros(design.n_weights) if start is None else start[active]
    r = b - normal(w)
    d = r.copy()
    rr = float(r @ r)
    tolerance = 1e-12 * max(float(b @ b), 1e-300)
    for _ in range(iterations):
        if rr <= tolerance:
            break
        q = normal(d)
        alpha = rr / float(d @ q)
        w += alpha * d
        r -= alpha * q
        new = float(r @ r)
        d = r + (new / rr) * d
        rr = new
    out = np.zeros(full.n_weights)
    out[active] = w
    return out


class ProgressValues(CrossFitTextValues):
    """K-fold (by task) cross-fitted stepwise progress: V(s_t) = V(s_0) + Σ_{k<t} p_k.

    Target `spa` (`progress`): p_t = w·φ_t fitted by ridge least squares of V(s_0) + Σ_t p_t
    on R and of V(s_0) on R (so V(s_0) is about the training tasks' success rate), plus, with
    `mc_weight` m > 0, of every V(s_t) in between on R with weight m / (T − 1) per state.
    Target `td` (`progress-td`): the same fit with m = 3 by default, then `sweeps` refits in
    which the states between are fitted to TD(λ) targets of the current values (`td_lambda`).
    Values are clipped to [0, 1]. `link="logit"` (`spa` only, m = 0) makes the sum a logit,
    fitted by logistic regression: V(s_t) = sigmoid(w_0 + Σ_{k<t} w·φ_k). Every trajectory is
    valued by the model fitted on the folds that do not hold its task; V(s_T) is the outcome
    when known.
    """

    def __init__(
        self,
        target: Literal["spa", "td"] = "spa",
        *,
        link: Link = "linear",
        folds: int = 5,
        seed: int = 0,
        l2: float = 1.0,
        mc_weight: float | None = None,
        sweeps: int = 3,
        td_lambda: float = 0.5,
        iterations: int = 200,
        n_buckets: int = 2**18,
        budget: int | None = None,
        max_train: int = 5_000,
        chunk: int = 5_000,
        lake: LakeStore | None = None,
        at: SnapshotRef = None,
        observations: Mapping[Key, Observation] | None = None,
    ) -> None:
        if target not in ("spa", "td"):
            raise ValueError(f"target must be 'spa' or 'td', got {target!r}")
        if link not in ("linear", "logit"):
            raise ValueError(f"link must be 'linear' or 'logit', got {link!r}")
        super().__init__(
            "td" if target == "td" else "mc",
            folds=folds,
            seed=seed,
            td_lambda=td_lambda,
            sweeps=sweeps,
            l2=l2,
            iterations=iterations,
            n_buckets=n_buckets,
            budget=budget,
            max_train=max_train,
            chunk=chunk,
            lake=lake,
            at=at,
            observations=observations,
        )
        mc_weight = (3.0 if target == "td" else 0.0) if mc_weight is None else float(mc_weight)
        if mc_weight < 0:
            raise ValueError(f"mc_weight must be >= 0, got {mc_weight}")
        if link == "logit" and (mc_weight or target == "td"):
            raise ValueError(
                "link='logit' fits the trajectory sums only: it takes neither mc_weight > 0 "
                "nor the 'td' target (progress-td); use link='linear'"
            )
        self.link: Link = link
        self.mc_weight = mc_weight
        self.name = "progress" if target == "spa" else "progress-td"

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Out-of-fold V(s_0) … V(s_T) of every trajectory."""
        trajs = [t for t in trajectories if t.turns or t.outcome is not None]
        fold = self.fold_of_task = self.assign_folds(trajs)
        featuriser = TextFeaturiser(
            self.n_buckets,
            self.budget or max((len(t.turns) for t in trajs), default=1),
            self._observations(trajs),
            NgramHasher(),
        )
        labelled = [i for i, t in enumerate(trajs) if t.outcome is not None]
        if len(labelled) > self.max_train:
            rng = np.random.default_rng(self.seed)
            labelled = sorted(rng.choice(labelled, self.max_train, replace=False).tolist())
        # One design for all when it fits in a chunk: the labelled rows are then a subset of it.
        whole = turn_design(featuriser.design(trajs)) if len(trajs) <= self.chunk else None
        train = (
            whole.subset(labelled)
            if whole is not None
            else turn_design(featuriser.design([trajs[i] for i in labelled]))
        )
        outcomes = np.asarray([float(trajs[i].outcome) for i in labelled])  # type: ignore[arg-type]
        train_fold = np.asarray([fold[task_key(trajs[i])] for i in labelled])
        self.train_tasks, weights = [], []
        for f in range(max(fold.values()) + 1):
            members = np.nonzero(train_fold != f)[0]
            self.train_tasks.append({task_key(trajs[labelled[j]]) for j in members})
            weights.append(self.fit(train.subset(members), outcomes[members]))
        out: dict[str, list[float]] = {}
        for lo in range(0, len(trajs), self.chunk):
            part = trajs[lo : lo + self.chunk]
            design = whole if whole is not None else turn_design(featuriser.design(part))
            out.update(self.predict(part, fold, weights, design))
        return out

    def fit(self, design: PrefixDesign, outcomes: Floats) -> Floats:
        """Weights of one fold from its per-turn design (`turn_design`) and the outcomes."""
        # Penalty per training trajectory, so one setting suits small and large lakes.
        l2 = self.l2 * len(outcomes)
        if self.link == "logit":
            target = np.repeat(outcomes, 2)
            return fit_prefix_logit(endpoints(design), target, l2=l2, iterations=self.iterations)
        lengths = np.diff(design.row_start)
        target = np.repeat(outcomes, lengths)
        weight = self.row_weights(design)
        w = fit_ridge(design, target, weight, l2=l2, iterations=self.iterations)
        ends = design.row_start[1:] - 1
        for _ in range(self.sweeps if self.target == "td" else 0):
            v = np.clip(design.scores(w), 0.0, 1.0)
            v[ends] = outcomes
            target = lambda_targets(v, design.row_start, self.td_lambda)
            w = fit_ridge(design, target, weight, l2=l2, iterations=self.iterations, start=w)
        return w

    def row_weights(self, design: PrefixDesign) -> Floats:
        """1 on s_0 and s_T of each trajectory, `mc_weight` / (T − 1) on each state between."""
        lengths = np.diff(design.row_start)
        inner = np.maximum(lengths - 2, 1)
        weight = np.repeat(self.mc_weight / inner, lengths)
        weight[design.row_start[:-1]] = 1.0
        weight[design.row_start[1:] - 1] = 1.0
        return weight

    def predict(
        self,
        trajs: Sequence[TrajectoryTurns],
        fold: Mapping[str, int],
        weights: Sequence[Floats],
        design: PrefixDesign,
    ) -> dict[str, list[float]]:
        """V(s_0) … V(s_T) of `trajs` (rows of `design`), each from its task's fold model."""
        folds: Ints = np.asarray([fold[task_key(t)] for t in trajs], dtype=np.int64)
        out: dict[str, list[float]] = {}
        for f, w in enumerate(weights):
            members = np.nonzero(folds == f)[0]
            if not len(members):
                continue
            sub = design.subset(members)
            z = sub.scores(w)
            v = sigmoid(z) if self.link == "logit" else np.clip(z, 0.0, 1.0)
            for j, m in enumerate(members.tolist()):
                t = trajs[m]
                curve = v[sub.row_start[j] : sub.row_start[j + 1]].tolist()
                if t.outcome is not None:
                    curve[-1] = float(t.outcome)
                out[t.trajectory_id] = curve
        return out
