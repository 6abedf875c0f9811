"""Credit and advantage estimators over per-turn values V(s_0) … V(s_T): TD, GAE, n-step, MC.

Convention: a trajectory with T turns has T + 1 values and the outcome lives in the last one,
V(s_T) := R; intermediate rewards are r_t = 0 (episodic agent tasks), so the terminal reward is
never added twice. Hence δ_t = γ V(s_{t+1}) − V(s_t) and, with γ = 1:

- λ = 0 → A_t = δ_t = c_t = V(s_{t+1}) − V(s_t), Orchard's TD credit;
- λ = 1 → A_t = R − V(s_t), the Monte-Carlo advantage.

Pure functions on float sequences; exact up to float rounding (no smoothing, no clipping).
"""

from __future__ import annotations

from collections.abc import Sequence


def _check(values: Sequence[float]) -> None:
    if len(values) < 1:
        raise ValueError("values need at least V(s_0) = the outcome (T + 1 >= 1 values)")


def td_credits(values: Sequence[float]) -> list[float]:
    """c_t = V(s_{t+1}) − V(s_t) for t = 0 … T−1 (Orchard Eq. 2)."""
    _check(values)
    return [float(values[t + 1]) - float(values[t]) for t in range(len(values) - 1)]


def td_errors(values: Sequence[float], gamma: float = 1.0) -> list[float]:
    """δ_t = γ V(s_{t+1}) − V(s_t) (r_t = 0; the outcome is V(s_T))."""
    _check(values)
    return [gamma * float(values[t + 1]) - float(values[t]) for t in range(len(values) - 1)]


def gae(values: Sequence[float], gamma: float = 1.0, lam: float = 0.0) -> list[float]:
    """GAE(γ, λ) advantages A_t = Σ_k (γλ)^k δ_{t+k}, computed as A_t = δ_t + γλ A_{t+1}.

    Args:
        values: V(s_0) … V(s_T), the last one the outcome.
        gamma: Discount γ in [0, 1].
        lam: λ in [0, 1]; 0 gives TD credit (with γ = 1), 1 the Monte-Carlo advantage.
    """
    if not 0.0 <= gamma <= 1.0 or not 0.0 <= lam <= 1.0:
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    deltas = td_errors(values, gamma)
    out = [0.0] * len(deltas)
    running = 0.0
    for t in range(len(deltas) - 1, -1, -1):
        running = deltas[t] + gamma * lam * running
        out[t] = running
    return out


def mc_returns(values: Sequence[float], gamma: float = 1.0) -> list[float]:
    """Monte-Carlo returns G_t = γ^{T−t} R for t = 0 … T−1 (r_t = 0, R = V(s_T))."""
    _check(values)
    horizon = len(values) - 1
    return [gamma ** (horizon - t) * float(values[-1]) for t in range(horizon)]


def n_step_returns(values: Sequence[float], n: int, gamma: float = 1.0) -> list[float]:
    """n-step returns G_t^(n) = γ^m V(s_{t+m}), m = min(n, T − t) (bootstrapped, r_t = 0)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    _check(values)
    horizon = len(values) - 1
    out = []
    for t in range(horizon):
        m = min(n, horizon - t)
        out.append(gamma**m * float(values[t + m]))
    return out


def n_step_advantages(values: Sequence[float], n: int, gamma: float = 1.0) -> list[float]:
    """A_t = G_t^(n) − V(s_t): n = 1 is TD(0), n >= T the Monte-Carlo advantage."""
    returns = n_step_returns(values, n, gamma)
    return [g - float(values[t]) for t, g in enumerate(returns)]
