"""Training loop for neural value models over serialized texts, labels and task groups.

`fit_value_net` trains a `ValueNet` with AdamW and linear warmup/decay in length-bucketed batches,
evaluates, stops early and keeps the best weights; `accelerate` spreads it over devices unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trajlake.errors import TrainingError, missing_extra
from trajlake.value._fit_batches import _encode
from trajlake.value._fit_config import (
    FitConfig,
    FitProgress,
    FitResult,
    Record,
    TextExamples,
    _no_progress,
)
from trajlake.value._fit_loop import _own_accelerate_state, _Run
from trajlake.value.losses import LossKind
from trajlake.value.neural import ValueNet, ValueNetSpec

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

__all__ = ["FitConfig", "FitProgress", "FitResult", "TextExamples", "fit_value_net"]


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
    kept. Runs under `accelerate` (one CPU process here; `accelerate launch` for several GPUs) on
    accelerate state of its own: what an earlier trainer in the process configured (mixed
    precision, plugins) neither changes training nor is lost, and the model comes back unwrapped.

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
    with _own_accelerate_state():
        return run.train(_encode(tokenizer, train, config.max_length))
