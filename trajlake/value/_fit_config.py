"""The records of a value-net training run: its configuration, examples, result and progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from trajlake.value.losses import LOSS_KINDS, LossKind

Record = dict[str, float | int | None]


def _help(text: str) -> Any:
    return {"help": text}


@dataclass(frozen=True)
class FitConfig:
    """Hyper-parameters of `fit_value_net`; every field's help is in its metadata."""

    epochs: int = field(default=3, metadata=_help("Passes over the training set."))
    batch_size: int = field(default=8, metadata=_help("Examples per micro-batch (per device)."))
    lr: float = field(default=5e-5, metadata=_help("Peak AdamW learning rate."))
    weight_decay: float = field(
        default=0.01, metadata=_help("AdamW weight decay (not applied to biases and norms).")
    )
    warmup_ratio: float = field(
        default=0.1, metadata=_help("Share of optimizer steps spent warming the lr up from 0.")
    )
    grad_accum: int = field(
        default=1, metadata=_help("Micro-batches accumulated per optimizer step.")
    )
    max_grad_norm: float | None = field(
        default=1.0, metadata=_help("Clip the global gradient norm to this; None disables.")
    )
    loss: LossKind = field(
        default="bce", metadata=_help("bce | bt | listwise | bce+bt | bce+listwise.")
    )
    alpha: float = field(
        default=1.0, metadata=_help("Weight of the ranking term in bce+bt / bce+listwise.")
    )
    max_length: int = field(
        default=512, metadata=_help("Token budget; longer texts keep their last tokens.")
    )
    seed: int = field(default=0, metadata=_help("Seeds dropout and batch shuffling."))
    early_stopping_patience: int | None = field(
        default=None,
        metadata=_help(
            "Stop after this many evaluations without val AUROC improvement (val loss when AUROC "
            "is undefined); None trains all epochs."
        ),
    )
    eval_every: int = field(
        default=0, metadata=_help("Evaluate every this many optimizer steps; 0 = every epoch.")
    )
    bf16: bool = field(
        default=False, metadata=_help("Autocast the backbone to bfloat16 (CUDA only; else off).")
    )
    gradient_checkpointing: bool = field(
        default=False, metadata=_help("Recompute activations in backward to save memory.")
    )
    group_batches: bool | None = field(
        default=None,
        metadata=_help(
            "Build batches from whole task groups so BT/listwise pairs exist; None = on exactly "
            "when the loss has a ranking term."
        ),
    )
    max_steps: int | None = field(
        default=None, metadata=_help("Stop after this many optimizer steps; None = no cap.")
    )
    checkpoint_dir: str | Path | None = field(
        default=None, metadata=_help("Save the model here (safetensors) at each improvement.")
    )

    def __post_init__(self) -> None:
        """Reject out-of-range values."""
        positive = {"epochs": self.epochs, "batch_size": self.batch_size}
        positive |= {"grad_accum": self.grad_accum, "max_length": self.max_length}
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.lr <= 0 or self.weight_decay < 0 or self.alpha < 0:
            raise ValueError("lr must be > 0; weight_decay and alpha must be >= 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must lie in [0, 1), got {self.warmup_ratio}")
        if self.loss not in LOSS_KINDS:
            raise ValueError(f"loss must be one of {LOSS_KINDS}, got {self.loss!r}")
        if self.eval_every < 0 or (self.max_steps is not None and self.max_steps < 1):
            raise ValueError("eval_every must be >= 0 and max_steps >= 1")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 1:
            raise ValueError("early_stopping_patience must be >= 1 or None")

    @property
    def grouped(self) -> bool:
        """Whether batches are built from whole task groups."""
        return self.loss != "bce" if self.group_batches is None else self.group_batches


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


@dataclass(frozen=True)
class FitResult:
    """What a training run did: history per evaluation, best point and throughput."""

    history: list[Record]
    best_epoch: int | None
    best_step: int | None
    best_val: Record | None
    n_steps: int
    stopped_early: bool
    n_train_tokens: int
    train_seconds: float
    tokens_per_second: float


class FitProgress(Protocol):
    """Receives training progress after each optimizer step."""

    def __call__(self, step: int, total: int, metrics: dict[str, float]) -> None:
        """`step` of `total` optimizer steps are done; `metrics` holds loss, lr and evals."""


def _no_progress(step: int, total: int, metrics: dict[str, float]) -> None:
    """The default progress: reports nothing."""
