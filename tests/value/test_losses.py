"""Value losses and prefix targets, checked exactly on tiny hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trajlake.value.losses import (  # noqa: E402
    bce_loss,
    bradley_terry_loss,
    listwise_loss,
    mc_targets,
    td_lambda_targets,
    value_loss,
)

LN2 = math.log(2.0)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_bce_mean_and_weighted_mean() -> None:
    logits, labels = t(0.0, math.log(3.0)), t(1.0, 0.0)
    # -log σ(0) = ln 2; -log(1 - σ(ln 3)) = -log(1/4) = 2 ln 2.
    assert bce_loss(logits, labels).item() == pytest.approx(1.5 * LN2, abs=1e-12)
    weighted = bce_loss(logits, labels, weights=t(1.0, 3.0))
    assert weighted.item() == pytest.approx((LN2 + 3 * 2 * LN2) / 4, abs=1e-12)
    assert bce_loss(logits, labels, weights=t(2.0, 6.0)).item() == pytest.approx(weighted.item())


def test_bradley_terry_pairs_within_groups_only() -> None:
    logits = t(2.0, 0.0, 1.0, 5.0, -3.0)
    labels = t(1.0, 0.0, 0.0, 1.0, 0.0)
    groups = torch.tensor([0, 0, 0, 1, 2])  # task 1 and 2 have no pair; 3 vs 4 is cross-group
    loss, stats = bradley_terry_loss(logits, labels, groups)
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert (stats.n_pairs, stats.accuracy, stats.margin) == (2, 1.0, 1.5)


def test_bradley_terry_accuracy_margin_and_gradient() -> None:
    logits = t(0.0, 1.0).requires_grad_()
    loss, stats = bradley_terry_loss(logits, t(1.0, 0.0), torch.tensor([7, 7]))
    assert loss.item() == pytest.approx(math.log1p(math.e), abs=1e-12)  # -log σ(-1)
    assert (stats.n_pairs, stats.accuracy, stats.margin) == (1, 0.0, -1.0)
    loss.backward()
    sig = 1 / (1 + math.e)  # d/ds⁺ −log σ(s⁺ − s⁻) = −σ(s⁻ − s⁺) = −σ(1)
    assert logits.grad is not None
    assert logits.grad.tolist() == pytest.approx([-(1 - sig), 1 - sig], abs=1e-12)


def test_bradley_terry_without_pairs_is_zero_with_grad() -> None:
    logits = t(0.3, -0.2).requires_grad_()
    loss, stats = bradley_terry_loss(logits, t(1.0, 1.0), torch.tensor([0, 0]))
    assert loss.item() == 0.0 and loss.grad_fn is not None
    assert (stats.n_pairs, stats.accuracy, stats.margin) == (0, None, None)
    loss.backward()
    assert logits.grad is not None and logits.grad.tolist() == [0.0, 0.0]


def test_listwise_over_eligible_groups() -> None:
    # group 0: softmax([0, ln 2, 0]) = [1/4, 1/2, 1/4], p = [1/2, 0, 1/2] -> ln 4;
    # group 1 has one member, group 2 has no positive: both skipped.
    logits = t(0.0, LN2, 0.0, 9.0, 1.0, 2.0)
    labels = t(1.0, 0.0, 1.0, 1.0, 0.0, 0.0)
    groups = torch.tensor([0, 0, 0, 1, 2, 2])
    assert listwise_loss(logits, labels, groups).item() == pytest.approx(2 * LN2, abs=1e-12)
    # two eligible groups average: group 3 = -log softmax([0, 0])_0 = ln 2.
    logits2 = torch.cat([logits, t(0.0, 0.0)])
    labels2 = torch.cat([labels, t(1.0, 0.0)])
    groups2 = torch.cat([groups, torch.tensor([3, 3])])
    assert listwise_loss(logits2, labels2, groups2).item() == pytest.approx(1.5 * LN2, abs=1e-12)
    none = listwise_loss(t(1.0).requires_grad_(), t(1.0), torch.tensor([0]))
    assert none.item() == 0.0 and none.grad_fn is not None


def test_value_loss_combinations() -> None:
    logits, labels, groups = t(2.0, 0.0, 1.0), t(1.0, 0.0, 0.0), torch.tensor([0, 0, 0])
    bce = bce_loss(logits, labels).item()
    bt = bradley_terry_loss(logits, labels, groups)[0].item()
    lw = listwise_loss(logits, labels, groups).item()
    assert value_loss("bce", logits, labels, groups)[0].item() == pytest.approx(bce)
    assert value_loss("bt", logits, labels, groups, alpha=0.5)[0].item() == pytest.approx(bt)
    total, parts = value_loss("bce+bt", logits, labels, groups, alpha=0.5)
    assert total.item() == pytest.approx(bce + 0.5 * bt)
    assert parts["bce"] == pytest.approx(bce) and parts["bt"] == pytest.approx(bt)
    assert parts["bt_pairs"] == 2 and parts["bt_accuracy"] == 1.0 and parts["bt_margin"] == 1.5
    total, parts = value_loss("bce+listwise", logits, labels, groups, alpha=2.0)
    assert total.item() == pytest.approx(bce + 2.0 * lw) and set(parts) == {"bce", "listwise"}
    with pytest.raises(ValueError, match="loss kind"):
        value_loss("mse", logits, labels, groups)  # type: ignore[arg-type]


def test_mc_targets() -> None:
    assert mc_targets(3, 1.0).tolist() == [1.0, 1.0, 1.0]
    assert mc_targets(2, 0.0).tolist() == [0.0, 0.0]
    assert mc_targets(0, 1.0).shape == (0,)
    with pytest.raises(ValueError):
        mc_targets(-1, 1.0)


def test_td_lambda_targets_exact() -> None:
    values = [0.2, 0.4, 0.6]
    # λ = 0: one-step TD, G_t = V(s_{t+1}) with V(s_T) = R.
    assert td_lambda_targets(values, 1.0, 0.0).tolist() == pytest.approx([0.4, 0.6, 1.0])
    # λ = 1: Monte-Carlo.
    assert td_lambda_targets(values, 1.0, 1.0).tolist() == mc_targets(3, 1.0).tolist()
    assert td_lambda_targets(values, 0.0, 1.0).tolist() == mc_targets(3, 0.0).tolist()
    # λ = 1/2: G_2 = 1, G_1 = (0.6 + 1)/2 = 0.8, G_0 = (0.4 + 0.8)/2 = 0.6.
    assert td_lambda_targets(values, 1.0, 0.5).tolist() == pytest.approx([0.6, 0.8, 1.0])
    # γ = 0.9, λ = 1: γ^{T−t} R.
    assert td_lambda_targets(values, 1.0, 1.0, gamma=0.9).tolist() == pytest.approx(
        [0.729, 0.81, 0.9]
    )
    # γ = λ = 1/2: G_2 = 0.5, G_1 = 0.5 (0.3 + 0.25) = 0.275, G_0 = 0.5 (0.2 + 0.1375).
    assert td_lambda_targets(values, 1.0, 0.5, gamma=0.5).tolist() == pytest.approx(
        [0.16875, 0.275, 0.5]
    )
    assert td_lambda_targets([], 1.0, 0.5).shape == (0,)
    assert td_lambda_targets(np.array([0.9]), 0.0, 0.3).tolist() == [0.0]


@pytest.mark.parametrize(
    ("values", "lam", "gamma"),
    [([0.1], -0.1, 1.0), ([0.1], 1.5, 1.0), ([0.1], 0.5, 0.0), ([[0.1]], 0.5, 1.0)],
)
def test_td_lambda_rejects_bad_arguments(values: list[float], lam: float, gamma: float) -> None:
    with pytest.raises(ValueError):
        td_lambda_targets(values, 1.0, lam, gamma=gamma)
    with pytest.raises(ValueError, match="finite"):
        td_lambda_targets([float("nan")], 1.0, 0.5)
