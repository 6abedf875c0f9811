"""`value-model:` — a tiny CPU prefix value model: logistic regression on prefix features.

P(success | h_t) from hand-made features of the first t turns, fitted with Newton's method
(L2-regularised, numpy only) on every turn boundary of trajectories with outcomes (the MC
target: BCE to the final outcome). Saved as JSON, never pickle.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from trajlake.credit._types import TrajectoryTurns, Turn
from trajlake.errors import TrajlakeError

FORMAT = "trajlake.prefix-logreg/1"
_EDIT = re.compile(r"edit|str_replace|write|create|insert|apply_patch", re.IGNORECASE)
_TEST = re.compile(r"pytest|unittest|\btox\b|npm test|go test|cargo test|run_tests", re.IGNORECASE)
_BASE_FEATURES = ("turn", "budget_fraction", "errors", "edits", "ran_tests")

Array = npt.NDArray[np.float64]


def _is_edit(turn: Turn) -> bool:
    return any(_EDIT.search(n) for n in turn.tool_names) or any(
        '"command": "' + c in turn.action_text for c in ("str_replace", "create", "insert")
    )


class PrefixModelValues:
    """Logistic regression on prefix features (turn index, fraction of the turn budget, errors
    so far, edits so far, tests run yet, counts of the most frequent tools).

    `values()` gives P(success | first t turns) for t < T and the outcome for V(s_T) (the model's
    own estimate when the outcome is unknown). An unfitted model fits itself on the labelled
    trajectories it is asked to value (in-sample; fit on a training split for honest values).
    """

    name = "value-model"

    def __init__(self, l2: float = 1.0, max_tools: int = 8, budget: int | None = None) -> None:
        self.l2 = float(l2)
        self.max_tools = int(max_tools)
        self.budget = budget
        self.tools: list[str] = []
        self.mean: Array | None = None
        self.scale: Array | None = None
        self.coef: Array | None = None

    @property
    def feature_names(self) -> list[str]:
        """Names of the model's features, in order."""
        return [*_BASE_FEATURES, *(f"tool:{t}" for t in self.tools)]

    def prefix_features(self, trajectory: TrajectoryTurns) -> Array:
        """Raw features of the prefixes h_0 … h_T of one trajectory, shape (T + 1, F)."""
        budget = float(self.budget or max(len(trajectory.turns), 1))
        rows = []
        errors = edits = 0
        tests = False
        counts: Counter[str] = Counter()
        for t in range(len(trajectory.turns) + 1):
            row = [float(t), t / budget, float(errors), float(edits), float(tests)]
            rows.append(row + [float(counts[name]) for name in self.tools])
            if t < len(trajectory.turns):
                turn = trajectory.turns[t]
                errors += turn.is_error
                edits += _is_edit(turn)
                tests = tests or bool(_TEST.search(turn.action_text))
                counts.update(turn.tool_names)
        return np.asarray(rows, dtype=np.float64)

    def fit(
        self, trajectories: Sequence[TrajectoryTurns], iterations: int = 50
    ) -> PrefixModelValues:
        """Fit on every turn boundary of the trajectories with an outcome (target: outcome)."""
        labelled = [t for t in trajectories if t.outcome is not None]
        if not labelled:
            raise TrajlakeError("the value model needs trajectories with outcomes to fit on")
        if self.budget is None:
            self.budget = max(max(len(t.turns) for t in labelled), 1)
        tool_counts = Counter(n for t in labelled for turn in t.turns for n in turn.tool_names)
        self.tools = sorted(n for n, _ in tool_counts.most_common(self.max_tools))
        x = np.concatenate([self.prefix_features(t) for t in labelled])
        y = np.concatenate([np.full(len(t.turns) + 1, float(t.outcome)) for t in labelled])  # type: ignore[arg-type]
        self.mean, self.scale, self.coef = fit_logistic(x, y, self.l2, iterations)
        return self

    def _design(self, x: Array) -> Array:
        assert self.mean is not None and self.scale is not None
        return np.hstack([np.ones((x.shape[0], 1)), (x - self.mean) / self.scale])

    def predict(self, trajectory: TrajectoryTurns) -> list[float]:
        """P(success | h_t) for t = 0 … T."""
        if self.coef is None:
            raise TrajlakeError("the value model is not fitted: call fit() or load() first")
        return [
            float(p) for p in sigmoid(self._design(self.prefix_features(trajectory)) @ self.coef)
        ]

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """V(s_t) = P(success | h_t) for t < T; V(s_T) = the outcome when known."""
        if self.coef is None:
            self.fit(trajectories)
        out = {}
        for t in trajectories:
            curve = self.predict(t)
            if t.outcome is not None:
                curve[-1] = float(t.outcome)
            out[t.trajectory_id] = curve
        return out

    def to_dict(self) -> dict[str, Any]:
        """The fitted model as a JSON-able dict."""
        weights = weights_dict(self.mean, self.scale, self.coef, "value model")
        return {
            "format": FORMAT,
            "l2": self.l2,
            "max_tools": self.max_tools,
            "budget": self.budget,
            "tools": self.tools,
            "features": self.feature_names,
            **weights,
        }

    def save(self, path: str | Path) -> None:
        """Write the fitted model as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> PrefixModelValues:
        """Read a model written by `save`."""
        data = read_model_json(path, FORMAT, "prefix value model")
        model = cls(l2=data["l2"], max_tools=data["max_tools"], budget=data["budget"])
        model.tools = list(data["tools"])
        model.mean, model.scale, model.coef = weights_of(data)
        return model


def read_model_json(path: str | Path, fmt: str, what: str) -> dict[str, Any]:
    """A saved model's JSON, checked to be of format `fmt` (TrajlakeError naming `what`)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TrajlakeError(f"cannot read {what} {path}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise TrajlakeError(f"{path} is not a trajlake {what} ({fmt})")
    return data


