"""The behaviour policy of the debugging environment: a tabular softmax over observations.

Tabular, so that exact values under the policy follow by dynamic programming
(`_dynamics.value_matrix`); its default logits make a plausible, imperfect agent that falls for
the environment's traps (an early submit after a misleading pass).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trajlake.synth_debug._dynamics import ACTIONS, OBSERVATIONS


def _default_logits(obs: str) -> tuple[float, ...]:
    """A plausible, imperfect agent: explores a lot, trusts a passing suite, reverts regressions."""
    primary, found, tests = obs.split("/")
    # search, read, edit, test, revert, submit
    s, r, e, t, v, u = 0.7, 1.0, -1.2, 0.1, -2.5, -3.0
    if primary == "found":
        s, e, t = -1.5, e + 1.9, t + 0.3
    e += 0.6 * int(found)
    if tests == "untested" and (primary == "found" or found != "0"):
        t += 0.7
    if tests == "fail":
        e += 0.6
    if tests == "regress":
        v, e, t = 1.4, e - 0.3, t - 0.4
    if tests == "pass":
        # The visible suite only covers the primary bug: a pass invites an early submit.
        u, r, e = 0.9, r - 0.2, e - 0.9
    if primary == "found" and tests != "regress":
        u += 0.5 * int(found)
    return (s, r, e, t, v, u)


@dataclass(frozen=True)
class DebugPolicy:
    """Action logits (order `ACTIONS`) per observation; sampled at a per-rollout temperature."""

    logits: Mapping[str, tuple[float, ...]]
    name: str = "debug-policy-v0"
    """Model name recorded as `policy_model`."""

    def __post_init__(self) -> None:
        missing = set(OBSERVATIONS) - set(self.logits)
        if missing or any(len(v) != len(ACTIONS) for v in self.logits.values()):
            raise ValueError(f"logits need {len(ACTIONS)} values for every observation")

    @classmethod
    def default(cls) -> DebugPolicy:
        """The behaviour policy the generator samples by default."""
        return cls({obs: _default_logits(obs) for obs in OBSERVATIONS})

    def probs(self, obs: str, temperature: float = 1.0) -> tuple[float, ...]:
        """Action probabilities in observation `obs` at a sampling temperature (> 0)."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        row = [x / temperature for x in self.logits[obs]]
        top = max(row)
        exps = [math.exp(x - top) for x in row]
        total = sum(exps)
        return tuple(x / total for x in exps)

    def table(self, temperature: float = 1.0) -> dict[str, tuple[float, ...]]:
        """Action probabilities of every observation at `temperature`."""
        return {obs: self.probs(obs, temperature) for obs in OBSERVATIONS}
