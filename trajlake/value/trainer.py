"""`ValueTrainer`: value models trained by `transformers.Trainer`, as TRL's `RewardTrainer` is.

The Trainer supplies what users expect of training (checkpoints and `resume_from_checkpoint`,
gradient accumulation, bf16, DDP / FSDP / DeepSpeed under `accelerate launch` or `torchrun`,
`report_to`); this subclass adds only what a value model changes: the BCE / Bradley–Terry /
listwise losses of `trajlake.value.losses` in `compute_loss`, batches of whole task groups,
validation AUROC and the full-set loss in `compute_metrics`, early stopping on them, and progress
through trajlake's `Progress`. `train_value_net` is the whole run for callers holding texts.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from trajlake._progress import NullProgress, Progress
from trajlake.errors import TrainingError, missing_extra
from trajlake.value.losses import LossKind, value_loss
from trajlake.value.metrics import auroc
from trajlake.value.trainer_args import ValueTrainingArguments
from trajlake.value.trainer_data import (
    BucketBatchSampler,
    EncodedExamples,
    SortedBatchSampler,
    TextExamples,
    ValueCollator,
    check_examples,
)

try:
    import torch
    from torch.utils.data import DataLoader
    from transformers import (
        EarlyStoppingCallback,
        EvalPrediction,
        PrinterCallback,
        Trainer,
        TrainerCallback,
    )
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e

logger = logging.getLogger(__name__)

Record = dict[str, float | int | None]


class ValueMetrics:
    """`compute_metrics` of a value model: loss over the whole validation set, AUROC, accuracy.

    The loss is recomputed over all examples at once rather than averaged over batches, because
    the ranking terms pair members of one task wherever batching put them.
    """

    def __init__(self, loss: str, alpha: float) -> None:
        """Score with the training loss `loss` (ranking weight `alpha`)."""
        self.loss, self.alpha = cast(LossKind, loss), alpha

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        """Metrics of one evaluation; AUROC is left out when the labels have one class."""
        labels, groups = prediction.label_ids  # type: ignore[misc]
        logits = torch.as_tensor(np.asarray(prediction.predictions), dtype=torch.float32)
        targets = torch.as_tensor(np.asarray(labels), dtype=torch.float32)
        groups_t = torch.as_tensor(np.asarray(groups))
        loss, _ = value_loss(self.loss, logits, targets, groups_t, self.alpha)
        probs = torch.sigmoid(logits.double()).numpy()
        positive = (targets.numpy() >= 0.5).astype(np.int64)
        metrics = {"loss": float(loss), "accuracy": float(np.mean((probs >= 0.5) == positive))}
        score = auroc(probs, positive)
        return metrics if score is None else metrics | {"auroc": float(score)}


class ValueTrainer(Trainer):
    """A `Trainer` for `ValueNet`s on `EncodedExamples`; configure it with
    `ValueTrainingArguments`."""

    args: ValueTrainingArguments

    def __init__(
        self,
        model: Any,
        args: ValueTrainingArguments,
        *,
        train_dataset: EncodedExamples | None = None,
        eval_dataset: EncodedExamples | None = None,
        processing_class: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        **kwargs: Any,
    ) -> None:
        """As `Trainer`; the collator pads with `processing_class`'s pad token and side."""
        if processing_class is None or processing_class.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token (load it with load_tokenizer)")
        left = getattr(processing_class, "padding_side", "right") == "left"
        kwargs.setdefault("data_collator", ValueCollator(int(processing_class.pad_token_id), left))
        kwargs.setdefault("compute_metrics", ValueMetrics(args.loss, args.alpha))
        callbacks = list(callbacks or [])
        if args.early_stopping_patience is not None and eval_dataset is not None:
            callbacks.append(EarlyStoppingCallback(args.early_stopping_patience))
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            **kwargs,
        )
        self.remove_callback(PrinterCallback)  # the library never prints
        # compute_loss returns a per-batch mean: the Trainer divides it over accumulation steps.
        self.model_accepts_loss_kwargs = False
        self.loss_is_scaled_for_ga = False
        self.n_train_tokens = 0
        self._parts: list[dict[str, float]] = []

    def _loader(self, data: EncodedExamples, sampler: Any) -> DataLoader[Any]:
        loader = DataLoader(data, batch_sampler=sampler, collate_fn=self.data_collator)
        return self.accelerator.prepare(loader)  # type: ignore[no-any-return]

    def get_train_dataloader(self) -> DataLoader[Any]:
        """Length-bucketed batches (whole task groups for ranking losses), seeded per epoch."""
        data = self.train_dataset
        if not isinstance(data, EncodedExamples):
            raise TypeError("ValueTrainer trains on EncodedExamples")
        args = self.args
        sampler = BucketBatchSampler(data, self._train_batch_size, args.grouped, args.seed)
        return self._loader(data, sampler)

    def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader[Any]:
        """Validation batches in length order."""
        data = self.eval_dataset if eval_dataset is None else eval_dataset
        if not isinstance(data, EncodedExamples):
            raise TypeError("ValueTrainer evaluates on EncodedExamples")
        return self._loader(data, SortedBatchSampler(data, self.args.eval_batch_size))

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """The recipe's value loss of one batch; refuses a non-finite one while training."""
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        loss, parts = value_loss(
            cast(LossKind, self.args.loss),
            logits.float(),
            inputs["labels"],
            inputs["groups"],
            self.args.alpha,
        )
        if model.training:
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"the loss diverged (non-finite) at step {self.state.global_step + 1}; "
                    f"lower the learning rate (learning_rate={self.args.learning_rate})"
                )
            self.n_train_tokens += int(inputs["attention_mask"].sum())
            self._parts.append(parts)
        return (loss, {"logits": logits}) if return_outputs else loss

    def prediction_step(
        self,
        model: Any,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[Any, Any, Any]:
        """Logits with (labels, groups); the loss comes from `ValueMetrics` over the whole set."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        return None, logits.float().detach(), (inputs["labels"], inputs["groups"])

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Add the means of the loss parts (bce, bt, bt_accuracy, ...) to each training log."""
        if "loss" in logs and self._parts:
            for key in sorted({k for d in self._parts for k in d}):
                logs[key] = float(np.mean([d[key] for d in self._parts if key in d]))
            self._parts = []
        super().log(logs, *args, **kwargs)


class ProgressCallback(TrainerCallback):
    """Shows optimizer steps on a `Progress` from the start (with its total) and each
    evaluation's epoch and metric in the description; only rank 0 of a launch draws."""

    def __init__(self, progress: Progress) -> None:
        """Report to `progress`."""
        self.progress = progress

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the bar at the steps a resumed run has already done."""
        if not state.is_world_process_zero:
            self.progress = NullProgress()
        self.progress.start("training", state.max_steps)
        if state.global_step:
            self.progress.advance(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """One more optimizer step."""
        self.progress.advance(1)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Name the epoch and the latest validation result on the bar, and log them."""
        metrics = kwargs.get("metrics") or {}
        shown = {k[5:]: v for k, v in metrics.items() if k in ("eval_auroc", "eval_loss")}
        text = ", ".join(f"val {k} {v:.3f}" for k, v in sorted(shown.items()))
        epoch = math.ceil(state.epoch or 0)
        logger.info("evaluation at step %d (epoch %d): %s", state.global_step, epoch, text)
        self.progress.start(f"training (epoch {epoch}, {text})", state.max_steps)
        self.progress.advance(state.global_step)


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


def history(log_history: list[dict[str, Any]]) -> list[Record]:
    """One record per evaluation (or per training log without validation): epoch, step,
    `train_*` (the loss and its parts since the previous one) and `val_*`."""
    by_step: dict[int, Record] = {}
    for entry in log_history:
        if "train_runtime" in entry:  # the Trainer's summary of the whole run
            continue
        step = int(entry["step"])
        record = by_step.setdefault(step, {"epoch": math.ceil(entry.get("epoch") or 0)})
        record["step"] = step
        for key, value in entry.items():
            if key.startswith("eval_") and not key.endswith(("_runtime", "_per_second")):
                record[f"val_{key[5:]}"] = value
            elif key not in ("epoch", "step", "learning_rate", "grad_norm") and "eval" not in key:
                record[f"train_{key}"] = value
    records = [by_step[s] for s in sorted(by_step)]
    for record in records:
        if "val_loss" in record:  # AUROC is undefined (None) on one-class validation labels
            record.setdefault("val_auroc", None)
    return records


def _best(records: list[Record], state: Any) -> Record | None:
    """The record of the checkpoint the Trainer kept as best (`checkpoint-<step>`)."""
    if not state.best_model_checkpoint:
        return None
    step = int(str(state.best_model_checkpoint).rsplit("-", 1)[-1])
    return next((r for r in records if r["step"] == step), None)


@contextlib.contextmanager
def own_accelerate_state() -> Iterator[None]:
    """Run the body on fresh accelerate singletons and give the caller's back afterwards.

    `AcceleratorState` is process-wide: a Trainer built after another trainer's silently
    inherits its settings (mixed precision from a TRL run, say). The process state of a
    distributed launch is kept: it describes the processes, not a trainer's choices.
    """
    from accelerate.state import AcceleratorState, GradientState, PartialState

    def distributed() -> bool:
        return torch.distributed.is_available() and torch.distributed.is_initialized()

    states = [AcceleratorState._shared_state, GradientState._shared_state]
    keep_processes = distributed()
    if not keep_processes:
        states.append(PartialState._shared_state)
    saved = [dict(state) for state in states]
    for state in states:
        state.clear()
    try:
        yield
    finally:
        if not keep_processes and distributed():
            states.pop()  # a process group this run set up stays described
            saved.pop()
        for state, old in zip(states, saved, strict=True):
            state.clear()
            state.update(old)


def train_value_net(
    model: Any,
    tokenizer: Any,
    train: TextExamples,
    val: TextExamples | None,
    args: ValueTrainingArguments,
    *,
    progress: Progress | None = None,
    callbacks: list[TrainerCallback] | None = None,
    resume_from_checkpoint: str | bool | None = None,
    log: Callable[[Record], None] | None = None,
) -> FitResult:
    """Train `model` in place with a `ValueTrainer` and return what happened.

    With `val` and `args.load_best_model_at_end`, the best evaluation's weights (by
    `args.metric_for_best_model`) are restored at the end; otherwise the last ones are kept. The
    model comes back unwrapped (no accelerate autocast patched onto it) in eval mode.

    Raises:
        TrainingError: an empty split, one class only for BCE, no mixed task group for a ranking
            loss, or a non-finite loss.
    """
    check_examples(train, val, args.loss)
    encoded_val = None if val is None else EncodedExamples(tokenizer, val, args.max_length)
    started = time.perf_counter()
    with own_accelerate_state():
        trainer = ValueTrainer(
            model,
            args,
            train_dataset=EncodedExamples(tokenizer, train, args.max_length),
            eval_dataset=encoded_val,
            processing_class=tokenizer,
            callbacks=[ProgressCallback(progress or NullProgress()), *(callbacks or [])],
        )
        trainer.train(resume_from_checkpoint=resume_from_checkpoint)
        trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    seconds = time.perf_counter() - started
    model.eval()
    records = history(trainer.state.log_history)
    for record in records if log is not None else []:
        log(record)  # type: ignore[misc]
    best = _best(records, trainer.state)
    return FitResult(
        history=records,
        best_epoch=None if best is None else int(best["epoch"] or 0),
        best_step=None if best is None else int(best["step"] or 0),
        best_val=best,
        n_steps=trainer.state.global_step,
        stopped_early=trainer.state.global_step < trainer.state.max_steps,
        n_train_tokens=trainer.n_train_tokens,
        train_seconds=seconds,
        tokens_per_second=trainer.n_train_tokens / seconds if seconds > 0 else 0.0,
    )
