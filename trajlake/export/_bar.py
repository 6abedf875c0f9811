"""Orchard's Balanced Adaptive Rollout (BAR) group selection and group-relative advantages.

Pure functions over small candidate lists (no lake access), so every rule is checked on
hand-made reward sets. `try_assemble` is Algorithm 1's TryAssemble; `select_group` applies it
offline (the rollouts already exist) with the band, then the relaxed band if asked, and says
why a task yields no group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

DropReason = Literal["too_few_rollouts", "all_success", "all_failure", "out_of_band"]
DROP_REASONS: tuple[DropReason, ...] = (
    "too_few_rollouts",
    "all_success",
    "all_failure",
    "out_of_band",
)
ABORTED_STATUSES = frozenset({"error", "timeout"})
"""Statuses of rollouts that did not end on their own: the backfill pile."""
_STATUS_RANK = {"completed": 0, None: 1, "truncated": 2}
"""Sort rank: completed > unknown > truncated > aborted (lower is preferred)."""
_ABORTED_RANK = 3


@dataclass(frozen=True)
class Candidate:
    """One rollout of a task, as BAR sees it.

    `order` is its place in the deterministic consideration order of its task; `length` its
    response length (shorter is preferred among equals).
    """

    trajectory_id: str
    reward: float
    status: str | None
    length: float
    order: int

    @property
    def success(self) -> bool:
        """R > 0 (Orchard's positive class)."""
        return self.reward > 0

    @property
    def aborted(self) -> bool:
        """Ended by an error or a time limit (Orchard's aborted / time-exceeded)."""
        return self.status in ABORTED_STATUSES

    def sort_key(self) -> tuple[int, float, int]:
        """(status rank, response length, consideration order), ascending."""
        rank = _ABORTED_RANK if self.aborted else _STATUS_RANK.get(self.status, 1)
        return rank, self.length, self.order


@dataclass(frozen=True)
class BarOptions:
    """How groups are assembled (defaults: Orchard's N = 8 of up to 16, 3–5 successes)."""

    size: int = 8
    """N: rollouts per group."""
    max_rollouts: int = 16
    """N_max: rollouts of a task considered (the first ones in consideration order)."""
    rho_min: float = 0.375
    """Lowest share of successes in a group."""
    rho_max: float = 0.625
    """Highest share of successes in a group."""
    rho_target: float | None = None
    """Preferred share of successes (None: the middle of the band)."""
    relaxed: bool = False
    """When no group fits the band, try the band [0, 1] (TryAssemble(T, N, 0, 1, ρ*))."""
    backfill_aborted: bool = True
    """Aborted rollouts join their class, ranked last (else they are left out)."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"group size must be >= 1, got {self.size}")
        if self.max_rollouts < self.size:
            raise ValueError(
                f"max_rollouts ({self.max_rollouts}) must be >= the group size ({self.size})"
            )
        if not 0.0 <= self.rho_min <= self.rho_max <= 1.0:
            raise ValueError(
                f"need 0 <= rho_min <= rho_max <= 1, got [{self.rho_min}, {self.rho_max}]"
            )
        if self.rho_target is not None and not 0.0 <= self.rho_target <= 1.0:
            raise ValueError(f"rho_target must be in [0, 1], got {self.rho_target}")

    @property
    def target(self) -> float:
        """ρ*: the given target, else the middle of the band."""
        return self.rho_target if self.rho_target is not None else (self.rho_min + self.rho_max) / 2


@dataclass(frozen=True)
class GroupChoice:
    """What BAR made of one task: the group (in consideration order) or why there is none."""

    members: tuple[Candidate, ...] = ()
    dropped: DropReason | None = None
    relaxed: bool = False
    """The group fits only the relaxed band."""


def _round_half_up(x: float) -> int:
    # Python's round() rounds halves to even (round(2.5) == 2); the paper's n* = round(ρ*N)
    # means the usual rounding, and a float tolerance keeps 0.5·7 = 3.5 from becoming 3.
    return math.floor(x + 0.5 + 1e-9)


def success_bounds(n: int, rho_min: float, rho_max: float, rho_target: float) -> list[int]:
    """Success counts n+ in [ceil(ρmin·N), floor(ρmax·N)], nearest to round(ρ*·N) first."""
    # The tolerance keeps ρ·N that is an integer in exact arithmetic (0.375·8 = 3) from being
    # pushed one up or down by a float error.
    low = math.ceil(rho_min * n - 1e-9)
    high = math.floor(rho_max * n + 1e-9)
    best = _round_half_up(rho_target * n)
    return sorted(range(low, high + 1), key=lambda k: (abs(k - best), k))


def try_assemble(
    candidates: Sequence[Candidate],
    n: int,
    rho_min: float,
    rho_max: float,
    rho_target: float,
) -> list[Candidate] | None:
    """TryAssemble: N rollouts with a success count in the band, preferred ones first.

    Each class (R > 0, R <= 0) is sorted by (status, response length); the group takes the
    first n+ successes and the first N − n+ failures for the n+ nearest the target that both
    classes can fill. None when no count in the band can be filled.
    """
    positives = sorted((c for c in candidates if c.success), key=Candidate.sort_key)
    negatives = sorted((c for c in candidates if not c.success), key=Candidate.sort_key)
    if len(positives) + len(negatives) < n:
        return None
    for n_pos in success_bounds(n, rho_min, rho_max, rho_target):
        if n_pos <= len(positives) and n - n_pos <= len(negatives):
            return positives[:n_pos] + negatives[: n - n_pos]
    return None


def _reason(usable: Sequence[Candidate], n: int) -> DropReason:
    if len(usable) < n:
        return "too_few_rollouts"
    if all(c.success for c in usable):
        return "all_success"
    if not any(c.success for c in usable):
        return "all_failure"
    return "out_of_band"


def select_group(candidates: Sequence[Candidate], options: BarOptions) -> GroupChoice:
    """BAR offline for one task: its first `max_rollouts` candidates, the band, then (if
    `options.relaxed`) the band [0, 1]; members are returned in consideration order."""
    considered = sorted(candidates, key=lambda c: c.order)[: options.max_rollouts]
    usable = [c for c in considered if options.backfill_aborted or not c.aborted]
    n = options.size
    group = try_assemble(usable, n, options.rho_min, options.rho_max, options.target)
    relaxed = False
    if group is None and options.relaxed:
        group = try_assemble(usable, n, 0.0, 1.0, options.target)
        relaxed = group is not None
    if group is None:
        return GroupChoice(dropped=_reason(usable, n))
    return GroupChoice(members=tuple(sorted(group, key=lambda c: c.order)), relaxed=relaxed)


def grpo_advantages(rewards: Sequence[float], eps: float = 1e-4, ddof: int = 0) -> list[float]:
    """A_i = (r_i − mean r) / (std r + eps); 0 for every rollout when all rewards are equal.

    `ddof` 0 is the population std (as `trajlake credit`'s `group` source); TRL's GRPOTrainer
    uses the sample std (ddof 1) with eps 1e-4.
    """
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    dof = n - ddof
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / dof) if dof > 0 else 0.0
    if std == 0.0:
        return [0.0] * n
    return [(r - mean) / (std + eps) for r in rewards]


def rloo_advantages(rewards: Sequence[float]) -> list[float]:
    """A_i = r_i − mean_{j≠i} r_j (0 for a group of one)."""
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    total = sum(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]
