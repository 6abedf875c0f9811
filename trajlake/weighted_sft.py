"""Credit-weighted SFT: the loss is Σ w·nll / Σ w over the trained tokens of an export.

TRL's `SFTTrainer` trains every token that is not masked alike, so turn weights from a credit run
never reach its loss. `WeightedSFTTrainer` is `SFTTrainer` with per-token float weights: it turns
the `trl`, `axolotl` or `tokenized` export into weighted rows once (`weighted_rows`: the chat
template's assistant spans, the same masks as the tokenized export), pads them with
`WeightedCollator` and weights each token's negative log-likelihood in `compute_loss`.

Normalisation: the denominator is Σ w over every micro-batch of one optimizer step (counted when
the Trainer fetches the step's batches, as it counts tokens for its own loss), so gradient
accumulation gives the loss of the whole step, not a mean of micro-batch means; with
`average_tokens_across_devices` it is summed over devices too. Evaluation normalises per batch.
`weighted_nll_loss` is the same loss from logits, for training loops of one's own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trajlake.errors import MissingExtra, TrainingError, missing_extra
from trajlake.export.tokenize import IGNORE_INDEX
from trajlake.export.weighted_rows import row_kind, weighted_rows

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e
try:
    import datasets
    import trl
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer
except ImportError as e:  # pragma: no cover - exercised only without trl
    raise MissingExtra(
        "trl and datasets are required for weighted SFT; install them with: "
        "pip install 'trajlake[sft]'"
    ) from e

__all__ = ["WeightedCollator", "WeightedSFTTrainer", "weighted_nll_loss"]

logger = logging.getLogger(__name__)

# TRL versions with a fused LM head give per-token log-probabilities without building the
# (batch, length, vocab) logits; older ones get the loss from the logits.
_FUSED_HEAD = hasattr(trl.trainer.utils, "add_fused_lm_head")


def _weighted_mean(
    log_probs: torch.Tensor, weights: torch.Tensor, normalizer: Any = None
) -> torch.Tensor:
    """-Σ w·log p / (Σ w, or `normalizer`): both (batch, length - 1), already shifted."""
    w = weights.to(torch.float32)
    total = -(w * log_probs.to(torch.float32)).sum()
    denom = w.sum() if normalizer is None else torch.as_tensor(normalizer, device=total.device)
    # a batch with no trained token gives 0 (and a zero gradient), not 0 / 0
    return total / denom.to(torch.float32).clamp(min=torch.finfo(torch.float32).tiny)


def weighted_nll_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    loss_weight: torch.Tensor,
    normalizer: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Σ w·nll / Σ w of a causal LM: position t predicts token t+1, weighted by `loss_weight[t+1]`.

    Args:
        logits: (batch, length, vocab) model outputs.
        labels: (batch, length) token ids, -100 where not trained (unshifted, as HF expects).
        loss_weight: (batch, length) float weight of each token (0 where not trained).
        normalizer: the denominator to use instead of this batch's Σ w (e.g. Σ w over all the
            micro-batches of one optimizer step).
    """
    shifted = labels[:, 1:]
    log_probs = -F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        shifted.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(shifted.shape)
    return _weighted_mean(log_probs, loss_weight[:, 1:], normalizer)


def _pad(rows: Sequence[Sequence[Any]], value: Any, width: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)


@dataclass
class WeightedCollator:
    """Pads rows into `input_ids`, `attention_mask`, `labels` and float32 `loss_weight` tensors.

    Rows are weighted rows (`weighted_rows`), or export rows as they are (tokenized, trl,
    axolotl), converted first; conversations need `tokenizer`, and give one row each (no split:
    split long ones with the trainer's `max_length` or the export's `max_tokens`). Padding is on
    the right, with weight 0.

    Args:
        tokenizer: tokenizer with the chat template (for conversations) and the pad token.
        pad_token_id: pad id (default: the tokenizer's pad token, else its end-of-sequence token).
        pad_to_multiple_of: round the padded length up to a multiple of this.
    """

    tokenizer: Any = None
    pad_token_id: int | None = None
    pad_to_multiple_of: int | None = None

    def _pad_id(self) -> int:
        for candidate in (
            self.pad_token_id,
            getattr(self.tokenizer, "pad_token_id", None),
            getattr(self.tokenizer, "eos_token_id", None),
        ):
            if candidate is not None:
                return int(candidate)
        raise ValueError("no pad token: pass pad_token_id or a tokenizer with a pad/eos token")

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("cannot collate an empty batch")
        batch = {k: [e.get(k) for e in examples] for k in examples[0]}
        rows = weighted_rows(batch, self.tokenizer)
        if len(rows["input_ids"]) != len(examples):
            raise ValueError(
                f"{len(examples) - len(rows['input_ids'])} of {len(examples)} rows have no "
                "trained token; leave them out before collating"
            )
        width = max(len(r) for r in rows["input_ids"])
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        return {
            "input_ids": _pad(rows["input_ids"], self._pad_id(), width, torch.long),
            "attention_mask": _pad(rows["attention_mask"], 0, width, torch.long),
            "labels": _pad(rows["labels"], IGNORE_INDEX, width, torch.long),
            "loss_weight": _pad(rows["loss_weight"], 0.0, width, torch.float32),
        }


