"""Causal-LM machinery of the `hindsight` value source: loading a model by name or directory,
turning trajectories into token segments, scoring log p(target | outcome, history) in batches
that reuse the outcome prefix's encoding, and fine-tuning a small LM on outcome-prefixed turns.

Torch and transformers are imported here only; `trajlake.value.hindsight` imports this module
lazily, so naming or configuring the source costs nothing until it scores.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajlake.credit._text_features import Key, Observation
from trajlake.credit._types import TrajectoryTurns
from trajlake.errors import TrajlakeError, missing_extra

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

try:
    import transformers
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e

log = logging.getLogger(__name__)

ACTION_HEADER = "\n### action\n"
OBSERVATION_HEADER = "\n### observation\n"


@dataclass
class CausalLM:
    """A causal LM, its tokenizer and the device it runs on."""

    model: Any
    tokenizer: Any
    device: str


def load_causal_lm(name_or_path: str | Path, device: str = "cpu") -> CausalLM:
    """`AutoModelForCausalLM` / `AutoTokenizer.from_pretrained(name_or_path)`, in eval mode.

    A path-like name that is not a directory, a directory without a causal-LM config, or a
    hub name that cannot be fetched raises `TrajlakeError` naming the model and the cause.
    """
    name = str(name_or_path)
    looks_local = name.startswith((".", "/", "~")) or Path(name).exists()
    if looks_local and not Path(name).expanduser().is_dir():
        raise TrajlakeError(
            f"hindsight: no model directory {name!r} (give a directory saved with "
            "save_pretrained, or a model name the transformers hub knows)"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name)
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(name)
    except (OSError, ValueError, KeyError) as e:
        raise TrajlakeError(
            f"hindsight: could not load a causal LM and its tokenizer from {name!r}: {e}"
        ) from e
    return CausalLM(model.to(device).eval(), tokenizer, device)


def position_limit(lm: CausalLM) -> int | None:
    """The longest sequence the model's position embeddings allow (None when unbounded)."""
    config = lm.model.config
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def pad_id(tokenizer: Any) -> int:
    """The id used for padding (pad, else eos, else 0); padded positions are masked anyway."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    return 0


@dataclass
class Segments:
    """A trajectory's token segments: per turn the action's ids and the observation's ids."""

    actions: list[list[int]]
    observations: list[list[int]]


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def segments(
    tokenizer: Any,
    trajectories: Sequence[TrajectoryTurns],
    observations: Mapping[Key, Observation],
    segment_tokens: int,
) -> list[Segments]:
    """Token segments of every trajectory: an action keeps its first `segment_tokens` ids, an
    observation its first and last halves (commands and headers start it; test summaries and
    tracebacks end it)."""
    out: list[Segments] = []
    half = segment_tokens // 2
    for t in trajectories:
        acts, obs = [], []
        for turn in t.turns:
            acts.append(_ids(tokenizer, ACTION_HEADER + turn.action_text)[:segment_tokens])
            seen = observations.get((t.trajectory_id, t.thread, turn.turn))
            ids = _ids(tokenizer, OBSERVATION_HEADER + seen.text) if seen is not None else []
            if len(ids) > segment_tokens:
                ids = ids[:half] + ids[len(ids) - (segment_tokens - half) :]
            obs.append(ids)
        out.append(Segments(acts, obs))
    return out


@dataclass(frozen=True)
class Unit:
    """One scored span: turn `turn` of trajectory `index`, its history tail and its target."""

    index: int
    turn: int
    context: tuple[int, ...]
    target: tuple[int, ...]


def units(segs: Sequence[Segments], *, budget: int, include_observation: bool) -> list[Unit]:
    """A unit per turn: target = the action (plus its observation when `include_observation`),
    context = the last tokens of the earlier turns so that context + target ≤ `budget`."""
    out: list[Unit] = []
    for i, s in enumerate(segs):
        history: list[int] = []
        for u, (act, obs) in enumerate(zip(s.actions, s.observations, strict=True)):
            target = (act + obs) if include_observation else act
            target = target[: max(budget - 1, 1)]
            room = budget - len(target)
            context = history[len(history) - room :] if room > 0 else []
            out.append(Unit(i, u, tuple(context), tuple(target)))
            history += act + obs
    return out


def prefix_cache(lm: CausalLM, prefix: Sequence[int]) -> Any:
    """The model's cache after `prefix` (None when the model gives none)."""
    ids = torch.tensor([list(prefix)], device=lm.device)
    out = lm.model(ids, use_cache=True)
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


