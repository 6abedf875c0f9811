"""Evaluation of a stored credit run against ground truth (e.g. `trajlake.synth`'s exact V*, c*).

`evaluate_credit(lake, run_name, truth)` joins the run's rows with the true per-turn values and
credits by (trajectory id, turn) and reports rank agreement and productive-turn detection.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from trajlake.errors import TrajlakeError

if TYPE_CHECKING:
    from trajlake.lake._lake import Lake, SnapshotRef

Truth = Mapping[str, Mapping[str, Any]]
"""Truth records by trajectory id; each has `values` V*(s_0) … V*(s_T) and `credits` c*_t."""


@dataclass(frozen=True)
class CreditEval:
    """How a credit run agrees with the true values and credits.

    Rank correlations are Spearman's ρ (average ranks for ties); None where undefined (fewer
    than 2 pairs, or one side constant — e.g. the credit of the `outcome` baseline, all 0).
    Precision is 0.0 when nothing is predicted productive (scikit-learn's zero_division=0).
    """

    run_name: str
    signal: str
    """The column compared with c*: `credit` (TD credit) or `advantage` (e.g. GAE λ = 1)."""
    eps: float
    trajectories: int
    """Trajectories of the run that have truth with the same number of turns (evaluated)."""
    turns: int
    """Turns evaluated."""
    without_truth: int
    """Trajectories of the run without a truth record (left out)."""
    length_mismatch: int
    """Trajectories whose stored turn count differs from the truth's (left out)."""
    pooled_spearman: float | None
    """ρ(signal, c*) over every evaluated turn."""
    interior_spearman: float | None
    """ρ(signal, c*) over every turn but each trajectory's last (whose V(s_T) is the known
    outcome for every source), i.e. the part that needs real intermediate values."""
    within_spearman: float | None
    """Mean over trajectories of ρ(signal, c*) within the trajectory."""
    within_trajectories: int
    """Trajectories in `within_spearman`: ≥ 3 turns, signal and c* both non-constant."""
    within_eligible: int
    """Trajectories with ≥ 3 turns and non-constant c* (the run may be constant on some)."""
    value_spearman: float | None
    """ρ(value_before, V*(s_t)) over every evaluated turn."""
    true_productive: int
    """Turns with c* ≥ eps."""
    predicted_productive: int
    """Turns with signal ≥ eps."""
    true_positives: int
    precision: float
    recall: float
    f1: float

    def to_dict(self) -> dict[str, Any]:
        """The evaluation as a JSON-able dict."""
        return asdict(self)

    def summary(self) -> str:
        """One line for people."""
        return (
            f"{self.run_name} ({self.signal}): {self.trajectories} trajectories, "
            f"{self.turns} turns; "
            f"spearman pooled={_fmt(self.pooled_spearman)} "
            f"interior={_fmt(self.interior_spearman)} "
            f"within={_fmt(self.within_spearman)} ({self.within_trajectories}/"
            f"{self.within_eligible}) value={_fmt(self.value_spearman)}; "
            f"productive (eps={self.eps}) P={self.precision:.3f} R={self.recall:.3f} "
            f"F1={self.f1:.3f}"
        )


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def rankdata(x: Sequence[float] | npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Ranks 1 … n of `x`, tied values sharing their average rank (scipy's 'average')."""
    a = np.asarray(x, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    # Boundaries of runs of equal values in sorted order; each run gets its mean position.
    starts = np.flatnonzero(np.r_[True, sorted_a[1:] != sorted_a[:-1]])
    ends = np.r_[starts[1:], len(a)]
    avg = (starts + ends + 1) / 2.0  # mean of 1-based positions start+1 … end
    ranks = np.empty(len(a), dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson correlation of average ranks; None if undefined.

    Undefined when there are fewer than 2 pairs or either side is constant.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    if len(x) < 2:
        return None
    rx, ry = rankdata(x), rankdata(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = math.sqrt(float(rx @ rx) * float(ry @ ry))
    if denom == 0.0:
        return None
    return max(-1.0, min(1.0, float(rx @ ry) / denom))


@dataclass(frozen=True)
class Detection:
    """Productive-turn detection counts and scores (precision 0.0 when nothing is predicted)."""

    true_productive: int
    predicted_productive: int
    true_positives: int
    precision: float
    recall: float
    f1: float


def detection(predicted: Sequence[float], true: Sequence[float], eps: float) -> Detection:
    """Precision / recall / F1 of `predicted ≥ eps` as a detector of `true ≥ eps`."""
    if len(predicted) != len(true):
        raise ValueError(f"predicted and true differ in length ({len(predicted)} vs {len(true)})")
    true_pos = [c >= eps for c in true]
    pred_pos = [c >= eps for c in predicted]
    tp = sum(1 for t, p in zip(true_pos, pred_pos, strict=True) if t and p)
    precision = tp / sum(pred_pos) if any(pred_pos) else 0.0
    recall = tp / sum(true_pos) if any(true_pos) else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return Detection(sum(true_pos), sum(pred_pos), tp, precision, recall, f1)


def load_truth(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Truth records by trajectory id from a JSONL file written by `SynthBatch.write_truth`."""
    out: dict[str, dict[str, Any]] = {}
    try:
        with Path(path).open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict) or "trajectory_id" not in row:
                    raise TrajlakeError(f"{path}:{n}: a truth line needs a trajectory_id")
                out[str(row["trajectory_id"])] = row
    except (OSError, ValueError) as e:
        raise TrajlakeError(f"cannot read truth file {path}: {e}") from e
    return out


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def evaluate_credit(
    lake: Lake,
    run_name: str,
    truth: Truth | str | os.PathLike[str],
    *,
    at: SnapshotRef = None,
    eps: float = 0.05,
    thread: str = "main",
    signal: Literal["credit", "advantage"] = "credit",
) -> CreditEval:
    """Compare a stored credit run with the true per-turn values and credits.

    Turn t of a trajectory in the run is matched with `truth[trajectory_id]["credits"][t]`
    and `["values"][t]` (V*(s_t), the value before turn t). Trajectories without truth, or
    whose turn count differs from it, are counted and left out, so a truth subset (say the
    test tasks of a split) evaluates the run on that subset.

    Args:
        lake: The lake holding the run.
        run_name: The credit run (`credits.run_name`).
        truth: Truth records by trajectory id, or the path of a truth JSONL file.
        at: Snapshot to read the run at.
        eps: A turn is productive when its signal is ≥ eps (true: c* ≥ eps).
        thread: Thread of the run to evaluate (truth describes one thread).
        signal: Column compared with c*: `credit` (V(s_{t+1}) − V(s_t), whatever the
            estimator) or `advantage` (what GAE with the run's λ, or a group source, gave).

    Raises:
        TrajlakeError: no run of that name, or no trajectory of it has matching truth.
    """
    if signal not in ("credit", "advantage"):
        raise ValueError(f"signal must be 'credit' or 'advantage', got {signal!r}")
    records: Truth = truth if isinstance(truth, Mapping) else load_truth(truth)
    rows = lake.sql(
        f"SELECT trajectory_id, turn, value_before, {signal} AS signal FROM credits "
        f"WHERE run_name = {_quote(run_name)} AND thread = {_quote(thread)} "
        "ORDER BY trajectory_id, turn",
        at=at,
    ).to_dicts()
    if not rows:
        raise TrajlakeError(
            f"no credit run named {run_name!r} (thread {thread!r}) at this snapshot"
        )
    by_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_traj[row["trajectory_id"]].append(row)

    pred_c: list[float] = []
    true_c: list[float] = []
    interior: list[int] = []
    pred_v: list[float] = []
    true_v: list[float] = []
    within: list[float] = []
    eligible = without_truth = mismatch = evaluated = 0
    for tid, traj_rows in by_traj.items():
        record = records.get(tid)
        if record is None:
            without_truth += 1
            continue
        c_star = [float(c) for c in record["credits"]]
        v_star = [float(v) for v in record["values"]]
        if [r["turn"] for r in traj_rows] != list(range(len(c_star))):
            mismatch += 1
            continue
        evaluated += 1
        credits = [float(r["signal"]) for r in traj_rows]
        interior += range(len(pred_c), len(pred_c) + len(credits) - 1)
        pred_c += credits
        true_c += c_star
        pred_v += [float(r["value_before"]) for r in traj_rows]
        true_v += v_star[: len(c_star)]
        if len(c_star) >= 3 and len(set(c_star)) > 1:
            eligible += 1
            rho = spearman(credits, c_star)
            if rho is not None:
                within.append(rho)
    if not evaluated:
        raise TrajlakeError(
            f"no trajectory of credit run {run_name!r} has matching truth "
            f"({without_truth} without a record, {mismatch} with another turn count)"
        )
    det = detection(pred_c, true_c, eps)
    return CreditEval(
        run_name=run_name,
        signal=signal,
        eps=eps,
        trajectories=evaluated,
        turns=len(true_c),
        without_truth=without_truth,
        length_mismatch=mismatch,
        pooled_spearman=spearman(pred_c, true_c),
        interior_spearman=spearman([pred_c[i] for i in interior], [true_c[i] for i in interior]),
        within_spearman=sum(within) / len(within) if within else None,
        within_trajectories=len(within),
        within_eligible=eligible,
        value_spearman=spearman(pred_v, true_v),
        true_productive=det.true_productive,
        predicted_productive=det.predicted_productive,
        true_positives=det.true_positives,
        precision=det.precision,
        recall=det.recall,
        f1=det.f1,
    )
