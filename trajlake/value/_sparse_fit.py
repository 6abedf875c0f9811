"""Fitting the sparse text value model: L2 logistic regression with balanced class weights, or
a pairwise logistic loss on score differences within a task (plus a small pointwise term), by
L-BFGS in numpy; an optional L2 grid and temperature picked on the validation split, and seed
ensembles (one member per hash seed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from trajlake.credit._sparse_logit import _lbfgs
from trajlake.errors import NoSuchTrajectory
from trajlake.value.metrics import auroc, auroc_per_task
from trajlake.value.serialize import Conversation
from trajlake.value.sparse import (
    Design,
    Floats,
    HashedTexts,
    Ints,
    Member,
    SparseFeatures,
    SparseValueModel,
    design_for,
    hash_conversations,
    scalar_features,
    sigmoid,
)

if TYPE_CHECKING:
    from trajlake.lake import LakeStore
    from trajlake.value.dataset import ValueExample
    from trajlake.value.recipe import SparseSpec

SparseLoss = Literal["pointwise", "pairwise"]


@dataclass(frozen=True)
class FitOptions:
    """How the linear model is fitted (the recipe's `sparse:` section, less the features)."""

    l2: float = 1.0
    l2_grid: tuple[float, ...] = ()
    loss: SparseLoss = "pointwise"
    pointwise_weight: float = 0.1
    class_weight: bool = True
    temperature: bool = False
    ensemble: int = 1
    seed: int = 0
    iterations: int = 300


@dataclass(frozen=True)
class Labelled:
    """Conversations with their labels and task ids (one split)."""

    convs: Sequence[Conversation]
    labels: Sequence[int]
    tasks: Sequence[str]


def _sample_weights(y: Floats, balanced: bool) -> Floats:
    # Balanced: each class carries half the total weight, as sklearn's class_weight="balanced".
    if not balanced:
        return np.ones_like(y)
    n, pos = len(y), float(y.sum())
    if pos in (0.0, float(n)):
        return np.ones_like(y)
    return np.where(y == 1, n / (2 * pos), n / (2 * (n - pos)))


def within_task_pairs(labels: Sequence[int], tasks: Sequence[str]) -> tuple[Ints, Ints]:
    """(positive, negative) index pairs of candidates of the same task."""
    by_task: dict[str, tuple[list[int], list[int]]] = {}
    for i, (label, task) in enumerate(zip(labels, tasks, strict=True)):
        by_task.setdefault(task, ([], []))[0 if label else 1].append(i)
    pos: list[int] = []
    neg: list[int] = []
    for good, bad in by_task.values():
        for i in good:
            pos += [i] * len(bad)
            neg += bad
    return np.asarray(pos, dtype=np.int64), np.asarray(neg, dtype=np.int64)


def _compact(design: Design) -> tuple[Design, Ints]:
    # Only buckets that occur feel the data; the rest only feel the penalty, so their optimum is
    # exactly 0 and the fit runs over a few percent of the table.
    used, cols = np.unique(design.cols, return_inverse=True)
    small = Design(design.rows, cols.astype(np.int64), design.signs, design.dense, len(used))
    return small, used.astype(np.int64)


def _fit_member(
    design: Design, y: Floats, tasks: Sequence[str], opts: FitOptions, l2: float, seed: int
) -> Member:
    small, used = _compact(design)
    sw = _sample_weights(y, opts.class_weight)
    pos, neg = within_task_pairs(y.astype(int).tolist(), tasks)
    pairwise = opts.loss == "pairwise" and len(pos) > 0
    point_w = opts.pointwise_weight if pairwise else 1.0
    # The pair term is scaled to the number of examples so l2 means the same for both losses.
    pair_scale = len(y) / max(len(pos), 1)
    penalty = np.full(small.n_weights, l2)
    penalty[0] = 0.0

    def objective(w: Floats) -> tuple[float, Floats]:
        z = small.logits(w)
        loss = point_w * float(np.sum(sw * (np.logaddexp(0.0, z) - y * z)))
        residual = point_w * sw * (sigmoid(z) - y)
        if pairwise:
            d = z[pos] - z[neg]
            loss += pair_scale * float(np.sum(np.logaddexp(0.0, -d)))
            g = -pair_scale * sigmoid(-d)
            residual = residual + np.bincount(pos, g, len(y)) - np.bincount(neg, g, len(y))
        loss += 0.5 * float(np.sum(penalty * w * w))
        return loss, small.gradient(residual) + penalty * w

    w = _lbfgs(objective, np.zeros(small.n_weights), opts.iterations)
    n_dense = small.dense.shape[1]
    keep = np.flatnonzero(w[1 + n_dense :] != 0.0)
    return Member(
        seed=seed,
        bias=float(w[0]),
        dense=w[1 : 1 + n_dense].copy(),
        bucket_index=used[keep],
        bucket_weight=w[1 + n_dense + keep].copy(),
    )


def _scalars(
    convs: Sequence[Conversation], features: SparseFeatures
) -> tuple[Floats, Floats, Floats]:
    if not features.scalars:
        return np.zeros((len(convs), 0)), np.zeros(0), np.ones(0)
    raw = np.array([scalar_features(c) for c in convs], dtype=np.float64)
    mean, scale = raw.mean(axis=0), raw.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # a constant column stays 0 after centring
    return (raw - mean) / scale, mean, scale


def _fit_ensemble(
    texts: HashedTexts,
    dense: Floats,
    data: Labelled,
    features: SparseFeatures,
    opts: FitOptions,
    l2: float,
) -> list[Member]:
    y = np.asarray(data.labels, dtype=np.float64)
    seeds = [opts.seed + i for i in range(opts.ensemble)]
    return [
        _fit_member(design_for(texts, dense, features.buckets, s), y, data.tasks, opts, l2, s)
        for s in seeds
    ]


def _ranking_quality(scores: Floats, data: Labelled) -> float:
    """Mean within-task AUROC on validation (pooled AUROC when no task has both outcomes)."""
    labels = np.asarray(data.labels)
    per_task, _ = auroc_per_task(np.asarray(data.tasks), scores, labels)
    value = per_task if per_task is not None else auroc(scores, labels)
    return -math.inf if value is None else float(value)


def fit_temperature(logits: Floats, labels: Sequence[int]) -> float:
    """The T > 0 minimising the log loss of sigmoid(logits / T): a golden-section search over
    log T in [−4, 4] (the loss is unimodal in T). Dividing by T never changes a ranking."""
    y = np.asarray(labels, dtype=np.float64)

    def loss(log_t: float) -> float:
        z = logits / math.exp(log_t)
        return float(np.mean(np.logaddexp(0.0, z) - y * z))

    lo, hi, ratio = -4.0, 4.0, (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2)


def fit_sparse_model(
    train: Labelled,
    features: SparseFeatures,
    opts: FitOptions,
    val: Labelled | None = None,
) -> SparseValueModel:
    """Fit on `train`; `val` (when it has examples) picks l2 from `opts.l2_grid` by mean
    within-task AUROC and fits the temperature when `opts.temperature`."""
    if not train.convs:
        raise ValueError("no training conversations")
    if opts.ensemble < 1:
        raise ValueError(f"ensemble must be >= 1, got {opts.ensemble}")
    texts = hash_conversations(train.convs, features)
    dense, mean, scale = _scalars(train.convs, features)
    has_val = val is not None and len(val.convs) > 0
    grid = list(opts.l2_grid) if opts.l2_grid and has_val else [opts.l2]
    info: dict[str, object] = {"loss": opts.loss, "n_train": len(train.convs)}
    best: tuple[float, SparseValueModel] | None = None
    tried: dict[str, float] = {}
    for l2 in grid:
        members = _fit_ensemble(texts, dense, train, features, opts, l2)
        model = SparseValueModel(features, members, mean, scale, 1.0, {**info, "l2": l2})
        quality = _ranking_quality(model.logits(val.convs), val) if has_val and val else 0.0
        tried[repr(l2)] = quality
        if best is None or quality > best[0]:
            best = (quality, model)
    assert best is not None  # the grid has at least one entry
    model = best[1]
    if len(grid) > 1:
        model.info["l2_grid_val_auroc_per_task"] = tried
    if opts.temperature and has_val and val is not None:
        model.temperature = fit_temperature(model.logits(val.convs), val.labels)
    model.info["temperature_fitted"] = bool(opts.temperature and has_val)
    return model


# ----------------------------------------------------------------------------- from a lake


def features_of(spec: SparseSpec) -> SparseFeatures:
    """The feature settings of a recipe's `sparse:` section."""
    return SparseFeatures(
        fields=tuple(spec.fields),
        buckets=spec.buckets,
        recent_turns=spec.recent_turns,
        observation_head=spec.observation_head,
        observation_tail=spec.observation_tail,
        issue_words=spec.issue_words,
        final_words=spec.final_words,
        scalars=spec.scalars,
    )


def options_of(spec: SparseSpec) -> FitOptions:
    """The fitting options of a recipe's `sparse:` section."""
    return FitOptions(
        l2=spec.l2,
        l2_grid=tuple(spec.l2_grid),
        loss=spec.loss,
        pointwise_weight=spec.pointwise_weight,
        class_weight=spec.class_weight,
        temperature=spec.temperature,
        ensemble=spec.ensemble,
        seed=spec.seed,
        iterations=spec.iterations,
    )


def read_labelled(lake: LakeStore, snapshot_id: int, examples: Sequence[ValueExample]) -> Labelled:
    """The examples' conversations at a snapshot, with their labels and tasks."""
    from trajlake.value.conversations import read_conversations

    convs = read_conversations(lake, snapshot_id, [e.trajectory_id for e in examples])
    kept = [e for e in examples if e.trajectory_id in convs]
    if len(kept) < len(examples):
        raise NoSuchTrajectory(
            f"{len(examples) - len(kept)} examples have no trajectory at snapshot {snapshot_id}"
        )
    return Labelled(
        [convs[e.trajectory_id] for e in kept], [e.label for e in kept], [e.task_id for e in kept]
    )


def fit_from_lake(
    lake: LakeStore,
    snapshot_id: int,
    splits: dict[str, list[ValueExample]],
    spec: SparseSpec,
) -> SparseValueModel:
    """Fit a recipe's sparse model on the train split (val for the l2 grid and temperature)."""
    train = read_labelled(lake, snapshot_id, splits["train"])
    val = read_labelled(lake, snapshot_id, splits["val"]) if splits.get("val") else None
    return fit_sparse_model(train, features_of(spec), options_of(spec), val)
