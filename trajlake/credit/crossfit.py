"""`crossfit:text` / `crossfit:text-td` (and `-task` variants) — a cross-fitted sparse text
prefix value model.

Prefix features are signed hashed uni- and bigrams of the normalised actions (tool names and
argument tokens), the assistant's text and the observations (status, error and test-result
words; numbers, paths and hashes normalised), plus a few scalars. Tasks are split into K folds
(by `task_id`; a trajectory without one is a task of its own) and every trajectory is valued by
the model fitted on the other folds, so no value comes from a model that saw its task.

The `-task` variants (`task_prior=True`) add the task's level as two scalars: the smoothed
success rate of the *other* rollouts of the same task (leave-one-out, so a trajectory's own
outcome never enters its values). Text read on other tasks cannot tell how hard this task is;
its sibling rollouts can.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from trajlake._text_hashing import NgramHasher
from trajlake.credit._featurise_pool import pooled
from trajlake.credit._featuriser import TextFeaturiser as TextFeaturiser
from trajlake.credit._folds import task_folds, task_key
from trajlake.credit._sparse_logit import Floats, Ints, PrefixDesign, fit_prefix_logit, sigmoid
from trajlake.credit._text_features import Key, Observation, read_observations
from trajlake.credit._types import TrajectoryTurns

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

log = logging.getLogger(__name__)


def task_rates(trajectories: Sequence[TrajectoryTurns], prior: float = 2.0) -> Floats:
    """Per trajectory, the smoothed success rate of the *other* labelled rollouts of its task:
    (k + prior·p) / (n + prior), with p the mean outcome of all labelled trajectories.

    Leave-one-out, so a trajectory's own outcome never enters its value; a task with one
    rollout gets p."""
    labelled = [float(t.outcome) for t in trajectories if t.outcome is not None]
    p = float(np.mean(labelled)) if labelled else 0.5
    wins: dict[str, float] = {}
    runs: dict[str, int] = {}
    for t in trajectories:
        if t.outcome is not None:
            key = task_key(t)
            wins[key] = wins.get(key, 0.0) + float(t.outcome)
            runs[key] = runs.get(key, 0) + 1
    out = np.empty(len(trajectories))
    for i, t in enumerate(trajectories):
        key = task_key(t)
        k, n = wins.get(key, 0.0), runs.get(key, 0)
        if t.outcome is not None:
            k, n = k - float(t.outcome), n - 1
        out[i] = (k + prior * p) / (n + prior)
    return out


def with_task_prior(design: PrefixDesign, rates: Floats | None) -> PrefixDesign:
    """`design` with two more scalars per row: logit of its trajectory's `task_rates` entry,
    and that times the budget fraction (how much the task's level matters changes with the
    turns left). Unchanged when `rates` is None."""
    if rates is None:
        return design
    q = np.clip(rates, 1e-3, 1 - 1e-3)
    z = np.log(q / (1 - q))
    column = np.repeat(z, np.diff(design.row_start))
    return design.with_columns(np.column_stack([column, column * design.scalars[:, 0]]))


def lambda_targets(values: Floats, row_start: Ints, lam: float) -> Floats:
    """TD(λ) targets per row: G_T = V(s_T) and G_t = (1−λ) V(s_{t+1}) + λ G_{t+1}.

    `values` holds V(s_0) … V(s_T) of each trajectory (rows `row_start[i]` … `row_start[i+1]−1`),
    the last one the outcome; λ = 1 gives the outcome everywhere (MC), λ = 0 TD(0).
    """
    lengths = np.diff(row_start)
    t = np.arange(len(values)) - np.repeat(row_start[:-1], lengths)
    last = np.repeat(lengths - 1, lengths)
    out = values.astype(np.float64).copy()
    for depth in range(int(lengths.max(initial=1)) - 2, -1, -1):
        rows = np.nonzero((t == depth) & (t < last))[0]
        out[rows] = (1.0 - lam) * values[rows + 1] + lam * out[rows + 1]
    return out


class CrossFitTextValues:
    """K-fold (by task) cross-fitted hashed n-gram logistic prefix value model.

    `values()` gives, for every trajectory, V(s_t) = P(success | prefix s_t) from the model
    fitted on the folds that do not hold its task, for t < T, and the outcome as V(s_T) (the
    model's estimate when the outcome is unknown). Targets: `mc` (the outcome for every prefix)
    or `td` (TD(λ) targets refitted for `sweeps` rounds, starting from the MC fit). After a call,
    `fold_of_task` and `train_tasks` say which tasks trained the model that valued each fold.
    `task_prior` adds the scalars of `with_task_prior` (the leave-one-out task success rate).
    """

    def __init__(
        self,
        target: Literal["mc", "td"] = "mc",
        *,
        folds: int = 5,
        seed: int = 0,
        td_lambda: float = 0.5,
        sweeps: int = 3,
        l2: float = 0.03,
        iterations: int = 60,
        n_buckets: int = 2**18,
        budget: int | None = None,
        max_train: int = 5_000,
        chunk: int = 5_000,
        lake: LakeStore | None = None,
        at: SnapshotRef = None,
        observations: Mapping[Key, Observation] | None = None,
        task_prior: bool = False,
    ) -> None:
        if target not in ("mc", "td"):
            raise ValueError(f"target must be 'mc' or 'td', got {target!r}")
        if folds < 2:
            raise ValueError(
                f"folds must be >= 2 (each trajectory is valued out of fold), got {folds}"
            )
        if not 0.0 <= td_lambda <= 1.0:
            raise ValueError(f"td_lambda must lie in [0, 1], got {td_lambda}")
        if sweeps < 1 or iterations < 1 or n_buckets < 1 or max_train < 1 or chunk < 1:
            raise ValueError("sweeps, iterations, n_buckets, max_train and chunk must be >= 1")
        if l2 < 0:
            raise ValueError(f"l2 must be >= 0, got {l2}")
        self.target = target
        self.name = "crossfit:text" if target == "mc" else "crossfit:text-td"
        if task_prior:
            self.name = "crossfit:text-task" if target == "mc" else "crossfit:text-td-task"
        self.folds, self.seed, self.td_lambda, self.sweeps = folds, seed, td_lambda, sweeps
        self.l2, self.iterations, self.n_buckets = float(l2), iterations, n_buckets
        self.budget, self.max_train, self.chunk = budget, max_train, chunk
        self.lake, self.at, self.observations = lake, at, observations
        self.task_prior = task_prior
        self.fold_of_task: dict[str, int] = {}
        self.train_tasks: list[set[str]] = []

    def assign_folds(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, int]:
        """Fold of every task (`task_folds`: labelled tasks shuffled by `seed`, round-robin)."""
        return task_folds(
            trajectories,
            folds=self.folds,
            seed=self.seed,
            name=self.name,
            remedy="label more tasks, or use value-model:builtin, which fits in-sample",
        )

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Out-of-fold V(s_0) … V(s_T) of every trajectory."""
        trajs = [t for t in trajectories if t.turns or t.outcome is not None]
        fold = self.fold_of_task = self.assign_folds(trajs)

        featuriser = pooled(  # large inputs are featurised over worker processes
            TextFeaturiser(
                self.n_buckets,
                self.budget or max((len(t.turns) for t in trajs), default=1),
                self._observations(trajs),
                NgramHasher(),
            )
        )
        labelled = [i for i, t in enumerate(trajs) if t.outcome is not None]
        rng = np.random.default_rng(self.seed)
        if len(labelled) > self.max_train:
            labelled = sorted(rng.choice(labelled, self.max_train, replace=False).tolist())
        rates = task_rates(trajs) if self.task_prior else None
        whole = featuriser.design(trajs) if len(trajs) <= self.chunk else None
        if whole is not None:
            whole = with_task_prior(whole, rates)
        train = (
            whole.subset(labelled)
            if whole is not None
            else with_task_prior(
                featuriser.design([trajs[i] for i in labelled]),
                None if rates is None else rates[labelled],
            )
        )
        outcomes = np.asarray([float(trajs[i].outcome) for i in labelled])  # type: ignore[arg-type]
        train_fold = np.asarray([fold[task_key(trajs[i])] for i in labelled])
        k = max(fold.values()) + 1
        weights = []
        self.train_tasks = []
        for f in range(k):
            members = np.nonzero(train_fold != f)[0]
            self.train_tasks.append({task_key(trajs[labelled[j]]) for j in members})
            weights.append(self._fit(train.subset(members), outcomes[members]))
        return self._predict(trajs, fold, weights, featuriser, whole, rates)

    def _observations(self, trajs: Sequence[TrajectoryTurns]) -> Mapping[Key, Observation]:
        if self.observations is not None:
            return self.observations
        if self.lake is None:
            log.info("%s: no lake given, observations are not read (actions only)", self.name)
            return {}
        return read_observations(self.lake, self.at, trajs)

    def _fit(self, design: PrefixDesign, outcomes: Floats) -> Floats:
        y = np.repeat(outcomes, np.diff(design.row_start))
        # The penalty grows with the rows, so one setting suits small and large lakes (a mean
        # loss with a fixed L2); 0.03 per row was chosen on synthetic tasks of another seed.
        l2 = self.l2 * design.n_rows
        w = fit_prefix_logit(design, y, l2=l2, iterations=self.iterations)
        if self.target == "td":
            ends = design.row_start[1:] - 1
            for _ in range(self.sweeps):
                v = sigmoid(design.scores(w))
                v[ends] = outcomes
                target = lambda_targets(v, design.row_start, self.td_lambda)
                w = fit_prefix_logit(design, target, l2=l2, iterations=self.iterations, start=w)
        return w

    def _predict(
        self,
        trajs: Sequence[TrajectoryTurns],
        fold: Mapping[str, int],
        weights: Sequence[Floats],
        featuriser: TextFeaturiser,
        whole: PrefixDesign | None,
        rates: Floats | None,
    ) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for lo in range(0, len(trajs), self.chunk):
            part = trajs[lo : lo + self.chunk]
            design = (
                whole
                if whole is not None
                else with_task_prior(
                    featuriser.design(part), None if rates is None else rates[lo : lo + self.chunk]
                )
            )
            folds = np.asarray([fold[task_key(t)] for t in part])
            for f, w in enumerate(weights):
                members = np.nonzero(folds == f)[0]
                if not len(members):
                    continue
                sub = design.subset(members)
                p = sigmoid(sub.scores(w))
                for j, m in enumerate(members.tolist()):
                    t = part[m]
                    curve = p[sub.row_start[j] : sub.row_start[j + 1]].tolist()
                    if t.outcome is not None:
                        curve[-1] = float(t.outcome)
                    out[t.trajectory_id] = curve
        return out