def weights_dict(
    mean: Array | None, scale: Array | None, coef: Array | None, what: str
) -> dict[str, list[float]]:
    """The JSON form of a fitted logistic model's weights (the inverse of `weights_of`)."""
    if coef is None or mean is None or scale is None:
        raise TrajlakeError(f"the {what} is not fitted: nothing to save")
    return {"mean": mean.tolist(), "scale": scale.tolist(), "coef": coef.tolist()}


def weights_of(data: dict[str, Any]) -> tuple[Array, Array, Array]:
    """(mean, scale, coef) of a saved logistic model."""
    return tuple(np.asarray(data[k], dtype=np.float64) for k in ("mean", "scale", "coef"))  # type: ignore[return-value]


def fit_logistic(
    x: Array, y: Array | Sequence[float], l2: float = 1.0, iterations: int = 50
) -> tuple[Array, Array, Array]:
    """(mean, scale, coef) of an L2 logistic regression on standardised x (intercept first,
    unpenalised), fitted by Newton steps."""
    target = np.asarray(y, dtype=np.float64)
    mean = x.mean(axis=0)
    scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    design = np.hstack([np.ones((x.shape[0], 1)), (x - mean) / scale])
    coef = np.zeros(design.shape[1])
    penalty = np.full(design.shape[1], l2)
    penalty[0] = 0.0  # no penalty on the intercept
    for _ in range(iterations):
        p = sigmoid(design @ coef)
        grad = design.T @ (p - target) + penalty * coef
        hessian = (design.T * (p * (1 - p))) @ design + np.diag(penalty) + 1e-9 * np.eye(len(coef))
        step = np.linalg.solve(hessian, grad)
        coef -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return mean, scale, coef


def sigmoid(z: Array) -> Array:
    """The logistic function, computed through tanh (no overflow for large |z|)."""
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)), dtype=np.float64)