def _map_rows(
    batch: Mapping[str, Sequence[Any]], indices: Sequence[int], tokenizer: Any, max_tokens: Any
) -> dict[str, list[Any]]:
    return weighted_rows(
        batch, tokenizer, max_tokens=max_tokens, first_index=indices[0] if indices else 0
    )


def _to_weighted_rows(dataset: Any, tokenizer: Any, args: Any, name: str) -> Any:
    """The dataset as weighted rows (a `datasets` map, cached like SFTTrainer's own)."""
    columns = dataset.column_names
    first = next(iter(dataset), None)
    if first is None:
        raise ValueError(f"the {name} dataset is empty")
    if columns is None:  # an IterableDataset without known features
        columns = list(first)
    row_kind(columns, first)  # a clear error now, not inside a map worker
    options: dict[str, Any] = {}
    if isinstance(dataset, datasets.Dataset):  # IterableDataset.map takes neither
        options = {"desc": f"Weighting {name} dataset", "num_proc": args.dataset_num_proc}
    return dataset.map(
        _map_rows,
        batched=True,
        with_indices=True,
        remove_columns=list(columns),
        fn_kwargs={"tokenizer": tokenizer, "max_tokens": args.max_length},
        **options,
    )


def _check_args(args: Any, kwargs: Mapping[str, Any]) -> None:
    problems = {
        "packing": "packing concatenates rows and drops the loss_weight column",
        "padding_free": "padding-free batches need TRL's own collator",
        "assistant_only_loss": "the weights already train only the credited assistant turns",
    }
    for field, why in problems.items():
        if getattr(args, field, False):
            raise ValueError(f"WeightedSFTTrainer does not support {field}=True: {why}")
    if getattr(args, "label_smoothing_factor", 0.0) > 0:
        raise ValueError("WeightedSFTTrainer does not support label smoothing")
    if getattr(args, "loss_type", "nll") != "nll":
        raise ValueError(f"WeightedSFTTrainer weights the nll loss; got loss_type={args.loss_type}")
    for name in ("compute_loss_func", "formatting_func"):
        if kwargs.get(name) is not None:
            raise ValueError(f"WeightedSFTTrainer computes its own loss from its rows: drop {name}")


def _load_tokenizer(model: Any) -> Any:
    from transformers import AutoTokenizer

    name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "")
    if not name:
        raise ValueError("pass processing_class: the model does not name its tokenizer")
    return AutoTokenizer.from_pretrained(name)


