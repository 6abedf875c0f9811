"""Training loop for neural value models over serialized texts, labels and task groups.

`fit_value_net` trains a `ValueNet` with AdamW and linear warmup/decay in length-bucketed batches,
evaluates, stops early and keeps the best weights; `accelerate` spreads it over devices unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from trajlake.errors import TrainingError, missing_extra
from trajlake.value.losses import LOSS_KINDS, LossKind, value_loss
from trajlake.value.metrics import auroc
from trajlake.value.neural import ValueNet, ValueNetSpec, save_value_net

try:
    import torch
    from torch.utils.data import DataLoader, Dataset, Sampler
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

__all__ = ["FitConfig", "FitProgress", "FitResult", "TextExamples", "fit_value_net"]

logger = logging.getLogger(__name__)
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


# --------------------------------------------------------------------------- batching


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


# --------------------------------------------------------------------------- checks, evaluation


def _check_data(train: TextExamples, val: TextExamples | None, kind: LossKind) -> None:
    if len(train) == 0:
        raise TrainingError("the training split is empty")
    if val is not None and len(val) == 0:
        raise TrainingError("the validation split is empty (pass val=None to train without one)")
    y = train.targets
    if kind.startswith("bce") and (not np.any(y >= 0.5) or not np.any(y < 0.5)):
        which = "positives (successes)" if not np.any(y >= 0.5) else "negatives (failures)"
        raise TrainingError(f"the training split has no {which}; BCE cannot learn from one class")
    if kind != "bce":
        groups = np.asarray(list(train.groups), dtype=object)
        mixed = any(len(set(y[groups == g])) > 1 for g in set(train.groups))
        if not mixed:
            raise TrainingError(
                f"no task group in the training split has both a success and a failure; "
                f"the {kind!r} loss needs such groups (use loss='bce')"
            )


def _autocast(bf16: bool) -> contextlib.AbstractContextManager[Any]:
    if bf16:
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _evaluate(
    model: ValueNet, data: _Encoded, collate: _Collate, config: FitConfig, bf16: bool
) -> Record:
    """Val loss (the training loss), AUROC and accuracy at 0.5, on one process' full copy."""
    device = next(model.parameters()).device
    order = np.argsort(data.lengths, kind="stable")
    logits = torch.zeros(len(order), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size].tolist()
            batch = collate(idx)
            with _autocast(bf16):
                out = model(batch["input_ids"].to(device), batch["attention_mask"].to(device))
            logits[idx] = out.float().cpu()
        labels = torch.tensor(data.labels, dtype=torch.float32)
        groups = torch.tensor(data.groups, dtype=torch.long)
        loss, _ = value_loss(config.loss, logits, labels, groups, config.alpha)
    model.train()
    probs = torch.sigmoid(logits.double()).numpy()
    positive = (data.labels >= 0.5).astype(np.int64)
    return {
        "val_loss": float(loss),
        "val_auroc": auroc(probs, positive),
        "val_accuracy": float(np.mean((probs >= 0.5) == (positive == 1))),
    }


def _improved(record: Record, best: Record | None) -> bool:
    if best is None:
        return True
    score, best_score = record.get("val_auroc"), best.get("val_auroc")
    if score is not None and best_score is not None:
        return score > best_score
    loss, best_loss = record.get("val_loss"), best.get("val_loss")
    return loss is not None and best_loss is not None and loss < best_loss


# --------------------------------------------------------------------------- the loop