def _batch_inputs(
    rows: Sequence[Sequence[int]], past: int, pad: int, device: str
) -> dict[str, torch.Tensor]:
    """Left-padded ids with the mask over (cached prefix + row) and explicit positions, so a
    row's positions do not depend on the padding of the others (batched = unbatched)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), past + width), dtype=torch.long)
    mask[:, :past] = 1
    for j, r in enumerate(rows):
        ids[j, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        mask[j, past + width - len(r) :] = 1
    positions = (torch.cumsum(mask, dim=1) - 1)[:, past:].clamp(min=0)
    return {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": positions.to(device),
    }


def _target_logprobs(logits: torch.Tensor, rows: Sequence[Unit], ids: torch.Tensor) -> list[float]:
    """Σ log p(target token) per row; `logits` hold the last k positions of left-padded rows."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    k = logp.shape[1]
    width = ids.shape[1]
    out: list[float] = []
    for j, unit in enumerate(rows):
        m = len(unit.target)
        tokens = ids[j, width - m :]
        picked = logp[j, k - m :].gather(1, tokens.unsqueeze(1)).squeeze(1)
        out.append(float(picked.sum()))
    return out


def score(
    lm: CausalLM,
    prefix: Sequence[int],
    todo: Sequence[Unit],
    *,
    batch_size: int,
    reuse_prefix: bool = True,
) -> list[float]:
    """log p(target | prefix, context) summed over each unit's target tokens, in `todo` order.

    Units are batched by length; `prefix` (the outcome string) is encoded once and its cache
    copied into every batch when `reuse_prefix` and the model gives a cache (its last token is
    fed with each row, so the first target token always has a prediction)."""
    if not prefix:
        raise ValueError("the hindsight prefix must encode to at least one token")
    pad = pad_id(lm.tokenizer)
    order = sorted(range(len(todo)), key=lambda j: len(todo[j].context) + len(todo[j].target))
    out = [0.0] * len(todo)
    with torch.no_grad():
        cache = prefix_cache(lm, prefix[:-1]) if reuse_prefix and len(prefix) > 1 else None
        head = [prefix[-1]] if cache is not None else list(prefix)
        past = len(prefix) - 1 if cache is not None else 0
        for lo in range(0, len(order), batch_size):
            rows = [todo[j] for j in order[lo : lo + batch_size]]
            inputs = _batch_inputs(
                [[*head, *u.context, *u.target] for u in rows], past, pad, lm.device
            )
            keep = max(len(u.target) for u in rows) + 1
            kw: dict[str, Any] = {"logits_to_keep": keep, "use_cache": cache is not None}
            if cache is not None:
                batch_cache = copy.deepcopy(cache)
                batch_cache.batch_repeat_interleave(len(rows))
                kw["cache"] = batch_cache
            logits = lm.model(**inputs, **kw).logits[:, -keep:]
            for j, value in zip(
                order[lo : lo + batch_size],
                _target_logprobs(logits, rows, inputs["input_ids"]),
                strict=True,
            ):
                out[j] = value
    return out


@dataclass(frozen=True)
class TuneConfig:
    """Fine-tuning of the outcome-conditioned LM (cross-fitted by task in `hindsight`)."""

    steps: int = 300
    batch_size: int = 16
    lr: float = 1e-3
    seed: int = 0
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 2


def tiny_lm(tokenizer: Any, max_positions: int, config: TuneConfig, device: str) -> CausalLM:
    """A randomly initialised small GPT-2 over `tokenizer`'s vocabulary."""
    torch.manual_seed(config.seed)
    gpt2 = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=max_positions,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        bos_token_id=pad_id(tokenizer),
        eos_token_id=pad_id(tokenizer),
    )
    model: Any = transformers.GPT2LMHeadModel(gpt2)
    return CausalLM(model.to(device), tokenizer, device)


def fine_tune(
    lm: CausalLM,
    examples: Sequence[tuple[Sequence[int], Unit]],
    config: TuneConfig,
) -> float:
    """Train `lm` on (outcome prefix, unit) examples: next-token loss on the unit's context and
    target (not on the prefix). Returns the mean loss of the last 10% of the steps."""
    if not examples:
        raise TrajlakeError("hindsight: no labelled turns to fine-tune on")
    rng = random.Random(config.seed)
    pad = pad_id(lm.tokenizer)
    model = lm.model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    tail: list[float] = []
    for step in range(config.steps):
        batch = [examples[rng.randrange(len(examples))] for _ in range(config.batch_size)]
        rows = [[*p, *u.context, *u.target] for p, u in batch]
        inputs = _batch_inputs(rows, 0, pad, lm.device)
        labels = inputs["input_ids"].clone()
        labels[inputs["attention_mask"] == 0] = -100
        width = labels.shape[1]
        for j, (p, _) in enumerate(batch):
            labels[j, : width - len(rows[j]) + len(p)] = -100  # no loss on padding and prefix
        loss = model(**inputs, labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        if step >= config.steps - max(config.steps // 10, 1):
            tail.append(float(loss.detach()))
    model.eval()
    return sum(tail) / len(tail)
