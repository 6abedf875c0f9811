"""Value-model losses (pointwise BCE, pairwise Bradley–Terry, listwise) and prefix-value targets.

Formulations follow methods.md §8.2 (losses) and §6 (Monte-Carlo and TD(λ) targets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from trajlake.errors import missing_extra

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

__all__ = [
    "LOSS_KINDS",
    "LossKind",
    "PairStats",
    "bce_loss",
    "bradley_terry_loss",
    "listwise_loss",
    "mc_targets",
    "td_lambda_targets",
    "value_loss",
]

LossKind = Literal["bce", "bt", "listwise", "bce+bt", "bce+listwise"]
LOSS_KINDS: tuple[LossKind, ...] = ("bce", "bt", "listwise", "bce+bt", "bce+listwise")


@dataclass(frozen=True)
class PairStats:
    """Bradley–Terry batch statistics; accuracy and margin are None when there is no pair."""

    n_pairs: int
    accuracy: float | None  # share of pairs with s+ > s-
    margin: float | None  # mean of s+ - s-


def _zero(logits: torch.Tensor) -> torch.Tensor:
    # Keeps the graph, so backward() works on a batch that has nothing to rank.
    return logits.sum() * 0.0


def bce_loss(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean binary cross-entropy of `logits` against targets in [0, 1].

    With `weights`, the weighted mean Σ wᵢ lᵢ / Σ wᵢ, so rescaling all weights leaves the loss
    unchanged.
    """
    losses = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="none")
    if weights is None:
        return losses.mean()
    weights = weights.to(losses.dtype)
    return (losses * weights).sum() / weights.sum().clamp(min=torch.finfo(losses.dtype).tiny)


def bradley_terry_loss(
    logits: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor
) -> tuple[torch.Tensor, PairStats]:
    """Mean of −log σ(s⁺ − s⁻) over same-group pairs whose labels differ (y⁺ > y⁻).

    Groups (task ids as integers) without such a pair contribute nothing; a batch without any
    pair gives a zero loss that still has a gradient function.
    """
    same = groups.unsqueeze(0) == groups.unsqueeze(1)
    better = labels.unsqueeze(1) > labels.unsqueeze(0)  # [i, j]: i is the positive of the pair
    pairs = same & better
    n_pairs = int(pairs.sum())
    if n_pairs == 0:
        return _zero(logits), PairStats(0, None, None)
    margins = (logits.unsqueeze(1) - logits.unsqueeze(0))[pairs]
    loss = -F.logsigmoid(margins).mean()
    detached = margins.detach()
    accuracy = float((detached > 0).float().mean())
    return loss, PairStats(n_pairs, accuracy, float(detached.mean()))


def listwise_loss(logits: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """ListNet top-1 loss: mean over groups of −Σ pᵢ log softmax(s)ᵢ with pᵢ = yᵢ / Σ y.

    Only groups with at least one positive and at least two members count; without any such
    group the loss is a zero that still has a gradient function.
    """
    terms = []
    for g in torch.unique(groups):
        member = groups == g
        y = labels[member].to(logits.dtype)
        if int(member.sum()) < 2 or float(y.sum()) <= 0.0:
            continue
        p = y / y.sum()
        terms.append(-(p * F.log_softmax(logits[member], dim=0)).sum())
    if not terms:
        return _zero(logits)
    return torch.stack(terms).mean()


def value_loss(
    kind: LossKind,
    logits: torch.Tensor,
    labels: torch.Tensor,
    groups: torch.Tensor,
    alpha: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The training loss `kind` and its parts for logging.

    BT and listwise scores are uncalibrated (only differences within a task matter), so
    "bce+bt" and "bce+listwise" add the ranking term with weight `alpha` to BCE, which keeps the
    sigmoid of the score a probability.

    Returns:
        `(loss, parts)`: parts holds "bce", "bt", "listwise" (whichever were computed) and, for
        BT, "bt_pairs", "bt_accuracy", "bt_margin" (the last two only when pairs exist).
    """
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss kind must be one of {LOSS_KINDS}, got {kind!r}")
    parts: dict[str, float] = {}
    total = _zero(logits)
    if kind.startswith("bce"):
        bce = bce_loss(logits, labels)
        parts["bce"] = float(bce.detach())
        total = total + bce
    rank_weight = alpha if kind.startswith("bce+") else 1.0
    if kind.endswith("bt"):
        bt, stats = bradley_terry_loss(logits, labels, groups)
        parts |= {"bt": float(bt.detach()), "bt_pairs": float(stats.n_pairs)}
        if stats.accuracy is not None and stats.margin is not None:
            parts |= {"bt_accuracy": stats.accuracy, "bt_margin": stats.margin}
        total = total + rank_weight * bt
    elif kind.endswith("listwise"):
        lw = listwise_loss(logits, labels, groups)
        parts["listwise"] = float(lw.detach())
        total = total + rank_weight * lw
    return total, parts


# --------------------------------------------------------------------------- prefix targets


def mc_targets(n_turns: int, outcome: float) -> npt.NDArray[np.float64]:
    """Monte-Carlo targets for the prefixes t = 0..T−1: every prefix targets the outcome R."""
    if n_turns < 0:
        raise ValueError(f"n_turns must be >= 0, got {n_turns}")
    return np.full(n_turns, float(outcome), dtype=np.float64)


def td_lambda_targets(
    values: npt.ArrayLike, outcome: float, lam: float, gamma: float = 1.0
) -> npt.NDArray[np.float64]:
    """TD(λ) targets G_t^λ for the prefixes t = 0..T−1 of a trajectory with outcome R.

    With `values[t]` = V(s_t) from the current model, V(s_T) := R, no intermediate rewards and
    G_T^λ := R, the λ-return is computed backwards as

        G_t^λ = γ [(1 − λ) V(s_{t+1}) + λ G_{t+1}^λ],  so G_{T−1}^λ = γ R.

    λ = 1 gives the discounted Monte-Carlo return γ^{T−t} R (= R for γ = 1, see `mc_targets`);
    λ = 0 gives one-step TD, G_t = γ V(s_{t+1}). `values[0]` only enters through the others.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must lie in [0, 1], got {lam}")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    n = len(v)
    targets = np.zeros(n, dtype=np.float64)
    next_value, next_return = float(outcome), float(outcome)
    for t in range(n - 1, -1, -1):
        targets[t] = gamma * ((1.0 - lam) * next_value + lam * next_return)
        next_value, next_return = v[t], targets[t]
    return targets
