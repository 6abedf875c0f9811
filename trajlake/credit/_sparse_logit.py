"""A hashed sparse logistic regression over trajectory prefixes, fitted with L-BFGS in numpy.

Row t of a trajectory is the state s_t (t turns done). Its features are: a bias; a few scalars;
block A, the hashed n-grams seen in any of turns 0 … t−1 (presence); block B, those of turn
t−1 only (recency). Block A is stored once per first occurrence, so a score is a running sum
along the trajectory and its gradient a reverse running sum: one pass over the stored entries
per evaluation, however long the prefixes are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

N_SCALARS = 4
"""Budget fraction, log(1 + turn index), share of failed turns so far, last turn failed: the
scalars every design has; `with_columns` appends more (the weights follow the matrix width)."""


@dataclass
class PrefixDesign:
    """The feature rows of a set of trajectories (row_start[i] … row_start[i+1]−1: s_0 … s_T)."""

    a_size: int
    """Buckets of block A (weights 1 + n_scalars …); block B follows with `b_size`."""
    b_size: int
    row_start: Ints
    scalars: Floats
    """Shape (rows, n_scalars): N_SCALARS or more columns."""
    a_index: Ints
    a_sign: Floats
    a_row: Ints
    """First row (state) where the block-A feature is present; it stays on until s_T."""
    b_index: Ints
    b_sign: Floats
    b_row: Ints

    @property
    def n_rows(self) -> int:
        """Number of rows (states)."""
        return int(self.row_start[-1])

    @property
    def n_scalars(self) -> int:
        """Columns of `scalars`."""
        return int(self.scalars.shape[1])

    @property
    def n_weights(self) -> int:
        """Bias + scalars + the two blocks of buckets."""
        return 1 + self.n_scalars + self.a_size + self.b_size

    def traj_of_row(self) -> Ints:
        """Index of the trajectory of each row."""
        return np.repeat(np.arange(len(self.row_start) - 1), np.diff(self.row_start))

    def subset(self, trajectories: Sequence[int] | Ints) -> PrefixDesign:
        """The rows of the given trajectories (in that order)."""
        picked = np.asarray(trajectories, dtype=np.int64)
        lengths = np.diff(self.row_start)[picked]
        new_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        remap = np.full(self.n_rows, -1, dtype=np.int64)
        for new, old in enumerate(picked):  # one slice per trajectory: cheap next to the entries
            lo = self.row_start[old]
            remap[lo : lo + lengths[new]] = np.arange(new_start[new], new_start[new + 1])
        keep = remap >= 0

        def entries(index: Ints, sign: Floats, row: Ints) -> tuple[Ints, Floats, Ints]:
            mask = keep[row]
            return index[mask], sign[mask], remap[row[mask]]

        a = entries(self.a_index, self.a_sign, self.a_row)
        b = entries(self.b_index, self.b_sign, self.b_row)
        scalars = np.empty((int(new_start[-1]), self.n_scalars))
        scalars[remap[keep]] = self.scalars[keep]
        return PrefixDesign(self.a_size, self.b_size, new_start, scalars, *a, *b)

    def with_columns(self, columns: Floats) -> PrefixDesign:
        """The same rows with `columns` (shape (rows, k)) appended to the scalars."""
        if columns.ndim != 2 or columns.shape[0] != self.n_rows:
            raise ValueError(f"columns must have shape ({self.n_rows}, k), got {columns.shape}")
        return PrefixDesign(
            self.a_size, self.b_size, self.row_start, np.hstack([self.scalars, columns]),
            self.a_index, self.a_sign, self.a_row, self.b_index, self.b_sign, self.b_row,
        )  # fmt: skip

    def active_weights(self) -> Ints:
        """Indices (into the weight vector) of the bias, the scalars and the used buckets."""
        head = 1 + self.n_scalars
        return np.concatenate(
            [
                np.arange(head),
                head + np.unique(self.a_index),
                head + self.a_size + np.unique(self.b_index),
            ]
        ).astype(np.int64)

    def compact(self, active: Ints) -> PrefixDesign:
        """The same rows over the `active` weights only (from `active_weights`)."""
        head = 1 + self.n_scalars
        a_used = active[(active >= head) & (active < head + self.a_size)] - head
        b_used = active[active >= head + self.a_size] - head - self.a_size
        return PrefixDesign(
            len(a_used),
            len(b_used),
            self.row_start,
            self.scalars,
            np.searchsorted(a_used, self.a_index),
            self.a_sign,
            self.a_row,
            np.searchsorted(b_used, self.b_index),
            self.b_sign,
            self.b_row,
        )

    def scores(self, w: Floats) -> Floats:
        """The logit of every row under weights `w`."""
        d, head = self.a_size, 1 + self.n_scalars
        wa, wb = w[head : head + d], w[head + d :]
        n = self.n_rows
        step = np.bincount(self.a_row, weights=wa[self.a_index] * self.a_sign, minlength=n)
        running = np.cumsum(step)
        # No entry sits on a trajectory's first row (s_0 has seen no turn), so subtracting the
        # running sum there restarts it at each trajectory.
        running -= np.repeat(running[self.row_start[:-1]], np.diff(self.row_start))
        last = np.bincount(self.b_row, weights=wb[self.b_index] * self.b_sign, minlength=n)
        out: Floats = w[0] + self.scalars @ w[1:head] + running + last
        return out

    def gradient(self, residual: Floats) -> Floats:
        """X^T residual for per-row residuals (the gradient of the loss in the logits)."""
        d, head = self.a_size, 1 + self.n_scalars
        # Reverse running sum within each trajectory: a block-A feature first present at row r
        # is present in rows r … end, so its gradient collects their residuals.
        total = np.concatenate([np.cumsum(residual[::-1])[::-1], [0.0]])
        ends = np.repeat(self.row_start[1:], np.diff(self.row_start))
        tail = total[:-1] - total[ends]
        out = np.empty(self.n_weights)
        out[0] = residual.sum()
        out[1:head] = self.scalars.T @ residual
        out[head : head + d] = np.bincount(
            self.a_index, weights=self.a_sign * tail[self.a_row], minlength=d
        )
        out[head + d :] = np.bincount(
            self.b_index, weights=self.b_sign * residual[self.b_row], minlength=self.b_size
        )
        return out


def sigmoid(z: Floats) -> Floats:
    """The logistic function (through tanh: no overflow)."""
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)), dtype=np.float64)


def fit_prefix_logit(
    design: PrefixDesign,
    target: Floats,
    *,
    l2: float,
    iterations: int,
    start: Floats | None = None,
) -> Floats:
    """Weights minimising Σ BCE(sigmoid(z_r), target_r) + l2/2 |w|² (bias unpenalised).

    Targets may be soft (in [0, 1]), as TD(λ) targets are. L-BFGS (memory 10) with a
    backtracking Armijo line search; stops after `iterations` or when the gradient vanishes.
    """
    # Fit on the buckets that occur (a few percent of the table): the others only feel the
    # penalty, so their optimum is exactly 0.
    full, active = design, design.active_weights()
    design = design.compact(active)
    penalty = np.full(design.n_weights, l2)
    penalty[0] = 0.0

    def objective(w: Floats) -> tuple[float, Floats]:
        z = design.scores(w)
        loss = float(np.sum(np.logaddexp(0.0, z) - target * z) + 0.5 * np.sum(penalty * w * w))
        return loss, design.gradient(sigmoid(z) - target) + penalty * w

    w = np.zeros(design.n_weights) if start is None else start[active]
    out = np.zeros(full.n_weights)
    out[active] = _lbfgs(objective, w, iterations)
    return out


def _lbfgs(
    objective: Callable[[Floats], tuple[float, Floats]],
    w: Floats,
    iterations: int,
    memory: int = 10,
) -> Floats:
    loss, grad = objective(w)
    history: list[tuple[Floats, Floats, float]] = []
    for _ in range(iterations):
        if float(np.abs(grad).max()) < 1e-6:
            break
        direction = _two_loop(grad, history)
        slope = float(direction @ grad)
        if slope >= 0:  # not a descent direction: restart from steepest descent
            history.clear()
            direction, slope = -grad, -float(grad @ grad)
        step = 1.0 if history else 1.0 / max(float(np.abs(grad).sum()), 1.0)
        while True:
            candidate = w + step * direction
            new_loss, new_grad = objective(candidate)
            if new_loss <= loss + 1e-4 * step * slope or step < 1e-10:
                break
            step *= 0.5
        s, y = candidate - w, new_grad - grad
        sy = float(s @ y)
        if sy > 1e-10:
            history.append((s, y, 1.0 / sy))
            del history[:-memory]
        improvement = loss - new_loss
        w, loss, grad = candidate, new_loss, new_grad
        if improvement <= 1e-9 * max(abs(loss), 1.0):
            break
    return w


def _two_loop(grad: Floats, history: list[tuple[Floats, Floats, float]]) -> Floats:
    q = grad.copy()
    alphas = []
    for s, y, rho in reversed(history):
        a = rho * float(s @ q)
        alphas.append(a)
        q -= a * y
    if history:
        s, y, _ = history[-1]
        q *= float(s @ y) / float(y @ y)
    for (s, y, rho), a in zip(history, reversed(alphas), strict=True):
        b = rho * float(y @ q)
        q += (a - b) * s
    return -q
