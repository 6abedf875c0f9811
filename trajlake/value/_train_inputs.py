"""What a value model trains on: labelled examples at one pinned snapshot, split by task.

Kept apart from `train` (the whole command) so the neural half, `_train_neural`, can use the data
and the rank check without importing the module that imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trajlake.errors import TrainingError
from trajlake.value.dataset import ValueExample, balance, load_examples, split_by_task
from trajlake.value.recipe import Recipe

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef


@dataclass(frozen=True)
class TrainingData:
    """Labelled examples at one snapshot, split by task (train is balanced when asked)."""

    snapshot_id: int
    tags: list[str]
    where: str | None
    splits: dict[str, list[ValueExample]]


def is_main_process() -> bool:
    """True unless this is a non-zero rank of a torchrun / accelerate launch job."""
    return int(os.environ.get("RANK", "0")) == 0


def prepare_data(
    lake: LakeStore, recipe: Recipe, *, at: SnapshotRef = None, where: str | None = None
) -> TrainingData:
    """Examples with outcomes at one snapshot, split by task hash; training negatives balanced.

    The snapshot recorded is the first one with the same input tables as `at` (commits that
    only register models or store scores do not change what a model trains on).
    """
    from trajlake.credit.runs import input_snapshot

    requested = lake.snapshot(at).snapshot_id
    snapshot = lake.snapshot(input_snapshot(lake, requested))
    where = where if where is not None else recipe.data.where
    examples = load_examples(lake, at=snapshot.snapshot_id, where=where, label=recipe.data.label)
    spec = recipe.data
    splits = split_by_task(
        examples, val_frac=spec.val_frac, test_frac=spec.test_frac, seed=spec.split_seed
    )
    if spec.balance is not None:
        splits["train"] = balance(splits["train"], ratio=spec.balance, seed=spec.split_seed)
    _check_splits(splits, len(examples))
    # Tags of every snapshot with this same input (e.g. `gen-0` set after a credit run), the
    # requested snapshot's first.
    same_input = [t for t in lake.tags() if snapshot.snapshot_id <= t.snapshot_id <= requested]
    tags = [t.name for t in sorted(same_input, key=lambda t: (t.snapshot_id != requested, t.name))]
    return TrainingData(snapshot.snapshot_id, tags, where, splits)


def _check_splits(splits: dict[str, list[ValueExample]], n_examples: int) -> None:
    if n_examples == 0:
        raise TrainingError("no trajectories with outcomes in the selection: label some first")
    train = splits["train"]
    positives = sum(e.label for e in train)
    if not train or positives == 0 or positives == len(train):
        raise TrainingError(
            f"the training split has {len(train)} examples and {positives} positives: a value "
            "model needs both outcomes; select more tasks or change data.split_seed/test_frac"
        )
    if not splits["test"]:
        raise TrainingError("the task split left no test tasks: raise data.test_frac")
