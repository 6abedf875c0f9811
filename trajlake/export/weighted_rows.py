"""Per-token loss weights for training, read back from SFT exports (the input of a weighted loss).

`weighted_rows` turns rows of the `tokenized` export (`input_ids` + `loss_weight`), of the
conversational `trl` export (`messages` + `message_weights`) or of the `axolotl` export (a `weight`
on each message) into checked `input_ids`, `labels`, `loss_weight` and `attention_mask` lists.
Conversations are tokenized by `tokenize_conversations`, so a `trl` row trains on exactly the
tokens, with exactly the weights, that the `tokenized` export of the same run holds. No torch here:
tensors and the loss live in `trajlake.weighted_sft`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trajlake.export.tokenize import IGNORE_INDEX, TokenizedStats, tokenize_conversations

__all__ = ["RowKind", "row_kind", "weighted_rows"]

logger = logging.getLogger(__name__)

RowKind = Literal["tokenized", "trl", "axolotl"]

# Columns of a weighted training row, in this order.
COLUMNS = ("trajectory_id", "sample_index", "input_ids", "labels", "loss_weight", "attention_mask")


def row_kind(columns: Sequence[str], first: Mapping[str, Any] | None = None) -> RowKind:
    """Which export a dataset's rows come from, from its column names (and first row).

    Raises:
        ValueError: the rows carry no per-token or per-message weights (training on them would
            silently weight every token alike).
    """
    if "loss_weight" in columns and "input_ids" in columns:
        return "tokenized"
    if "messages" in columns and "message_weights" in columns:
        return "trl"
    messages = (first or {}).get("messages") if "messages" in columns else None
    if messages and all(isinstance(m, Mapping) and "weight" in m for m in messages):
        return "axolotl"
    raise ValueError(
        f"rows with columns {sorted(columns)} carry no loss weights: expected `input_ids` + "
        "`loss_weight` (the tokenized export), `messages` + `message_weights` (the trl export) "
        "or `messages` with a `weight` on each message (the axolotl export)"
    )


@dataclass(frozen=True)
class _Conversation:
    """One conversational row in the shape `tokenize_conversations` takes."""

    trajectory_id: str
    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]]
    weights: Sequence[float | None]


def _where(row: Mapping[str, Any], index: int) -> str:
    tid = row.get("trajectory_id")
    sample = row.get("sample_index")
    name = f"row {index}" + (f" ({tid}" if tid else "")
    if tid:
        name += f" sample {sample})" if sample is not None else ")"
    return name


def _check_weights(weights: Sequence[Any], where: str, what: str) -> list[float]:
    out = []
    for t, w in enumerate(weights):
        value = 0.0 if w is None else float(w)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{where}: {what} {t} has weight {w}; weights must be finite and >= 0")
        out.append(value)
    return out


def _tokenized(row: Mapping[str, Any], where: str, max_tokens: int | None) -> dict[str, Any]:
    ids = list(row["input_ids"])
    weights = _check_weights(row["loss_weight"], where, "token")
    if len(weights) != len(ids):
        raise ValueError(f"{where}: {len(weights)} loss weights for {len(ids)} input_ids")
    if max_tokens is not None and len(ids) > max_tokens:
        raise ValueError(
            f"{where}: {len(ids)} tokens, longer than max_length {max_tokens}; cutting it would "
            "cut an assistant turn: export with `max_tokens` (it splits at turn boundaries) or "
            "raise max_length"
        )
    labels = [i if w != 0.0 else IGNORE_INDEX for i, w in zip(ids, weights, strict=True)]
    given = row.get("labels")
    if given is not None and list(given) != labels:
        t = next(t for t, (a, b) in enumerate(zip(given, labels, strict=False)) if a != b)
        raise ValueError(
            f"{where}: labels disagree with loss_weight at token {t} (label {given[t]}, weight "
            f"{weights[t]}): labels must be input_ids where the weight is > 0 and -100 elsewhere"
        )
    mask = row.get("attention_mask")
    return {
        "trajectory_id": row.get("trajectory_id"),
        "sample_index": row.get("sample_index", 0),
        "input_ids": ids,
        "labels": labels,
        "loss_weight": weights,
        "attention_mask": [1] * len(ids) if mask is None else list(mask),
    }


def _tools(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):  # datasets cannot hold free-form JSON schemas: a JSON string
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{where}: `tools` is not valid JSON: {e}") from e
    return list(value)


def _conversation(row: Mapping[str, Any], kind: RowKind, where: str) -> _Conversation:
    messages = list(row["messages"])
    if kind == "trl":
        weights = _check_weights(row["message_weights"], where, "message")
        if len(weights) != len(messages):
            raise ValueError(
                f"{where}: {len(weights)} message_weights for {len(messages)} messages"
            )
    else:  # axolotl: the weight rides on each message; the template must not see our keys
        weights = _check_weights([m.get("weight") for m in messages], where, "message")
        messages = [{k: v for k, v in m.items() if k not in ("weight", "train")} for m in messages]
    for i, (m, w) in enumerate(zip(messages, weights, strict=True)):
        if w != 0.0 and m.get("role") != "assistant":
            raise ValueError(
                f"{where}: message {i} ({m.get('role')}) has weight {w}; only assistant "
                "messages are trained"
            )
    return _Conversation(
        str(row.get("trajectory_id") or where), messages, _tools(row.get("tools"), where), weights
    )


def weighted_rows(
    batch: Mapping[str, Sequence[Any]],
    tokenizer: Any = None,
    *,
    max_tokens: int | None = None,
    first_index: int = 0,
) -> dict[str, list[Any]]:
    """Weighted training rows from a batch of export rows (a `datasets.map(batched=True)` body).

    Args:
        batch: columns → values, as `datasets` passes a batch (see `row_kind` for the formats).
        tokenizer: Hugging Face tokenizer with the chat template to train with (conversational
            rows only).
        max_tokens: longest row. Conversations longer than this are split at turn boundaries as
            the tokenized export splits them (turns that do not fit even alone are left out, and
            counted in a warning); a tokenized row longer than this is an error.
        first_index: dataset index of the batch's first row, for error messages.

    Returns:
        columns `trajectory_id`, `sample_index`, `input_ids`, `labels` (-100 where the weight is
        0), `loss_weight` (float per token) and `attention_mask`; a conversation yields one row
        per sample, and none when no token of it is trained (counted in a warning).

    Raises:
        ValueError: a row is malformed (lengths, negative or non-finite weights, weights on
            messages that are not the assistant's, labels that disagree with the weights); the
            message names the row.
    """
    names = list(batch)
    size = len(batch[names[0]]) if names else 0
    rows = [{k: batch[k][r] for k in names} for r in range(size)]
    kind = row_kind(names, rows[0] if rows else None)
    out: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    if kind == "tokenized":
        for r, row in enumerate(rows):
            for c, v in _tokenized(row, _where(row, first_index + r), max_tokens).items():
                out[c].append(v)
        return out
    if tokenizer is None:
        raise ValueError(f"{kind} rows are conversations: tokenizing them needs a tokenizer")
    convs = [_conversation(row, kind, _where(row, first_index + r)) for r, row in enumerate(rows)]
    stats = TokenizedStats()
    for sample in tokenize_conversations(tokenizer, convs, max_tokens=max_tokens, stats=stats):
        for c in COLUMNS:
            out[c].append(sample[c])
    if stats.dropped_samples or stats.truncated_turns:
        logger.warning(
            "rows %d-%d: %d samples without a trained token left out; %d turns longer than "
            "max_length %s (with the context) left out",
            first_index,
            first_index + size - 1,
            stats.dropped_samples,
            stats.truncated_turns,
            max_tokens,
        )
    return out
