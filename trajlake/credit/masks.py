"""Per-turn training masks, weights and segments built from credits, advantages or flags.

Every rule returns a `TurnMasks`: for each turn a mask (train on it), a weight (the loss weight,
1.0/0.0 for binary rules) and a segment id (the maximal run of kept turns it belongs to, numbered
from 0, or None when the turn is dropped). Dropped turns stay in the history as context.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MaskRule = Literal["rise", "step-reject", "first-error", "advantage", "all"]
MASK_RULES: tuple[str, ...] = ("rise", "step-reject", "first-error", "advantage", "all")

_TOLERANCE = 1e-9
"""Credits are differences of floats: c_t = 0.35 − 0.30 must count as ≥ 0.05."""


@dataclass(frozen=True)
class TurnMasks:
    """Mask, weight and segment id per turn."""

    mask: list[bool]
    weight: list[float]
    segment_id: list[int | None]

    def __len__(self) -> int:
        return len(self.mask)


def segments_of(mask: Sequence[bool]) -> list[int | None]:
    """Segment ids of maximal runs of kept turns: [T, T, F, T] → [0, 0, None, 1]."""
    out: list[int | None] = []
    next_id = 0
    previous = False
    for keep in mask:
        if keep:
            if not previous:
                next_id += 1
            out.append(next_id - 1)
        else:
            out.append(None)
        previous = keep
    return out


def from_mask(mask: Sequence[bool]) -> TurnMasks:
    """A binary `TurnMasks` (weights 1.0/0.0) with segments from the kept runs."""
    kept = [bool(m) for m in mask]
    return TurnMasks(kept, [1.0 if m else 0.0 for m in kept], segments_of(kept))


def all_turns(n_turns: int) -> TurnMasks:
    """Train on every turn (one segment)."""
    return from_mask([True] * n_turns)


def rise(credits: Sequence[float], eps: float = 0.05, *, resolved: bool = False) -> TurnMasks:
    """Orchard rise segments: keep turn t iff c_t ≥ ε; resolved trajectories keep every turn.

    Segments are the maximal runs of consecutive kept turns (no merging of nearby runs).
    """
    if resolved:
        return all_turns(len(credits))
    return from_mask([c >= eps - _TOLERANCE for c in credits])


def step_reject(bad: Sequence[bool]) -> TurnMasks:
    """Step rejection (SRFT): drop the turns flagged bad, keep all others (and the context)."""
    return from_mask([not b for b in bad])


def first_error(errors: Sequence[bool]) -> TurnMasks:
    """Train only on the turns before the first error turn."""
    first = next((t for t, e in enumerate(errors) if e), len(errors))
    return from_mask([t < first for t in range(len(errors))])


def advantage_weights(
    advantages: Sequence[float], beta: float = 1.0, w_max: float = 5.0
) -> TurnMasks:
    """Advantage-weighted regression weights w_t = clip(exp(A_t / β), 0, w_max).

    Every turn is kept (the weight carries the signal); one segment spans the trajectory.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if w_max <= 0:
        raise ValueError(f"w_max must be > 0, got {w_max}")
    # exp overflows for A/β > ~709; the clip makes the exact value irrelevant there.
    weights = [min(math.exp(min(a / beta, 700.0)), w_max) for a in advantages]
    mask = [True] * len(weights)
    return TurnMasks(mask, weights, segments_of(mask))
