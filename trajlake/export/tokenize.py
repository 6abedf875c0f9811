"""Tokenized SFT export: conversations → `input_ids`, `labels`, `loss_weight`, `attention_mask`.

Masks come from `_chat_render.render_conversation` (no `{% generation %}` needed); every row can be
self-checked with `verify_sample`.

Long conversations (`max_tokens`): a conversation that fits is one sample. One that does not is
split at turn boundaries: the *context* (every message before the first assistant message: system,
first user) is repeated at the start of every sample, then as many whole *turns* (the user/tool
messages since the previous assistant message + the assistant message) as fit, greedily; the
remainder starts the next sample. An assistant span is never cut. A turn that does not fit even
alone with the context is dropped (`truncated_turns`); messages after the last assistant message
carry no loss and are left out of split samples. Samples with no trained token (all weights 0, or
context alone too long) are not yielded (`dropped_samples`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal, Protocol

from trajlake.errors import ChatTemplateError, MaskVerificationError
from trajlake.export._chat_render import (
    Span,
    assistant_spans,
    encode_with_offsets,
    tokens_from_spans,
)

__all__ = [
    "ChatTemplateError",
    "MaskVerificationError",
    "SftConversationLike",
    "TokenizedStats",
    "chat_template_hash",
    "load_tokenizer",
    "tokenize_conversations",
    "verify_sample",
]

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


class SftConversationLike(Protocol):
    """What the tokenizer needs from a selected conversation (e.g. `SftConversation`)."""

    @property
    def trajectory_id(self) -> str: ...
    @property
    def messages(self) -> Sequence[dict[str, Any]]: ...
    @property
    def tools(self) -> Sequence[dict[str, Any]]: ...
    @property
    def weights(self) -> Sequence[float | None]: ...


@dataclass
class TokenizedStats:
    """Counts filled in while `tokenize_conversations` runs (mutable: the iterator updates it)."""

    conversations: int = 0
    samples: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    split_conversations: int = 0
    truncated_turns: int = 0
    dropped_samples: int = 0
    reference_fallbacks: int = 0


def load_tokenizer(tokenizer: str | Any) -> Any:
    """A tokenizer object: loaded with `AutoTokenizer.from_pretrained` when given a name or path."""
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            "the tokenizer has no chat template; set `tokenizer.chat_template` (a Jinja string) or "
            "pick a chat/instruct tokenizer"
        )
    return tokenizer


def chat_template_hash(tokenizer: Any) -> str:
    """sha256 (hex) of the tokenizer's chat template text, for the export manifest."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: hash them in a stable order
        template = "\n".join(f"{k}\n{template[k]}" for k in sorted(template))
    if not template:
        raise ChatTemplateError("the tokenizer has no chat template to hash")
    return hashlib.sha256(str(template).encode("utf-8")).hexdigest()


@dataclass
class _Rendered:
    ids: list[int]
    loss: list[float]
    token_spans: list[tuple[int, int] | None]  # per message: [first, last+1) token of its span
    method: str


def _render(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    weights: Sequence[float | None],
    tools: Sequence[dict[str, Any]] | None,
    method: Literal["auto", "fast", "reference"],
) -> _Rendered:
    text, spans, used = assistant_spans(tokenizer, messages, tools, method=method)
    ids, offsets = encode_with_offsets(tokenizer, text)
    loss = tokens_from_spans(offsets, spans, weights)
    return _Rendered(ids, loss, _token_spans(offsets, spans), used)


def _token_spans(
    offsets: Sequence[tuple[int, int]], spans: Sequence[Span | None]
) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    t = 0
    for span in spans:
        if span is None:
            out.append(None)
            continue
        while t < len(offsets) and offsets[t][1] <= span[0]:
            t += 1
        u = t
        while u < len(offsets) and offsets[u][0] < span[1]:
            u += 1
        out.append((t, u))
        t = u
    return out


def _row(trajectory_id: str, index: int, ids: list[int], loss: list[float]) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "sample_index": index,
        "input_ids": ids,
        "labels": [i if w != 0.0 else IGNORE_INDEX for i, w in zip(ids, loss, strict=True)],
        "loss_weight": loss,
        "attention_mask": [1] * len(ids),
    }


def _split(
    tokenizer: Any,
    conv: SftConversationLike,
    full: _Rendered,
    max_tokens: int,
    stats: TokenizedStats,
    method: Literal["auto", "fast", "reference"],
) -> Iterator[tuple[list[int], list[float]]]:
    messages, weights = list(conv.messages), list(conv.weights)
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not assistants:
        return
    first = assistants[0]
    # token-length estimates from the full render; each candidate sample is re-rendered and checked
    ends = [full.token_spans[i][1] for i in assistants]  # type: ignore[index]
    context_len = full.token_spans[first][0]  # type: ignore[index]
    turn_lens = [ends[0] - context_len] + [b - a for a, b in pairwise(ends)]
    turn_starts = [first] + [a + 1 for a in assistants[:-1]]
    k = 0
    while k < len(assistants):
        j, est = k, context_len
        while j < len(assistants) and est + turn_lens[j] <= max_tokens:
            est += turn_lens[j]
            j += 1
        j = max(j, k + 1)
        while True:
            idx = list(range(first)) + list(range(turn_starts[k], assistants[j - 1] + 1))
            sub = _render(
                tokenizer, [messages[i] for i in idx], [weights[i] for i in idx], conv.tools, method
            )
            stats.reference_fallbacks += sub.method == "reference" and method == "auto"
            if len(sub.ids) <= max_tokens or j == k + 1:
                break
            j -= 1
        if len(sub.ids) > max_tokens:
            stats.truncated_turns += 1  # one turn plus the context does not fit: drop the turn
        else:
            yield sub.ids, sub.loss
        k = j


