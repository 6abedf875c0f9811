"""Value-model examples: trajectories with their effective outcome at a pinned snapshot, split by
task (never by trajectory, methods.md §7) and optionally class-balanced."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np

from trajlake.query import sql, where_ids

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

LabelSource = str
"""`outcomes` (the effective outcome) or `labels:<source>` (only that verifier's labels)."""
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ValueExample:
    """One labelled trajectory: what a value model is trained and evaluated on."""

    trajectory_id: str
    task_id: str
    """The trajectory's task; a trajectory without one is its own task (its id)."""
    label: int
    """1 if resolved, else 0 (reward > 0 when only a reward is known)."""
    reward: float | None
    outcome_source: str | None
    harness: str | None
    policy_model: str | None
    run_id: str | None
    snapshot_id: int
    """The snapshot the example was read at (features must be read at the same one)."""


def label_relation(label: LabelSource) -> str:
    """The SQL relation of a label source: the `outcomes` view, or that view's query keeping
    only one label source (e.g. ``labels:swebench``; the rollouts' own results not used)."""
    if label == "outcomes":
        return "outcomes"
    source = label.removeprefix("labels:")
    if not label.startswith("labels:") or not source:
        raise ValueError(f"label must be 'outcomes' or 'labels:<source>', got {label!r}")
    from trajlake.query import outcomes_sql

    return f"({outcomes_sql(source)})"


def _sql_query(where: str | None, label: LabelSource) -> str:
    condition = f"AND {where_ids(where, 'o.trajectory_id')}" if where else ""
    return f"""
        SELECT o.trajectory_id, coalesce(o.task_id, o.trajectory_id) AS task_id,
               o.resolved, o.reward, o.outcome_source, t.harness, t.policy_model, t.run_id
        FROM {label_relation(label)} o JOIN trajectories t ON t.trajectory_id = o.trajectory_id
        WHERE (o.resolved IS NOT NULL OR o.reward IS NOT NULL) {condition}
        ORDER BY o.trajectory_id
    """


def load_examples(
    lake: LakeStore,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    label: LabelSource = "outcomes",
) -> list[ValueExample]:
    """Trajectories with a known outcome, labelled from the `outcomes` view at one snapshot.

    Args:
        lake: The lake to read.
        at: Snapshot reference (id, tag, timestamp, None for the latest); it is resolved once
            and recorded on every example.
        where: Optional SQL predicate over the `trajectories` columns (e.g.
            ``"harness = 'swe-agent'"``; the table is aliased `t`, so ``t.harness`` works too).
        label: Where labels come from: ``"outcomes"`` (the effective outcome: a label matched
            by trajectory id, then by task + run, then the rollout's own result) or
            ``"labels:<source>"`` (only labels of that source, e.g. ``labels:swebench``).

    Returns:
        Examples sorted by trajectory id. Trajectories with neither `resolved` nor `reward` are
        skipped. The label is `resolved` when known, else ``reward > 0``.
    """
    query = _sql_query(where, label)
    snapshot = lake.snapshot(at)
    rows = sql(lake, query, at=snapshot.snapshot_id).rows()
    examples = []
    for trajectory_id, task_id, resolved, reward, source, harness, policy, run_id in rows:
        positive = bool(resolved) if resolved is not None else float(reward) > 0.0
        examples.append(
            ValueExample(
                trajectory_id=trajectory_id,
                task_id=task_id,
                label=int(positive),
                reward=None if reward is None else float(reward),
                outcome_source=source,
                harness=harness,
                policy_model=policy,
                run_id=run_id,
                snapshot_id=snapshot.snapshot_id,
            )
        )
    return examples


def _task_unit(task_id: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, task id): stable across runs and lake contents."""
    digest = hashlib.sha256(f"{seed}\x00{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_by_task(
    examples: Sequence[ValueExample], *, val_frac: float, test_frac: float, seed: int = 0
) -> dict[str, list[ValueExample]]:
    """Assign whole tasks to train/val/test by a hash of (seed, task id).

    A task's split depends only on its id and the seed, so adding tasks never moves old ones.
    The fractions are expected shares of tasks (not exact counts). Order within a split follows
    the input.

    Returns:
        ``{"train": [...], "val": [...], "test": [...]}``; no task appears in two splits.
    """
    if val_frac < 0 or test_frac < 0 or val_frac + test_frac > 1:
        raise ValueError("need val_frac >= 0, test_frac >= 0 and val_frac + test_frac <= 1")
    splits: dict[str, list[ValueExample]] = {name: [] for name in SPLITS}
    for example in examples:
        u = _task_unit(example.task_id, seed)
        name = "test" if u < test_frac else "val" if u < test_frac + val_frac else "train"
        splits[name].append(example)
    return splits


def _balance_one(examples: Sequence[ValueExample], ratio: float, seed: int) -> list[ValueExample]:
    positives = sum(e.label for e in examples)
    negatives = [i for i, e in enumerate(examples) if e.label == 0]
    keep_n = min(len(negatives), int(np.floor(ratio * positives)))
    rng = np.random.default_rng(seed)
    kept = set(rng.choice(negatives, size=keep_n, replace=False).tolist()) if keep_n else set()
    return [e for i, e in enumerate(examples) if e.label == 1 or i in kept]


@overload
def balance(
    examples: Sequence[ValueExample], *, ratio: float, seed: int = 0
) -> list[ValueExample]: ...


@overload
def balance(
    examples: Mapping[str, Sequence[ValueExample]], *, ratio: float, seed: int = 0
) -> dict[str, list[ValueExample]]: ...


def balance(
    examples: Sequence[ValueExample] | Mapping[str, Sequence[ValueExample]],
    *,
    ratio: float,
    seed: int = 0,
) -> list[ValueExample] | dict[str, list[ValueExample]]:
    """Subsample negatives to at most `ratio` × positives (all positives kept, order kept).

    Given a split dict (from `split_by_task`), each split is balanced on its own.
    """
    if ratio < 0:
        raise ValueError(f"ratio must be >= 0, got {ratio}")
    if isinstance(examples, Mapping):
        return {name: _balance_one(split, ratio, seed) for name, split in examples.items()}
    return _balance_one(examples, ratio, seed)
