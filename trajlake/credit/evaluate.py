"""Evaluation of a stored credit run against ground truth (e.g. `trajlake.synth`'s exact V*, c*).

`evaluate_credit(lake, run_name, truth)` joins the run's rows with the true per-turn values and
credits by (trajectory id, turn) and reports rank agreement (with bootstrap intervals over
tasks) and productive-turn detection. `split_tasks` draws the seeded train / held-out task split
that honest numbers are reported on: sources fitted on data see only the train tasks.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from trajlake.errors import TrajlakeError
from trajlake.query import sql

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Truth = Mapping[str, Mapping[str, Any]]
"""Truth records by trajectory id; each has `values` V*(s_0) … V*(s_T) and `credits` c*_t
(and, for task-level splits and intervals, its `task_id`)."""

Signal = Literal["credit", "advantage", "broadcast"]
SIGNALS: tuple[Signal, ...] = ("credit", "advantage", "broadcast")
"""Per-turn scores compared with c*: the run's TD credit, its stored advantage, or the outcome
broadcast (every turn scored with its trajectory's outcome: no credit assignment at all)."""


@dataclass(frozen=True)
class CreditEval:
    """How a credit run agrees with the true values and credits.

    Rank correlations are Spearman's ρ (average ranks for ties); None where undefined (fewer
    than 2 pairs, or one side constant — e.g. the TD credit of the `outcome` source, all 0, or
    the outcome broadcast within one trajectory). Precision is 0.0 when nothing is predicted
    productive (scikit-learn's zero_division=0). Intervals are percentile bootstrap intervals
    over tasks (tasks resampled with replacement, all turns of a drawn task kept together).
    """

    run_name: str
    signal: str
    """The per-turn score compared with c*: `credit` (TD credit), `advantage` (e.g. GAE
    λ = 1) or `broadcast` (the trajectory's outcome on each of its turns)."""
    eps: float
    trajectories: int
    """Trajectories of the run that have truth with the same number of turns (evaluated)."""
    tasks: int
    """Distinct tasks among the evaluated trajectories (the bootstrap's units)."""
    turns: int
    """Turns evaluated."""
    without_truth: int
    """Trajectories of the run without a truth record (left out)."""
    length_mismatch: int
    """Trajectories whose stored turn count differs from the truth's (left out)."""
    pooled_spearman: float | None
    """ρ(signal, c*) over every evaluated turn."""
    pooled_ci_low: float | None
    pooled_ci_high: float | None
    """Bootstrap interval of `pooled_spearman` (None without resamples or when undefined)."""
    interior_spearman: float | None
    """ρ(signal, c*) over every turn but each trajectory's last (whose V(s_T) is the known
    outcome for every source), i.e. the part that needs real intermediate values."""
    interior_ci_low: float | None
    interior_ci_high: float | None
    """Bootstrap interval of `interior_spearman`."""
    within_spearman: float | None
    """Mean over trajectories of ρ(signal, c*) within the trajectory (None for `broadcast`:
    a score that is constant within each trajectory has no within-trajectory ranking)."""
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
    bootstrap: int = 0
    """Bootstrap resamples behind the intervals (0: no intervals)."""
    bootstrap_seed: int = 0
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        """The evaluation as a JSON-able dict."""
        return asdict(self)

    def summary(self) -> str:
        """One line for people."""
        return (
            f"{self.run_name} ({self.signal}): {self.trajectories} trajectories of "
            f"{self.tasks} tasks, {self.turns} turns; "
            f"spearman pooled={_fmt(self.pooled_spearman)}"
            f"{_fmt_ci(self.pooled_ci_low, self.pooled_ci_high)} "
            f"interior={_fmt(self.interior_spearman)}"
            f"{_fmt_ci(self.interior_ci_low, self.interior_ci_high)} "
            f"within={_fmt(self.within_spearman)} ({self.within_trajectories}/"
            f"{self.within_eligible}) value={_fmt(self.value_spearman)}; "
            f"productive (eps={self.eps}) P={self.precision:.3f} R={self.recall:.3f} "
            f"F1={self.f1:.3f}"
        )


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _fmt_ci(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"


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


class _TieRanks:
    """Average ranks of `x` under integer multiplicities, without re-sorting per resample.

    For weights w (how often each element is drawn), the average rank of element i in the
    expanded multiset is W(< x_i) + (W(= x_i) + 1) / 2, where W sums weights; groups of equal
    values are found once, so each resample costs O(n).
    """

    def __init__(self, x: npt.NDArray[np.float64]) -> None:
        order = np.argsort(x, kind="mergesort")
        sorted_x = x[order]
        starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
        sizes = np.diff(np.r_[starts, len(x)])
        self.groups = len(starts)
        self.group = np.empty(len(x), dtype=np.int64)
        self.group[order] = np.repeat(np.arange(self.groups), sizes)

    def ranks(self, weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        per_group = np.bincount(self.group, weights=weights, minlength=self.groups)
        before = np.cumsum(per_group) - per_group
        return (before + (per_group + 1) / 2)[self.group]


def weighted_spearman(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], weights: npt.NDArray[np.float64]
) -> float | None:
    """Spearman's ρ of the multiset holding element i `weights[i]` times (integers ≥ 0).

    Equal to `spearman` on the expanded lists; None where that is undefined.
    """
    return _weighted_rho(_TieRanks(x), _TieRanks(y), weights)


def _weighted_rho(rx: _TieRanks, ry: _TieRanks, w: npt.NDArray[np.float64]) -> float | None:
    total = float(w.sum())
    if total < 2:
        return None
    a, b = rx.ranks(w), ry.ranks(w)
    a -= _dot(w, a) / total
    b -= _dot(w, b) / total
    wa = w * a
    denom = math.sqrt(_dot(wa, a) * _dot(w * b, b))
    if denom <= 1e-12 * total * total:
        return None
    return max(-1.0, min(1.0, _dot(wa, b) / denom))


def _dot(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> float:
    # einsum stays off BLAS: a threaded BLAS dot (what `@` calls) slows down by 100× and more
    # when the machine is loaded, and a bootstrap calls this thousands of times.
    return float(np.einsum("i,i->", x, y))


def bootstrap_spearman(
    x: Sequence[float],
    y: Sequence[float],
    clusters: Sequence[int],
    *,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile interval of Spearman's ρ(x, y) when whole clusters (tasks) are resampled.

    Each resample draws as many clusters as there are, with replacement, and keeps all pairs of
    a drawn cluster. None when fewer than half the resamples give a defined ρ.

    Args:
        clusters: Cluster index 0 … K−1 of each pair.
    """
    if not len(x) == len(y) == len(clusters):
        raise ValueError("x, y and clusters differ in length")
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError("need resamples >= 1 and 0 < confidence < 1")
    if len(x) < 2:
        return None
    cl = np.asarray(clusters, dtype=np.int64)
    k = int(cl.max()) + 1
    rx = _TieRanks(np.asarray(x, dtype=np.float64))
    ry = _TieRanks(np.asarray(y, dtype=np.float64))
    rng = np.random.default_rng(seed)
    rhos = []
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, k, size=k), minlength=k).astype(np.float64)
        rho = _weighted_rho(rx, ry, counts[cl])
        if rho is not None:
            rhos.append(rho)
    if len(rhos) * 2 < resamples:
        return None
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(rhos, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class TaskSplit:
    """A seeded split of task ids into train tasks and held-out (test) tasks."""

    seed: int
    test_fraction: float
    train: tuple[str, ...]
    test: tuple[str, ...]

    def describe(self) -> str:
        """One line for people, e.g. for a benchmark header."""
        return (
            f"task split seed={self.seed} test_fraction={self.test_fraction:g}: "
            f"{len(self.train)} train / {len(self.test)} held-out tasks"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (sorted id lists)."""
        return asdict(self)


def split_tasks(task_ids: Iterable[str], *, test_fraction: float = 0.5, seed: int = 0) -> TaskSplit:
    """Split distinct task ids into train and held-out sets, reproducibly for a seed.

    The sorted distinct ids are shuffled by `random.Random(seed)`; the first
    round(n × test_fraction) (at least 1 and at most n − 1 when n ≥ 2) are held out.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    ids = sorted(set(task_ids))
    if len(ids) < 2:
        raise ValueError(f"need at least 2 distinct tasks to split, got {len(ids)}")
    random.Random(seed).shuffle(ids)
    n_test = min(max(round(len(ids) * test_fraction), 1), len(ids) - 1)
    return TaskSplit(seed, test_fraction, tuple(sorted(ids[n_test:])), tuple(sorted(ids[:n_test])))


@dataclass
class _Joined:
    """The run's turns matched with truth, flattened."""

    signal: list[float]
    c_star: list[float]
    value: list[float]
    v_star: list[float]
    cluster: list[int]
    interior: list[int]
    within: list[float]
    eligible: int = 0
    evaluated: int = 0
    without_truth: int = 0
    mismatch: int = 0


def _join(by_traj: Mapping[str, list[dict[str, Any]]], records: Truth, signal: Signal) -> _Joined:
    out = _Joined([], [], [], [], [], [], [])
    task_index: dict[str, int] = {}
    for tid, traj_rows in by_traj.items():
        record = records.get(tid)
        if record is None:
            out.without_truth += 1
            continue
        c_star = [float(c) for c in record["credits"]]
        if [r["turn"] for r in traj_rows] != list(range(len(c_star))):
            out.mismatch += 1
            continue
        out.evaluated += 1
        if signal == "broadcast":  # V(s_T) is the outcome for every source
            scores = [float(traj_rows[-1]["value_after"])] * len(traj_rows)
        else:
            scores = [float(r["signal"]) for r in traj_rows]
        task = str(record.get("task_id") or f"trajectory:{tid}")
        cluster = task_index.setdefault(task, len(task_index))
        out.interior += range(len(out.signal), len(out.signal) + len(scores) - 1)
        out.signal += scores
        out.c_star += c_star
        out.cluster += [cluster] * len(scores)
        out.value += [float(r["value_before"]) for r in traj_rows]
        out.v_star += [float(v) for v in record["values"]][: len(c_star)]
        if len(c_star) >= 3 and len(set(c_star)) > 1:
            out.eligible += 1
            rho = spearman(scores, c_star)
            if rho is not None:
                out.within.append(rho)
    return out


def _run_rows(
    lake: LakeStore, run_name: str, thread: str, signal: Signal, at: SnapshotRef
) -> dict[str, list[dict[str, Any]]]:
    column = "credit" if signal == "broadcast" else signal
    rows = sql(
        lake,
        f"SELECT trajectory_id, turn, value_before, value_after, {column} AS signal "
        "FROM credits WHERE run_name = ? AND thread = ? "
        "ORDER BY trajectory_id, turn",
        [run_name, thread],
        at=at,
    ).to_dicts()
    if not rows:
        raise TrajlakeError(
            f"no credit run named {run_name!r} (thread {thread!r}) at this snapshot"
        )
    by_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_traj[row["trajectory_id"]].append(row)
    return by_traj


def evaluate_credit(
    lake: LakeStore,
    run_name: str,
    truth: Truth | str | os.PathLike[str],
    *,
    at: SnapshotRef = None,
    eps: float = 0.05,
    thread: str = "main",
    signal: Signal = "credit",
    tasks: Collection[str] | None = None,
    bootstrap: int = 1000,
    bootstrap_seed: int = 0,
    confidence: float = 0.95,
) -> CreditEval:
    """Compare a stored credit run with the true per-turn values and credits.

    Turn t of a trajectory in the run is matched with `truth[trajectory_id]["credits"][t]`
    and `["values"][t]` (V*(s_t), the value before turn t). Trajectories without truth, or
    whose turn count differs from it, are counted and left out, so a truth subset (say the
    held-out tasks of `split_tasks`, or `tasks=`) evaluates the run on that subset.

    Args:
        lake: The lake holding the run.
        run_name: The credit run (`credits.run_name`).
        truth: Truth records by trajectory id, or the path of a truth JSONL file.
        at: Snapshot to read the run at.
        eps: A turn is productive when its signal is ≥ eps (true: c* ≥ eps).
        thread: Thread of the run to evaluate (truth describes one thread).
        signal: `credit` (V(s_{t+1}) − V(s_t), whatever the estimator), `advantage` (what
            GAE with the run's λ, or a group source, gave) or `broadcast` (each turn scored
            with its trajectory's outcome, the run's V(s_T): the no-credit-assignment floor;
            pooled ρ is defined, within-trajectory ρ is not).
        tasks: Evaluate only trajectories whose truth `task_id` is in this set.
        bootstrap: Resamples of tasks for the intervals of pooled and interior ρ (0: none).
        bootstrap_seed, confidence: Seed and level of those intervals.

    Raises:
        TrajlakeError: no run of that name, or no trajectory of it has matching truth.
    """
    if signal not in SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0, got {bootstrap}")
    records: Truth = truth if isinstance(truth, Mapping) else load_truth(truth)
    if tasks is not None:
        wanted = set(tasks)
        records = {k: v for k, v in records.items() if v.get("task_id") in wanted}
    j = _join(_run_rows(lake, run_name, thread, signal, at), records, signal)
    if not j.evaluated:
        raise TrajlakeError(
            f"no trajectory of credit run {run_name!r} has matching truth "
            f"({j.without_truth} without a record, {j.mismatch} with another turn count)"
        )
    det = detection(j.signal, j.c_star, eps)
    inner = (
        [j.signal[i] for i in j.interior],
        [j.c_star[i] for i in j.interior],
        [j.cluster[i] for i in j.interior],
    )
    pooled_ci = interior_ci = None
    if bootstrap:
        pooled_ci = bootstrap_spearman(
            j.signal, j.c_star, j.cluster,
            resamples=bootstrap, seed=bootstrap_seed, confidence=confidence,
        )  # fmt: skip
        interior_ci = bootstrap_spearman(
            *inner, resamples=bootstrap, seed=bootstrap_seed, confidence=confidence
        )
    return CreditEval(
        run_name=run_name,
        signal=signal,
        eps=eps,
        trajectories=j.evaluated,
        tasks=len(set(j.cluster)),
        turns=len(j.c_star),
        without_truth=j.without_truth,
        length_mismatch=j.mismatch,
        pooled_spearman=spearman(j.signal, j.c_star),
        pooled_ci_low=pooled_ci[0] if pooled_ci else None,
        pooled_ci_high=pooled_ci[1] if pooled_ci else None,
        interior_spearman=spearman(inner[0], inner[1]),
        interior_ci_low=interior_ci[0] if interior_ci else None,
        interior_ci_high=interior_ci[1] if interior_ci else None,
        within_spearman=sum(j.within) / len(j.within) if j.within else None,
        within_trajectories=len(j.within),
        within_eligible=j.eligible,
        value_spearman=spearman(j.value, j.v_star),
        true_productive=det.true_productive,
        predicted_productive=det.predicted_productive,
        true_positives=det.true_positives,
        precision=det.precision,
        recall=det.recall,
        f1=det.f1,
        bootstrap=bootstrap,
        bootstrap_seed=bootstrap_seed,
        confidence=confidence,
    )
