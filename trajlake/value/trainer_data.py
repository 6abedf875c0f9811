"""What `ValueTrainer` trains on: serialized examples, their token ids, padding and batch order.

Batches are built here rather than by the Trainer's samplers because value losses need a say in
them: Bradley–Terry and listwise terms only exist between members of one task, so ranking losses
train on batches of whole task groups; and length bucketing keeps padding small. The order of an
epoch is a function of (seed, epoch) alone, so a run resumed from a checkpoint (the Trainer calls
`set_epoch` and skips the batches already seen) sees the batches an uninterrupted run sees.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trajlake.errors import TrainingError, missing_extra

try:
    import torch
    from torch.utils.data import Dataset, Sampler
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e


@dataclass(frozen=True)
class TextExamples:
    """Serialized trajectories: texts, targets in [0, 1] (1 = success) and task groups."""

    texts: Sequence[str]
    labels: Sequence[float] | npt.NDArray[Any]
    groups: Sequence[str]

    def __post_init__(self) -> None:
        """Check lengths and targets."""
        y = np.asarray(self.labels, dtype=np.float64).reshape(-1)
        if not len(self.texts) == len(y) == len(self.groups):
            raise ValueError(
                f"texts, labels and groups differ in length: "
                f"{len(self.texts)}, {len(y)}, {len(self.groups)}"
            )
        if not np.all((y >= 0.0) & (y <= 1.0)):
            raise ValueError("labels must lie in [0, 1]")

    def __len__(self) -> int:
        """Number of examples."""
        return len(self.texts)

    @property
    def targets(self) -> npt.NDArray[np.float64]:
        """The labels as a float64 array."""
        return np.asarray(self.labels, dtype=np.float64).reshape(-1)


def check_examples(train: TextExamples, val: TextExamples | None, loss: str) -> None:
    """Refuse data a loss cannot learn from, before any compute is spent on it."""
    if len(train) == 0:
        raise TrainingError("the training split is empty")
    if val is not None and len(val) == 0:
        raise TrainingError("the validation split is empty (pass val=None to train without one)")
    y = train.targets
    if loss.startswith("bce") and (not np.any(y >= 0.5) or not np.any(y < 0.5)):
        which = "positives (successes)" if not np.any(y >= 0.5) else "negatives (failures)"
        raise TrainingError(f"the training split has no {which}; BCE cannot learn from one class")
    if loss != "bce":
        groups = np.asarray(list(train.groups), dtype=object)
        mixed = any(len(set(y[groups == g])) > 1 for g in set(train.groups))
        if not mixed:
            raise TrainingError(
                f"no task group in the training split has both a success and a failure; "
                f"the {loss!r} loss needs such groups (use loss='bce')"
            )


class EncodedExamples(Dataset[dict[str, Any]]):
    """Token ids, targets and integer task groups; item i is one example for the collator."""

    def __init__(self, tokenizer: Any, data: TextExamples, max_length: int) -> None:
        """Tokenize `data`, keeping each text's last `max_length` tokens."""
        # Left truncation keeps a trajectory's end (its outcome signal); see neural.encode.
        tokenizer.truncation_side = "left"
        out = tokenizer(list(data.texts), truncation=True, max_length=max_length)
        self.ids: list[list[int]] = list(out["input_ids"])
        self.labels = data.targets
        _, groups = np.unique(np.asarray(list(data.groups), dtype=object), return_inverse=True)
        self.groups: npt.NDArray[np.int64] = groups.astype(np.int64).reshape(-1)
        self.lengths = np.array([len(x) for x in self.ids], dtype=np.int64)

    def __len__(self) -> int:
        """Number of examples."""
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One example: its ids, target and group."""
        return {"input_ids": self.ids[i], "labels": self.labels[i], "groups": self.groups[i]}


class ValueCollator:
    """Pads a batch of examples to its longest member, on the tokenizer's padding side."""

    def __init__(self, pad_id: int, left: bool) -> None:
        """`left` pads on the left (decoders whose tokenizer asks for it)."""
        self.pad_id, self.left = pad_id, left

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """`input_ids`, `attention_mask`, float `labels` and integer `groups`."""
        width = max(len(item["input_ids"]) for item in items)
        ids = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            s = item["input_ids"]
            cols = slice(width - len(s), width) if self.left else slice(0, len(s))
            ids[row, cols] = torch.tensor(s, dtype=torch.long)
            mask[row, cols] = 1
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": torch.tensor([float(item["labels"]) for item in items], dtype=torch.float32),
            "groups": torch.tensor([int(item["groups"]) for item in items], dtype=torch.long),
        }


def _group_batches(data: EncodedExamples, batch_size: int, seed: int) -> list[list[int]]:
    """Whole task groups packed into batches by length; groups over batch_size are split."""
    rng = np.random.default_rng(seed)
    lengths = data.lengths
    members = [rng.permutation(np.flatnonzero(data.groups == g)) for g in np.unique(data.groups)]
    members.sort(key=lambda m: float(lengths[m].mean()))
    batches: list[list[int]] = []
    current: list[int] = []
    for group in members:
        for start in range(0, len(group), batch_size):
            chunk = group[start : start + batch_size].tolist()
            if current and len(current) + len(chunk) > batch_size:
                batches.append(current)
                current = []
            current = current + chunk
    return [*batches, current] if current else batches


class BucketBatchSampler(Sampler[list[int]]):
    """Length-bucketed training batches in an order fixed by (seed, epoch).

    Plain batches: shuffle, sort by length within windows of 16 batches, cut, shuffle the batches
    (little padding, yet varied batches). Group batches are packed once and only reordered. Each
    pass moves to the next epoch unless `set_epoch` (which the Trainer calls) says which it is.
    """

    def __init__(self, data: EncodedExamples, batch_size: int, grouped: bool, seed: int) -> None:
        """Batches of at most `batch_size`; `grouped` keeps task groups whole."""
        super().__init__()
        # Read by accelerate when it shards batches over processes.
        self.batch_size, self.drop_last = batch_size, False
        self.seed, self.epoch = seed, 0
        self._lengths = data.lengths
        self._fixed = _group_batches(data, batch_size, seed) if grouped else None

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass the one of `epoch`."""
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches per epoch."""
        if self._fixed is not None:
            return len(self._fixed)
        return math.ceil(len(self._lengths) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        """The batches of the current epoch."""
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        batches = self._fixed
        if batches is None:
            perm, window = rng.permutation(len(self._lengths)), self.batch_size * 16
            batches = []
            for start in range(0, len(perm), window):
                chunk = perm[start : start + window]
                chunk = chunk[np.argsort(self._lengths[chunk], kind="stable")]
                step = self.batch_size
                batches += [chunk[i : i + step].tolist() for i in range(0, len(chunk), step)]
        for b in rng.permutation(len(batches)):
            yield batches[b]


class SortedBatchSampler(Sampler[list[int]]):
    """Evaluation batches in length order: the least padding, and metrics ignore the order."""

    def __init__(self, data: EncodedExamples, batch_size: int) -> None:
        """Batches of at most `batch_size` examples of similar length."""
        super().__init__()
        self.batch_size, self.drop_last = batch_size, False
        order = np.argsort(data.lengths, kind="stable").tolist()
        self._batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def __len__(self) -> int:
        """Number of batches."""
        return len(self._batches)

    def __iter__(self) -> Iterator[list[int]]:
        """The batches, shortest first."""
        yield from self._batches
