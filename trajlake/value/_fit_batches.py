"""Batching for `fit_value_net`: encoded examples, padding collation and length-bucketed batches."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trajlake.errors import missing_extra
from trajlake.value._fit_config import TextExamples

try:
    import torch
    from torch.utils.data import Dataset, Sampler
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e


@dataclass(frozen=True)
class _Encoded:
    ids: list[list[int]]
    labels: npt.NDArray[np.float64]
    groups: npt.NDArray[np.int64]

    @property
    def lengths(self) -> npt.NDArray[np.int64]:
        return np.array([len(x) for x in self.ids], dtype=np.int64)


def _encode(tokenizer: Any, data: TextExamples, max_length: int) -> _Encoded:
    # Left truncation keeps a trajectory's end (its outcome signal); see neural.encode.
    tokenizer.truncation_side = "left"
    ids = tokenizer(list(data.texts), truncation=True, max_length=max_length)["input_ids"]
    _, groups = np.unique(np.asarray(list(data.groups), dtype=object), return_inverse=True)
    return _Encoded(list(ids), data.targets, groups.astype(np.int64).reshape(-1))


class _Indices(Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class _Collate:
    def __init__(self, data: _Encoded, pad_id: int, left: bool) -> None:
        self.data, self.pad_id, self.left = data, pad_id, left

    def __call__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        seqs = [self.data.ids[i] for i in indices]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            cols = slice(width - len(s), width) if self.left else slice(0, len(s))
            ids[row, cols] = torch.tensor(s, dtype=torch.long)
            mask[row, cols] = 1
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": torch.tensor(self.data.labels[indices], dtype=torch.float32),
            "groups": torch.tensor(self.data.groups[indices], dtype=torch.long),
        }


def _group_batches(data: _Encoded, batch_size: int, rng: np.random.Generator) -> list[list[int]]:
    """Whole task groups packed into batches by length; groups over batch_size are split."""
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


class _BucketBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches in a new seeded order every epoch.

    Plain batches: shuffle, sort by length within windows of 16 batches, cut, shuffle the batches
    (little padding, yet varied batches). Group batches are packed once and only reordered.
    """

    def __init__(self, data: _Encoded, batch_size: int, grouped: bool, seed: int) -> None:
        super().__init__()
        self.batch_size, self.drop_last = batch_size, False
        self._lengths = data.lengths
        self._rng = np.random.default_rng(seed)
        self._fixed = _group_batches(data, batch_size, self._rng) if grouped else None

    def __len__(self) -> int:
        if self._fixed is not None:
            return len(self._fixed)
        return math.ceil(len(self._lengths) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._fixed
        if batches is None:
            perm, window = self._rng.permutation(len(self._lengths)), self.batch_size * 16
            batches = []
            for start in range(0, len(perm), window):
                chunk = perm[start : start + window]
                chunk = chunk[np.argsort(self._lengths[chunk], kind="stable")]
                step = self.batch_size
                batches += [chunk[i : i + step].tolist() for i in range(0, len(chunk), step)]
        for b in self._rng.permutation(len(batches)):
            yield batches[b]
