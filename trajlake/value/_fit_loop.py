"""The training loop behind `fit_value_net`: optimizer, schedule, evaluation and accelerate setup.

Each run gets accelerate state of its own, so a trainer run earlier in the process (its mixed
precision, plugins, forced CPU) changes neither how the model trains nor the model returned.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from trajlake.errors import TrainingError, missing_extra
from trajlake.value._fit_batches import _BucketBatchSampler, _Collate, _Encoded, _Indices
from trajlake.value._fit_config import FitConfig, FitProgress, FitResult, Record
from trajlake.value.losses import value_loss
from trajlake.value.metrics import auroc
from trajlake.value.neural import ValueNet, ValueNetSpec, save_value_net

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

logger = logging.getLogger(__name__)


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


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


@contextlib.contextmanager
def _own_accelerate_state() -> Iterator[None]:
    """Run the body on fresh accelerate singletons and give the caller's back afterwards.

    `AcceleratorState` is process-wide: an `Accelerator` built after another trainer's silently
    inherits its settings (mixed_precision="bf16" from a TRL/transformers run, say), and `prepare`
    then wraps the model's forward in autocast, which would outlive training. The process state of
    a distributed launch is kept: it describes the processes, not a trainer's choices.
    """
    from accelerate.state import AcceleratorState, GradientState, PartialState

    states = [AcceleratorState._shared_state, GradientState._shared_state]
    keep_processes = _distributed()
    if not keep_processes:
        states.append(PartialState._shared_state)
    saved = [dict(state) for state in states]
    for state in states:
        state.clear()
    try:
        yield
    finally:
        if not keep_processes and _distributed():
            states.pop()  # a process group this run set up stays described
            saved.pop()
        for state, old in zip(states, saved, strict=True):
            state.clear()
            state.update(old)


def _accelerator(config: FitConfig) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    # Backbone parts the value head never reads (e.g. BERT's pooler) get no gradient, which DDP
    # would otherwise reject.
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
    # Precision is `FitConfig.bf16`'s alone (`_autocast`, float32 head): accelerate's own mixed
    # precision stays off, whatever the environment or an earlier trainer asks for.
    return Accelerator(
        mixed_precision="no",
        gradient_accumulation_steps=config.grad_accum,
        kwargs_handlers=[ddp],
    )


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
        # The model goes back as it came: no wrapper, no forward patched by `prepare`.
        model: ValueNet = acc.unwrap_model(self.model, keep_fp32_wrapper=False)
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