def _optimizer(model: ValueNet, config: FitConfig) -> torch.optim.Optimizer:
    # Decaying biases and norm gains only shrinks them toward 0 and hurts; the usual exclusion.
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}]
    groups.append({"params": rest, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=config.lr)


def _linear_schedule(
    optimizer: torch.optim.Optimizer, total: int, warmup_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = int(total * warmup_ratio)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _accelerator(config: FitConfig) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    # Backbone parts the value head never reads (e.g. BERT's pooler) get no gradient, which DDP
    # would otherwise reject.
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
    return Accelerator(gradient_accumulation_steps=config.grad_accum, kwargs_handlers=[ddp])


class _Run:
    """The mutable state of one `fit_value_net` call."""

    def __init__(
        self,
        model: ValueNet,
        tokenizer: Any,
        config: FitConfig,
        spec: ValueNetSpec,
        val: _Encoded | None,
        progress: FitProgress,
        log: Callable[[Record], None] | None,
    ) -> None:
        self.model, self.tokenizer, self.config, self.spec = model, tokenizer, config, spec
        self.val, self.progress, self.log = val, progress, log
        self.bf16 = config.bf16 and torch.cuda.is_available()
        if config.bf16 and not self.bf16:
            logger.warning("bf16 requested but no CUDA device: training in float32")
        self.history: list[Record] = []
        self.best: Record | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.bad_evals, self.step, self.total = 0, 0, 0
        self.losses: list[dict[str, float]] = []

    def train(self, train: _Encoded) -> FitResult:
        config, acc = self.config, _accelerator(self.config)
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        collate = _Collate(train, int(self.tokenizer.pad_token_id), left)
        sampler = _BucketBatchSampler(train, config.batch_size, config.grouped, config.seed)
        loader = DataLoader(_Indices(len(train.ids)), batch_sampler=sampler, collate_fn=collate)
        if config.gradient_checkpointing:
            self.model.enable_gradient_checkpointing()
        self.model.train()
        model, optimizer, loader = acc.prepare(self.model, _optimizer(self.model, config), loader)
        self.total = math.ceil(len(loader) / config.grad_accum) * config.epochs
        if config.max_steps is not None:
            self.total = min(self.total, config.max_steps)
        scheduler = _linear_schedule(optimizer, self.total, config.warmup_ratio)
        tokens, started, stop, epoch = 0, time.perf_counter(), False, 0
        for epoch in range(1, config.epochs + 1):
            for batch in loader:
                tokens += int(batch["attention_mask"].sum())
                self._micro_step(acc, model, optimizer, batch)
                if not acc.sync_gradients:
                    continue
                scheduler.step()
                stop = self._after_step(acc, epoch, float(scheduler.get_last_lr()[0]))
                if stop:
                    break
            if stop:
                break
            if config.eval_every == 0:
                stop = self._evaluate(acc, epoch)
                if stop:
                    break
        if self.losses:  # steps after the last evaluation (max_steps or eval_every)
            self._evaluate(acc, epoch)
        return self._result(acc, tokens, time.perf_counter() - started, stop)

    def _micro_step(self, acc: Any, model: Any, optimizer: Any, batch: dict[str, Any]) -> None:
        config = self.config
        with acc.accumulate(model):
            with _autocast(self.bf16):
                logits = model(batch["input_ids"], batch["attention_mask"])
            loss, parts = value_loss(
                config.loss, logits.float(), batch["labels"], batch["groups"], config.alpha
            )
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"the loss diverged (non-finite) at step {self.step + 1}; "
                    f"lower the learning rate (lr={config.lr})"
                )
            acc.backward(loss)
            if acc.sync_gradients and config.max_grad_norm is not None:
                acc.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
        self.losses.append({"loss": float(loss.detach())} | parts)

    def _after_step(self, acc: Any, epoch: int, lr: float) -> bool:
        self.step += 1
        self.progress(self.step, self.total, {"loss": self.losses[-1]["loss"], "lr": lr})
        stop = self.step >= self.total
        if self.config.eval_every and self.step % self.config.eval_every == 0:
            stop = self._evaluate(acc, epoch) or stop
        return stop

    def _evaluate(self, acc: Any, epoch: int) -> bool:
        """Log one history record; keep the best weights; True when early stopping triggers."""
        record: Record = {"epoch": epoch, "step": self.step}
        for key in sorted({k for d in self.losses for k in d}):
            values = [d[key] for d in self.losses if key in d]
            record[f"train_{key}"] = float(np.mean(values))
        self.losses = []
        model: ValueNet = acc.unwrap_model(self.model)
        if self.val is not None:
            collate = _Collate(self.val, int(self.tokenizer.pad_token_id), False)
            record |= _evaluate(model, self.val, collate, self.config, self.bf16)
        self.history.append(record)
        logger.info("value-net evaluation %s", record)
        if self.log is not None:
            self.log(record)
        if self.val is not None and not _improved(record, self.best):
            self.bad_evals += 1
            patience = self.config.early_stopping_patience
            return patience is not None and self.bad_evals >= patience
        self.best, self.bad_evals = record, 0
        self.best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        if self.config.checkpoint_dir is not None and acc.is_main_process:
            save_value_net(self.config.checkpoint_dir, model, self.tokenizer, self.spec)
        return False

    def _result(self, acc: Any, tokens: int, seconds: float, stopped: bool) -> FitResult:
        model: ValueNet = acc.unwrap_model(self.model)
        if self.best_state is not None:
            model.load_state_dict(self.best_state)
        n_tokens = int(acc.gather(torch.tensor([tokens], device=acc.device)).sum())
        model.eval()
        return FitResult(
            history=self.history,
            best_epoch=None if self.best is None else int(self.best["epoch"] or 0),
            best_step=None if self.best is None else int(self.best["step"] or 0),
            best_val=None if self.val is None else self.best,
            n_steps=self.step,
            stopped_early=stopped and self.step < self.total,
            n_train_tokens=n_tokens,
            train_seconds=seconds,
            tokens_per_second=n_tokens / seconds if seconds > 0 else 0.0,
        )


def fit_value_net(
    model: ValueNet,
    tokenizer: Any,
    train: TextExamples,
    val: TextExamples | None,
    config: FitConfig,
    *,
    spec: ValueNetSpec | None = None,
    progress: FitProgress | None = None,
    log: Callable[[Record], None] | None = None,
) -> FitResult:
    """Train `model` in place on `train`, select on `val`, and return what happened.

    Evaluates every epoch (or every `config.eval_every` steps) on `val`: train loss, val loss,
    val AUROC and val accuracy at threshold 0.5. The weights of the best evaluation (highest val
    AUROC, or lowest val loss when AUROC is undefined) are restored at the end and, with
    `config.checkpoint_dir`, saved there at each improvement. Without `val`, the last weights are
    kept. Runs under `accelerate` (one CPU process here; `accelerate launch` for several GPUs).

    Args:
        model: the value net, trained in place (left in eval mode).
        tokenizer: its tokenizer (needs a pad token).
        train: training examples.
        val: validation examples, or None.
        config: hyper-parameters.
        spec: what checkpoints record; by default `model.spec(max_length=config.max_length)`
            with the loss in `extra`.
        progress: called after each optimizer step; no-op by default.
        log: called with each history record.

    Raises:
        TrainingError: an empty split, one class only for BCE, no mixed task group for a ranking
            loss, or a non-finite loss.
    """
    _check_data(train, val, config.loss)
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token (load it with load_tokenizer)")
    torch.manual_seed(config.seed)
    if spec is None:
        extra = {"loss": config.loss, "alpha": config.alpha}
        spec = model.spec(max_length=config.max_length, extra=extra)
    encoded_val = None if val is None else _encode(tokenizer, val, config.max_length)
    run = _Run(model, tokenizer, config, spec, encoded_val, progress or _no_progress, log)
    return run.train(_encode(tokenizer, train, config.max_length))