class WeightedSFTTrainer(SFTTrainer):
    """`SFTTrainer` whose loss is Σ w·nll / Σ w with the per-token weights of an SFT export.

    Takes the same arguments as `SFTTrainer`. `train_dataset`/`eval_dataset` hold rows of the
    `trl` export (`messages`, `tools`, `message_weights`), the `axolotl` export or the
    `tokenized` export (`input_ids`, `loss_weight`, ...). Conversations are tokenized with the
    processing class's chat template and split at turn boundaries to fit `args.max_length`;
    tokenized rows must already fit. Not supported: packing, padding-free batches,
    `assistant_only_loss`, `loss_type="dft"`, label smoothing, `compute_loss_func`,
    `formatting_func`.
    """

    # compute_loss divides by the step's Σ w: the Trainer must not divide again by the number
    # of accumulation steps
    loss_is_scaled_for_ga = True  # type: ignore[assignment]  # TRL annotates it as None

    def __init__(
        self,
        model: Any,
        args: Any = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "")
            args = SFTConfig(f"{str(name).split('/')[-1] or 'model'}-SFT")
        if not isinstance(args, SFTConfig):
            raise TypeError(f"args must be a trl SFTConfig, got {type(args).__name__}")
        _check_args(args, kwargs)
        if train_dataset is None:
            raise ValueError("`train_dataset` is required")
        tokenizer = processing_class if processing_class is not None else _load_tokenizer(model)
        train_dataset = _to_weighted_rows(train_dataset, tokenizer, args, "train")
        if isinstance(eval_dataset, Mapping):
            eval_dataset = {
                key: _to_weighted_rows(ds, tokenizer, args, str(key))
                for key, ds in eval_dataset.items()
            }
        elif eval_dataset is not None:
            eval_dataset = _to_weighted_rows(eval_dataset, tokenizer, args, "eval")
        super().__init__(
            model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            **kwargs,
        )
        if data_collator is None:
            # built after SFTTrainer settled the pad token (its eos token when there is none)
            multiple = args.pad_to_multiple_of
            self.data_collator = WeightedCollator(
                self.processing_class, pad_to_multiple_of=int(multiple) if multiple else None
            )

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()  # type: ignore[no-untyped-call]
        columns: list[str] = list(self._signature_columns or [])
        wanted = [c for c in ("attention_mask", "loss_weight") if c not in columns]
        self._signature_columns = [*columns, *wanted]  # type: ignore[assignment]  # TRL: None

    def get_batch_samples(
        self, epoch_iterator: Iterator[Any], num_batches: int, device: torch.device
    ) -> tuple[list[Any], Any]:
        """The step's micro-batches, and Σ w over all of them as the loss denominator."""
        batches, counted = super().get_batch_samples(epoch_iterator, num_batches, device)
        if not batches or any("loss_weight" not in b for b in batches):
            return batches, counted
        total = torch.stack([b["loss_weight"][:, 1:].float().sum() for b in batches]).sum()
        total = total.to(device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            total = self.accelerator.gather(total).sum()
        return batches, total

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """Σ w·nll / Σ w: over the step's micro-batches in training, over this batch otherwise."""
        if "loss_weight" not in inputs:
            raise TrainingError(
                "the batch has no loss_weight: WeightedSFTTrainer needs WeightedCollator (or a "
                "collator that passes the per-token weights through)"
            )
        weights = inputs["loss_weight"][:, 1:]
        labels = inputs["labels"]
        model_inputs = {k: v for k, v in inputs.items() if k not in ("labels", "loss_weight")}
        model_inputs["use_cache"] = False
        normalizer = num_items_in_batch if model.training else None
        if _FUSED_HEAD:
            outputs = model(**model_inputs, labels=labels, fused_lm_head=True)
            loss = _weighted_mean(outputs.log_probs, weights, normalizer)
            self._log_token_metrics(outputs, inputs, "train" if model.training else "eval")
        else:  # pragma: no cover - TRL without the fused head
            outputs = model(**model_inputs)
            loss = weighted_nll_loss(outputs.logits, labels, inputs["loss_weight"], normalizer)
        if normalizer is not None and self.args.average_tokens_across_devices:
            # Σ w counts every device's tokens and DDP averages the gradients over devices
            loss = loss * self.accelerator.num_processes
        if not return_outputs:
            return loss
        if _FUSED_HEAD:  # callers asking for outputs want the logits, which the fused head lacks
            with torch.no_grad():
                outputs = model(**model_inputs)
        return loss, outputs

    def _log_token_metrics(self, outputs: Any, inputs: Mapping[str, Any], mode: str) -> None:
        """SFTTrainer's per-token metrics (entropy, top-1 accuracy) over the trained tokens."""
        gather = self.accelerator.gather_for_metrics
        valid = gather(outputs.label_mask.sum()).sum()
        entropy = gather(outputs.entropy.detach().sum()).sum()
        correct = gather(outputs.is_top1.sum()).sum()
        metrics = self._metrics[mode]
        metrics["entropy"].append((entropy / valid).item() if valid > 0 else 0.0)
        metrics["mean_token_accuracy"].append((correct / valid).item() if valid > 0 else 0.0)
        if mode == "train":
            self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
        metrics["num_tokens"] = [self._total_train_tokens]
