"""`ValueTrainingArguments`: the one configuration of value-model training, on `TrainingArguments`.

Value training is a `transformers.Trainer` run (see `trajlake.value.trainer`), so its settings are
the Trainer's own (epochs, learning rate, accumulation, bf16, checkpoints, `report_to`, ...) plus
the few a value model adds: the loss, the ranking weight, the token budget and early stopping.
`arguments_for_recipe` maps a recipe's `train:` section onto them; keys the section does not name
(`report_to`, `logging_dir`, `save_total_limit`, ...) pass straight through to the Trainer.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trajlake.errors import missing_extra
from trajlake.value.losses import LOSS_KINDS

try:
    import torch
    from transformers import TrainingArguments
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e

logger = logging.getLogger(__name__)

Selection = Literal["auroc", "loss"]


def _help(text: str) -> Any:
    return {"help": text}


@dataclass
class ValueTrainingArguments(TrainingArguments):
    """`TrainingArguments` plus the value model's loss, token budget and early stopping."""

    loss: str = field(default="bce", metadata=_help("bce | bt | listwise | bce+bt | bce+listwise."))
    alpha: float = field(
        default=1.0, metadata=_help("Weight of the ranking term in bce+bt / bce+listwise.")
    )
    max_length: int = field(
        default=512, metadata=_help("Token budget; longer texts keep their last tokens.")
    )
    group_batches: bool | None = field(
        default=None,
        metadata=_help(
            "Build batches from whole task groups so BT/listwise pairs exist; None = on exactly "
            "when the loss has a ranking term."
        ),
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata=_help(
            "Stop after this many evaluations without improvement of metric_for_best_model; "
            "None trains all epochs."
        ),
    )
    # The collator needs `labels` and `groups`, which ValueNet.forward does not take.
    remove_unused_columns: bool = field(
        default=False, metadata=_help("Kept False: the value losses read labels and groups.")
    )
    # The library never draws nor reports anywhere unasked; the CLI passes a Progress instead.
    report_to: Any = field(default="none", metadata=_help("Integrations to log to."))
    disable_tqdm: bool | None = field(default=True, metadata=_help("No tqdm bars (see Progress)."))

    def __post_init__(self) -> None:
        """Reject values the value losses cannot use, then let the Trainer check the rest."""
        if self.loss not in LOSS_KINDS:
            raise ValueError(f"loss must be one of {LOSS_KINDS}, got {self.loss!r}")
        if self.alpha < 0 or self.max_length < 1:
            raise ValueError("alpha must be >= 0 and max_length >= 1")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 1:
            raise ValueError("early_stopping_patience must be >= 1 or None")
        if self.remove_unused_columns:
            raise ValueError("remove_unused_columns must stay False: the losses read labels")
        super().__post_init__()  # type: ignore[no-untyped-call]

    @property
    def grouped(self) -> bool:
        """Whether training batches are built from whole task groups."""
        return self.loss != "bce" if self.group_batches is None else self.group_batches


def _has_field(name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(TrainingArguments)}


def _warmup(ratio: float) -> dict[str, Any]:
    # transformers 5 folds warmup_ratio into warmup_steps (a float below 1 is a share of steps).
    return {"warmup_ratio": ratio} if _has_field("warmup_ratio") else {"warmup_steps": ratio}


def _schedule(eval_every: int, evaluate: bool) -> dict[str, Any]:
    """Log, evaluate and checkpoint together: every epoch, or every `eval_every` steps."""
    if eval_every:
        every: dict[str, Any] = {"logging_steps": eval_every, "save_steps": eval_every}
        strategy = "steps"
        if evaluate:
            every["eval_steps"] = eval_every
    else:
        every, strategy = {}, "epoch"
    return every | {
        "logging_strategy": strategy,
        "save_strategy": strategy,
        "eval_strategy": strategy if evaluate else "no",
    }


def arguments_for_recipe(
    train: Any, *, output_dir: str | Path, max_length: int, selection: Selection | None
) -> ValueTrainingArguments:
    """The `ValueTrainingArguments` of a recipe's `train:` section.

    Args:
        train: the recipe's `TrainSpec` (its named keys and any extra Trainer keys).
        output_dir: where the Trainer writes checkpoints (what `resume_from_checkpoint` reads).
        max_length: the token budget (the recipe's `serializer.max_tokens`).
        selection: the validation metric that picks the best checkpoint and drives early
            stopping (AUROC, or the loss when the validation labels have one class); None
            trains without validation and keeps the last weights.

    Raises:
        ValueError: an extra key that `TrainingArguments` does not have.
    """
    bf16 = bool(train.bf16) and torch.cuda.is_available()
    if train.bf16 and not bf16:
        logger.warning("bf16 requested but no CUDA device: training in float32")
    patience = train.early_stopping_patience or None
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "num_train_epochs": train.epochs,
        "per_device_train_batch_size": train.batch_size,
        "per_device_eval_batch_size": train.batch_size,
        "gradient_accumulation_steps": train.grad_accum,
        "learning_rate": train.lr,
        "weight_decay": train.weight_decay,
        "max_grad_norm": train.max_grad_norm,
        "max_steps": train.max_steps or -1,
        "seed": train.seed,
        "bf16": bf16,
        "loss": train.loss,
        "alpha": train.alpha,
        "max_length": max_length,
        "early_stopping_patience": patience if selection is not None else None,
        "load_best_model_at_end": selection is not None,
        "metric_for_best_model": selection,
        "greater_is_better": None if selection is None else selection == "auroc",
        # With load_best_model_at_end the Trainer keeps the best checkpoint and the latest.
        "save_total_limit": 1,
        "dataloader_pin_memory": torch.cuda.is_available(),
        # Launched as several processes (torchrun, accelerate) on a machine without CUDA,
        # transformers trains every rank alone on all the data unless told to use the CPU; with
        # it, the ranks train one model data-parallel (DDP over gloo).
        "use_cpu": not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1,
        **_warmup(train.warmup_ratio),
        **_schedule(train.eval_every, selection is not None),
    }
    kwargs |= dict(train.model_extra or {})
    known = {f.name for f in dataclasses.fields(ValueTrainingArguments)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"train: {', '.join(unknown)} are not TrainingArguments fields")
    return ValueTrainingArguments(**kwargs)
