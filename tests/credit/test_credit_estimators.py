"""Exact credit math on a hand-computable trajectory: V = (0.2, 0.5, 0.4, 1.0), T = 3."""

from __future__ import annotations

import pytest

from trajlake.credit.estimators import (
    gae,
    mc_returns,
    n_step_advantages,
    n_step_returns,
    td_credits,
    td_errors,
)

V = [0.2, 0.5, 0.4, 1.0]


def approx(values: list[float]) -> object:
    return pytest.approx(values, abs=1e-12)


def test_td_credit() -> None:
    assert td_credits(V) == approx([0.3, -0.1, 0.6])
    assert td_errors(V, gamma=0.5) == approx([0.05, -0.3, 0.1])


def test_gae_lambda_zero_is_td_credit() -> None:
    assert gae(V, gamma=1.0, lam=0.0) == approx(td_credits(V))


def test_gae_lambda_one_is_monte_carlo() -> None:
    assert gae(V, gamma=1.0, lam=1.0) == approx([0.8, 0.5, 0.6])  # R − V(s_t)


def test_gae_half_lambda() -> None:
    # A_2 = 0.6; A_1 = −0.1 + 0.5·0.6 = 0.2; A_0 = 0.3 + 0.5·0.2 = 0.4
    assert gae(V, gamma=1.0, lam=0.5) == approx([0.4, 0.2, 0.6])


def test_gae_discounted_monte_carlo() -> None:
    # λ = 1: A_t = γ^{T−t} R − V(s_t) = (0.125 − 0.2, 0.25 − 0.5, 0.5 − 0.4)
    assert gae(V, gamma=0.5, lam=1.0) == approx([-0.075, -0.25, 0.1])
    assert mc_returns(V, gamma=0.5) == approx([0.125, 0.25, 0.5])


def test_n_step() -> None:
    assert n_step_returns(V, 2) == approx([0.4, 1.0, 1.0])
    assert n_step_advantages(V, 2) == approx([0.2, 0.5, 0.6])
    assert n_step_advantages(V, 1) == approx(td_credits(V))
    assert n_step_advantages(V, 10) == approx(gae(V, 1.0, 1.0))
    assert n_step_returns(V, 1, gamma=0.5) == approx([0.25, 0.2, 0.5])


def test_empty_trajectory_and_bad_arguments() -> None:
    assert td_credits([1.0]) == []
    assert gae([0.0], 1.0, 0.5) == []
    with pytest.raises(ValueError):
        gae(V, gamma=1.5)
    with pytest.raises(ValueError):
        n_step_returns(V, 0)
    with pytest.raises(ValueError):
        td_credits([])
