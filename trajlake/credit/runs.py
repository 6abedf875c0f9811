"""Credit runs: compute values → credits/advantages → masks/weights and store them in `credits`.

One run writes one row per turn in one commit (a new snapshot), remembering the snapshot it read
(`source_snapshot`) and its parameters, so runs are versioned, queryable and coexist by name.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from trajlake.credit._types import TrajectoryTurns
from trajlake.credit.estimators import gae, n_step_advantages, td_credits
from trajlake.credit.masks import (
    MASK_RULES,
    TurnMasks,
    advantage_weights,
    all_turns,
    first_error,
    rise,
    step_reject,
)
from trajlake.credit.registry import value_source_spec
from trajlake.credit.turns import load_turns
from trajlake.credit.values import AdvantageSource
from trajlake.errors import TrajlakeError
from trajlake.query import sql
from trajlake.records import rows_for_table

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

log = logging.getLogger(__name__)


@dataclass
class CreditRunReport:
    """What a credit run computed and stored."""

    run_name: str
    estimator: str
    params: dict[str, Any]
    source_snapshot: int
    snapshot: int
    """Snapshot holding the run (the head when nothing new was written)."""
    trajectories: int = 0
    skipped: int = 0
    """Trajectories left out because the value source gave them no values (no outcome)."""
    turns: int = 0
    rows_added: int = 0
    kept_turns: int = 0
    existing: bool = False
    """The run was already stored with the same snapshot and parameters: nothing was added."""
    estimator_choice: dict[str, str] | None = None
    """With `estimator='auto'`: the source picked (`name`) and why (`reason`)."""
    warnings: list[str] = field(default_factory=list)
    """Assumptions of the source that the data breaks (also logged as warnings)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-able dict."""
        return asdict(self)

    def summary(self) -> str:
        """One line for people."""
        state = "already stored" if self.existing else f"{self.rows_added} rows added"
        line = (
            f"credit run {self.run_name!r} ({self.estimator}) on snapshot {self.source_snapshot}: "
            f"{self.trajectories} trajectories, {self.turns} turns, {self.kept_turns} kept, "
            f"{self.skipped} skipped without values; {state} (snapshot {self.snapshot})"
        )
        if self.estimator_choice is not None:
            line += (
                f"\nestimator: {self.estimator_choice['name']} ({self.estimator_choice['reason']})"
            )
        return line + "".join(f"\nwarning: {w}" for w in self.warnings)


_UNRECORDED = frozenset({"lake", "api_key"})


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _masks(
    rule: str,
    traj: TrajectoryTurns,
    credits: Sequence[float],
    advantages: Sequence[float],
    eps: float,
    beta: float,
    w_max: float,
) -> TurnMasks:
    if rule == "rise":
        return rise(credits, eps, resolved=traj.outcome is not None and traj.outcome >= 1.0)
    if rule == "step-reject":
        bad = [turn.is_error or c < -eps for turn, c in zip(traj.turns, credits, strict=True)]
        return step_reject(bad)
    if rule == "first-error":
        return first_error([turn.is_error for turn in traj.turns])
    if rule == "advantage":
        return advantage_weights(advantages, beta, w_max)
    return all_turns(len(traj.turns))


def credit_rows(
    trajectories: Sequence[TrajectoryTurns],
    values: dict[str, list[float]],
    *,
    run_name: str,
    estimator: str,
    params: dict[str, Any],
    group_advantages: dict[str, float] | None,
    source_snapshot: int | None,
) -> list[dict[str, Any]]:
    """`credits` rows (one per turn) for the trajectories that have values."""
    gamma, lam, n_step = params["gamma"], params["lam"], params["n_step"]
    now = dt.datetime.now(dt.UTC)
    rows: list[dict[str, Any]] = []
    for traj in trajectories:
        curve = values.get(traj.trajectory_id)
        if curve is None:
            continue
        if len(curve) != len(traj.turns) + 1:
            raise TrajlakeError(
                f"value source {estimator!r} gave {len(curve)} values for trajectory "
                f"{traj.trajectory_id!r} with {len(traj.turns)} turns (expected T + 1)"
            )
        credits = td_credits(curve)
        if group_advantages is not None:
            adv = [group_advantages[traj.trajectory_id]] * len(traj.turns)
        elif n_step is not None:
            adv = n_step_advantages(curve, n_step, gamma)
        else:
            adv = gae(curve, gamma, lam)
        masks = _masks(
            params["mask"], traj, credits, adv, params["eps"], params["beta"], params["w_max"]
        )
        for t, turn in enumerate(traj.turns):
            rows.append(
                {
                    "run_name": run_name,
                    "trajectory_id": traj.trajectory_id,
                    "thread": traj.thread,
                    "turn": turn.turn,
                    "estimator": estimator,
                    "params": params,
                    "value_before": curve[t],
                    "value_after": curve[t + 1],
                    "credit": credits[t],
                    "advantage": adv[t],
                    "weight": masks.weight[t],
                    "mask": masks.mask[t],
                    "segment_id": masks.segment_id[t],
                    "source_snapshot": source_snapshot,
                    "created_at": now,
                }
            )
    return rows


AUTO = "auto"
"""The estimator name that picks a source from the data (`choose_estimator`)."""

AUTO_CROSSFIT = "crossfit:text-td-task"
"""What `auto` picks when labelled trajectories span enough tasks: the best CPU source measured
on held-out tasks of both environments (docs/credit.md, "Summary: every source on both
environments"): within 0.001 of the best on `synth`, the best F1 on `debug`."""

AUTO_GROUP = "anchor"
"""What `auto` picks with several rollouts per task but too few tasks to cross-fit: it beat
prefix-MC on interior ρ in both synthetic environments and needs no model."""

AUTO_MIN_TASKS = 10
"""Labelled tasks `auto` needs before it cross-fits: two per fold of the default 5 folds, so
every model is fitted on at least 8 tasks."""

PER_TASK_SOURCES = ("prefix-mc", "group", "group:grpo", "group:rloo", "anchor")
"""Sources that compare the rollouts of one task (constant credit for a task's lone rollout)."""


@dataclass(frozen=True)
class EstimatorChoice:
    """The source `auto` picked and why."""

    name: str
    reason: str


def task_counts(trajectories: Sequence[TrajectoryTurns]) -> dict[str, int]:
    """Labelled rollouts per task (a trajectory without task id is a task of its own)."""
    counts: dict[str, int] = defaultdict(int)
    for t in trajectories:
        if t.outcome is not None:
            counts[t.task_id if t.task_id is not None else "traj:" + t.trajectory_id] += 1
    return dict(counts)


def choose_estimator(trajectories: Sequence[TrajectoryTurns]) -> EstimatorChoice:
    """The best source the data supports (the rule `estimator='auto'` applies).

    1. labelled trajectories of >= `AUTO_MIN_TASKS` tasks → `AUTO_CROSSFIT` (cross-fitted);
    2. else a task with >= 2 labelled rollouts → `AUTO_GROUP` (compares a task's rollouts);
    3. else labelled trajectories of >= 2 tasks → `AUTO_CROSSFIT` with fewer folds;
    4. else (one labelled trajectory) → `outcome`.
    No trajectory at all → `outcome` (nothing to do); none labelled → an error.
    """
    if not trajectories:
        return EstimatorChoice("outcome", "no trajectories selected")
    counts = task_counts(trajectories)
    labelled = sum(counts.values())
    if not labelled:
        raise TrajlakeError(
            f"none of the {len(trajectories)} trajectories has an outcome, so no value can be "
            "estimated from outcomes: add outcomes with `trajlake label` (or record `resolved` / "
            "`reward` at ingest), or pick a source that needs none: `--estimator judge`"
        )
    tasks, most = len(counts), max(counts.values())
    seen = f"{labelled} labelled trajectories of {tasks} tasks"
    if tasks >= AUTO_MIN_TASKS:
        return EstimatorChoice(
            AUTO_CROSSFIT,
            f"{seen} (>= {AUTO_MIN_TASKS}): a text value model cross-fitted by task, the best "
            "measured source on tasks it never saw",
        )
    if most >= 2:
        return EstimatorChoice(
            AUTO_GROUP,
            f"{seen} (< {AUTO_MIN_TASKS} to cross-fit), up to {most} rollouts per task: "
            "compares the rollouts of each task at recurring states",
        )
    if tasks >= 2:
        return EstimatorChoice(
            AUTO_CROSSFIT,
            f"{seen}, one rollout each: too few to cross-fit well, but no task has several "
            "rollouts to compare",
        )
    return EstimatorChoice(
        "outcome", f"{seen}: a single labelled trajectory, nothing to compare it with"
    )


def clear_blank_task_ids(trajectories: Sequence[TrajectoryTurns]) -> int:
    """Set blank task ids ('' or whitespace) to None; how many trajectories have no task id.

    A blank id would otherwise join every such trajectory into one task."""
    missing = 0
    for t in trajectories:
        if t.task_id is not None and not t.task_id.strip():
            t.task_id = None
        missing += t.task_id is None
    return missing


def _components(estimator: str) -> list[str]:
    if estimator.startswith("ensemble:"):
        parts = estimator.removeprefix("ensemble:").split("+")
        return [p.strip() for p in parts if p.strip()]
    return [estimator]


def data_warnings(
    trajectories: Sequence[TrajectoryTurns],
    estimator: str,
    source: object,
    values: dict[str, list[float]],
    missing_task: int,
) -> list[str]:
    """What the data breaks of the assumptions of `estimator` (one sentence each)."""
    out: list[str] = []
    n = len(trajectories)
    if not n:
        return ["no trajectories selected: nothing to credit (check --where, --at and --thread)"]
    counts = task_counts(trajectories)
    if missing_task:
        out.append(
            f"{missing_task} of {n} trajectories have no task id (missing or blank): each is "
            "treated as a task of its own, so it is compared with no other rollout and "
            "cross-fitting puts it in a fold alone"
        )
    per_task = [c for c in _components(estimator) if c in PER_TASK_SOURCES]
    lone = sum(1 for c in counts.values() if c == 1)
    if per_task and lone:
        out.append(
            f"{lone} of {len(counts)} labelled tasks have a single labelled rollout: "
            f"{', '.join(per_task)} compares rollouts of one task, so those trajectories get "
            "constant values (credit 0 on every turn but the last); "
            f"{AUTO_CROSSFIT} compares across tasks instead"
        )
    unlabelled = [t for t in trajectories if t.outcome is None]
    if unlabelled:
        valued = sum(1 for t in unlabelled if t.trajectory_id in values)
        fate = []
        if valued < len(unlabelled):
            fate.append(f"{len(unlabelled) - valued} get no credit rows")
        if valued:
            fate.append(f"{valued} are valued by {estimator} with its own estimate as V(s_T)")
        what = (
            "no trajectory has an outcome"
            if len(unlabelled) == n
            else f"{len(unlabelled)} of {n} trajectories have no outcome"
        )
        out.append(
            f"{what} (label them with `trajlake label`; `--estimator judge` needs none): "
            + "; ".join(fate)
        )
    folds = getattr(source, "folds", None)
    if isinstance(folds, int) and 2 <= len(counts) < folds:
        out.append(
            f"{estimator} is cross-fitted with {folds} folds but there are only {len(counts)} "
            f"labelled tasks: {len(counts)} folds are used, each model fitted on "
            f"{len(counts) - 1} tasks, so its values are noisy (label more tasks, or pass "
            "--source-option folds=N)"
        )
    return out


def run_credit(
    lake: LakeStore,
    *,
    estimator: str = AUTO,
    gamma: float = 1.0,
    lam: float = 0.0,
    n_step: int | None = None,
    mask: str = "rise",
    eps: float = 0.05,
    beta: float = 1.0,
    w_max: float = 5.0,
    at: SnapshotRef = None,
    where: str | None = None,
    thread: str | None = "main",
    name: str | None = None,
    **source_kw: Any,
) -> CreditRunReport:
    """Compute per-turn credit with a value source and store it as a run in `credits`.

    Args:
        lake: The lake (read at `at`, written at its head).
        estimator: Value source name (`value_source`): outcome, prefix-mc, group, group:rloo,
            value-model:<path|builtin>, judge, crossfit:text(-td), anchor, progress,
            hindsight:<model>, ensemble:<a>+<b>; `auto` (the default) picks one from the data
            (`choose_estimator`) and says which and why in `estimator_choice`.
        gamma, lam: GAE(γ, λ) for the `advantage` column (λ = 0: TD credit, λ = 1: MC).
        n_step: Use n-step advantages G_t^(n) − V(s_t) instead of GAE.
        mask: rise | step-reject | first-error | advantage | all (rise keeps every turn of
            trajectories with outcome >= 1, i.e. resolved).
        eps: ε of rise segments (and of step-reject's c_t < −ε rule).
        beta, w_max: Advantage weights clip(exp(A/β), 0, w_max) for mask='advantage'.
        at, where, thread: Snapshot, SQL condition on `trajectories`, thread to read.
        name: Run name; default `<estimator>-<mask>-s<snapshot>-<hash of params>`.
        **source_kw: Keyword arguments of the value source.

    Group sources (`group`, `group:rloo`) put their per-rollout advantage in `advantage`.
    Re-running a stored run (same name, snapshot and parameters) adds nothing; the same name
    with another snapshot or other parameters is an error. Blank task ids count as missing.
    The report's `warnings` say which assumptions of the source the data breaks (one rollout
    per task, missing task ids, missing outcomes, fewer tasks than folds).
    """
    if mask not in MASK_RULES:
        raise ValueError(f"unknown mask rule {mask!r}; known: {', '.join(MASK_RULES)}")
    if n_step is not None and n_step < 1:
        raise ValueError(f"n_step must be >= 1, got {n_step}")
    snap = input_snapshot(lake, at)
    trajectories = load_turns(lake, at=snap, where=where, thread=thread)
    missing_task = clear_blank_task_ids(trajectories)
    choice = choose_estimator(trajectories) if estimator == AUTO else None
    if choice is not None:
        estimator = choice.name
    # Secrets and live objects stay out of the stored parameters.
    recorded = {k: v for k, v in source_kw.items() if k not in _UNRECORDED}
    params: dict[str, Any] = _jsonable(
        {
            "gamma": gamma,
            "lam": lam,
            "n_step": n_step,
            "mask": mask,
            "eps": eps,
            "beta": beta,
            "w_max": w_max,
            "where": where,
            "thread": thread,
            "source": recorded,
        }
    )
    digest = hashlib.sha256(json.dumps([estimator, params], sort_keys=True).encode()).hexdigest()
    run_name = name or f"{estimator}-{mask}-s{snap}-{digest[:8]}"
    report = CreditRunReport(run_name, estimator, params, snap, lake.snapshot().snapshot_id)
    if choice is not None:
        report.estimator_choice = asdict(choice)
        log.info("credit: estimator %s (%s)", choice.name, choice.reason)
    if _stored_run_matches(lake, run_name, estimator, params, snap):
        report.existing = True
        report.warnings = data_warnings(trajectories, estimator, None, {}, missing_task)
        return report
    spec = value_source_spec(estimator)
    if spec.needs_lake:
        source_kw.setdefault("lake", lake)  # the judge caches its calls in the lake
    if spec.reads_observations:
        source_kw.update(lake=lake, at=snap)  # they read the observations or messages
    source = spec.build(estimator, **source_kw)
    values = source.values(trajectories) if trajectories else {}
    report.warnings = data_warnings(trajectories, estimator, source, values, missing_task)
    for warning in report.warnings:
        log.info("credit run %s: %s", run_name, warning)
    group_adv = source.advantages(trajectories) if isinstance(source, AdvantageSource) else None
    rows = credit_rows(
        trajectories,
        values,
        run_name=run_name,
        estimator=estimator,
        params=params,
        group_advantages=group_adv,
        source_snapshot=snap,
    )
    report.trajectories = sum(1 for t in trajectories if t.trajectory_id in values)
    report.skipped = len(trajectories) - report.trajectories
    report.turns = len(rows)
    report.kept_turns = sum(1 for r in rows if r["mask"])
    if rows:
        summary = {"run_name": run_name, "estimator": estimator, "rows": len(rows)}
        result = lake.commit(
            {"credits": rows_for_table("credits", rows)}, operation="credit", summary=summary
        )
        report.rows_added = result.added.get("credits", 0)
        report.snapshot = result.snapshot_id
    return report


INPUT_TABLES = ("trajectories", "messages", "labels")
"""Tables a credit run reads; snapshots that differ only elsewhere hold the same input."""


def input_snapshot(lake: LakeStore, at: SnapshotRef = None) -> int:
    """The snapshot a run at `at` reads, as the first snapshot with the same input tables.

    Commits that touch only other tables (credit runs, scores) do not change a run's input,
    so re-running at the head after a credit commit names the same source snapshot.
    """
    target = lake.snapshot(at)
    key = [target.tables.get(t) for t in INPUT_TABLES]
    earliest = target.snapshot_id
    for snap in reversed(lake.snapshots()):
        if snap.snapshot_id > target.snapshot_id:
            continue
        if [snap.tables.get(t) for t in INPUT_TABLES] != key:
            break
        earliest = snap.snapshot_id
    return earliest


def _stored_run_matches(
    lake: LakeStore, run_name: str, estimator: str, params: dict[str, Any], snap: int
) -> bool:
    stored = sql(
        lake,
        "SELECT DISTINCT estimator, params, source_snapshot FROM credits WHERE run_name = ?",
        [run_name],
    ).to_dicts()
    if not stored:
        return False
    for row in stored:
        same_params = row["params"] is not None and json.loads(row["params"]) == params
        if row["estimator"] != estimator or not same_params or row["source_snapshot"] != snap:
            raise TrajlakeError(
                f"credit run {run_name!r} already exists with other parameters or another "
                "source snapshot; pick another --name"
            )
    return True


def list_credit_runs(lake: LakeStore, *, at: SnapshotRef = None) -> list[dict[str, Any]]:
    """The credit runs stored at a snapshot: name, estimator, params, source snapshot, counts."""
    rows = sql(
        lake,
        "SELECT run_name, any_value(estimator) AS estimator, any_value(params) AS params, "
        "any_value(source_snapshot) AS source_snapshot, "
        "count(DISTINCT trajectory_id) AS trajectories, count(*) AS turns, "
        "count(*) FILTER (WHERE mask) AS kept_turns, min(created_at) AS created_at "
        "FROM credits GROUP BY run_name ORDER BY run_name",
        at=at,
    ).to_dicts()
    for row in rows:
        row["params"] = json.loads(row["params"]) if row["params"] else None
    return rows


def diagnostics(lake: LakeStore, run_name: str, *, at: SnapshotRef = None) -> dict[str, Any]:
    """Orchard's diagnostics of a run (over unresolved trajectories unless said otherwise).

    - `inverted_u`: share of unresolved trajectories with ≥ 2 turns whose value curve
      V(s_0) … V(s_T) peaks strictly above both ends at an interior state;
    - `median_segment_length`: median length (turns) of the kept segments;
    - `with_segment`: share of unresolved trajectories with ≥ 1 kept turn;
    - `tokens_kept`: kept completion tokens / all completion tokens, over every trajectory
      (None when no token counts are stored); `turns_kept` the same over turns.
    """
    rows = sql(
        lake,
        "SELECT trajectory_id, thread, turn, value_before, value_after, mask, segment_id, "
        "source_snapshot FROM credits WHERE run_name = ? "
        "ORDER BY trajectory_id, thread, turn",
        [run_name],
        at=at,
    ).to_dicts()
    if not rows:
        raise TrajlakeError(f"no credit run named {run_name!r} at this snapshot")
    snap = rows[0]["source_snapshot"]
    by_traj: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_traj[(row["trajectory_id"], row["thread"])].append(row)
    resolved_ids = {
        r["trajectory_id"]
        for r in sql(lake, "SELECT trajectory_id FROM outcomes WHERE resolved", at=snap).to_dicts()
    }
    tokens = {
        (r["trajectory_id"], r["thread"], r["turn"]): r["completion_tokens"]
        for r in sql(
            lake,
            "SELECT trajectory_id, thread, turn, completion_tokens FROM messages "
            "WHERE role = 'assistant' AND turn IS NOT NULL",
            at=snap,
        ).to_dicts()
    }
    unresolved = [v for (tid, _), v in by_traj.items() if tid not in resolved_ids]
    curves = [
        [r["value_before"] for r in v] + [v[-1]["value_after"]] for v in unresolved if len(v) >= 2
    ]
    inverted = sum(1 for c in curves if None not in c and _inverted_u(c))
    lengths = [
        sum(1 for r in v if r["segment_id"] == s)
        for v in unresolved
        for s in {r["segment_id"] for r in v if r["segment_id"] is not None and r["mask"]}
    ]
    known = [(tokens.get((r["trajectory_id"], r["thread"], r["turn"])), r["mask"]) for r in rows]
    total_tokens = sum(t for t, _ in known if t is not None)
    return {
        "run_name": run_name,
        "trajectories": len(by_traj),
        "unresolved": len(unresolved),
        "inverted_u": inverted / len(curves) if curves else None,
        "median_segment_length": statistics.median(lengths) if lengths else None,
        "with_segment": (
            sum(1 for v in unresolved if any(r["mask"] for r in v)) / len(unresolved)
            if unresolved
            else None
        ),
        "tokens_kept": (
            sum(t for t, m in known if t is not None and m) / total_tokens if total_tokens else None
        ),
        "turns_kept": sum(1 for r in rows if r["mask"]) / len(rows),
    }


def _inverted_u(curve: Sequence[float]) -> bool:
    peak = max(range(len(curve)), key=lambda i: (curve[i], -i))
    return 0 < peak < len(curve) - 1 and curve[peak] > curve[0] and curve[peak] > curve[-1]