def tokenize_conversations(
    tokenizer: str | Any,
    conversations: Iterable[SftConversationLike],
    *,
    max_tokens: int | None = None,
    stats: TokenizedStats | None = None,
    method: Literal["auto", "fast", "reference"] = "auto",
) -> Iterator[dict[str, Any]]:
    """Tokenize conversations with the tokenizer's chat template into training rows.

    Args:
        tokenizer: a Hugging Face tokenizer, or a name/path for `AutoTokenizer.from_pretrained`.
        conversations: objects with `trajectory_id`, `messages` (OpenAI chat dicts), `tools` and
            `weights` (one per message; None for non-assistant, 0.0 for untrained assistant turns).
        max_tokens: longest sample; longer conversations are split at turn boundaries (module doc).
        stats: filled in as rows are produced (samples, tokens, truncated turns, drops, fallbacks).
        method: mask derivation: "auto" (verified fast path, else incremental prefix rendering),
            "fast" or "reference".

    Yields:
        `{trajectory_id, sample_index, input_ids, labels, loss_weight, attention_mask}`; `labels` is
        `input_ids` with -100 wherever `loss_weight == 0` (unshifted, as HF causal-LM models
        expect).
    """
    if max_tokens is not None and max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    tok = load_tokenizer(tokenizer)
    stats = stats if stats is not None else TokenizedStats()
    for conv in conversations:
        stats.conversations += 1
        if len(conv.weights) != len(conv.messages):
            raise ValueError(
                f"{conv.trajectory_id}: {len(conv.weights)} weights for "
                f"{len(conv.messages)} messages"
            )
        full = _render(tok, conv.messages, conv.weights, conv.tools, method)
        stats.reference_fallbacks += full.method == "reference" and method == "auto"
        if max_tokens is None or len(full.ids) <= max_tokens:
            pieces: Iterable[tuple[list[int], list[float]]] = [(full.ids, full.loss)]
        else:
            stats.split_conversations += 1
            pieces = _split(tok, conv, full, max_tokens, stats, method)
        index = 0
        for ids, loss in pieces:
            trained = sum(1 for w in loss if w != 0.0)
            if trained == 0:
                stats.dropped_samples += 1
                continue
            stats.samples += 1
            stats.tokens += len(ids)
            stats.trained_tokens += trained
            yield _row(conv.trajectory_id, index, ids, loss)
            index += 1
        if index == 0 and max_tokens is not None and len(full.ids) > max_tokens:
            logger.warning("%s: no sample fits in %d tokens", conv.trajectory_id, max_tokens)


def _runs(loss: Sequence[float]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    start = None
    for t, w in enumerate([*loss, 0.0]):
        if w != 0.0 and start is None:
            start = t
        elif start is not None and (w == 0.0 or w != loss[start]):
            runs.append((start, t))
            start = t if w != 0.0 else None
    return runs


def verify_sample(
    tokenizer: str | Any, row: dict[str, Any], conversation: SftConversationLike
) -> None:
    """Check a row against its conversation; raise `MaskVerificationError` saying what is wrong.

    Checks: aligned lengths; labels == -100 exactly where loss_weight == 0; not all-one; not
    all-zero unless no assistant turn is trained; and each run of weighted tokens decodes to
    exactly the rendered text (content + tool calls + end-of-turn) of a trained assistant turn,
    with its weight, in order (all of them when the row is the whole conversation, consecutive ones
    for a split sample).
    """
    tok = load_tokenizer(tokenizer)
    ids, labels, loss = row["input_ids"], row["labels"], row["loss_weight"]
    where = f"{row.get('trajectory_id')} sample {row.get('sample_index')}"
    if not (len(ids) == len(labels) == len(loss) == len(row["attention_mask"])):
        raise MaskVerificationError(
            f"{where}: input_ids/labels/loss_weight/attention_mask lengths differ"
        )
    for t, (i, lab, w) in enumerate(zip(ids, labels, loss, strict=True)):
        if (w == 0.0) != (lab == IGNORE_INDEX) or (w != 0.0 and lab != i):
            raise MaskVerificationError(
                f"{where}: label at token {t} disagrees with loss_weight {w}"
            )
    if ids and all(w != 0.0 for w in loss):
        raise MaskVerificationError(
            f"{where}: every token is weighted (all-one mask): prompts and role headers "
            "would be trained"
        )
    text, spans, _ = assistant_spans(tok, list(conversation.messages), conversation.tools)
    expected = [
        (text[s[0] : s[1]], float(w))
        for s, w in zip(spans, conversation.weights, strict=True)
        if s is not None and w
    ]
    if not any(w != 0.0 for w in loss):
        if expected:
            raise MaskVerificationError(
                f"{where}: all-zero mask although {len(expected)} assistant turns are trained; "
                "the chat template's assistant turns were not found"
            )
        return
    got = [
        (
            tok.decode(ids[a:b], skip_special_tokens=False, clean_up_tokenization_spaces=False),
            float(loss[a]),
        )
        for a, b in _runs(loss)
    ]
    whole = ids == encode_with_offsets(tok, text)[0]
    starts = [0] if whole else range(len(expected) - len(got) + 1)
    if not any(expected[s : s + len(got)] == got for s in starts) or (
        whole and len(got) != len(expected)
    ):
        bad = next((g for g in got if g not in expected), got[0])
        raise MaskVerificationError(
            f"{where}: weighted tokens decode to {bad[0][:80]!r} (weight {bad[1]}), which is "
            "not the "
            f"rendered text of a trained assistant turn in order ({len(got)} weighted runs, "
            f"{len(expected)} trained turns)"
        )
