"""The generation loop's report: what each step produced, and the success rates read back from
the lake with SQL (the queries are part of the report, so every number can be checked)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajlake.api import Lake
    from trajlake.lake import SnapshotRef

_OUTCOMES = "outcomes o JOIN trajectories t USING (trajectory_id)"
_SELECTED = "json_extract(t.attrs, '$.best_of_n.selected')::BOOLEAN"

SUCCESS_SQL: dict[str, str] = {
    "per_generation": (
        "SELECT t.generation, any_value(t.policy_model) AS policy_model, "
        "count(*) AS trajectories, count(DISTINCT t.task_id) AS tasks, "
        "sum(o.resolved::INT)::BIGINT AS resolved, avg(o.resolved::INT)::DOUBLE AS success_rate "
        f"FROM {_OUTCOMES} GROUP BY t.generation ORDER BY t.generation"
    ),
    "best_of_n": (
        "SELECT count(*) AS tasks, avg(o.resolved::INT)::DOUBLE AS success_rate "
        f"FROM {_OUTCOMES} WHERE t.generation = 1 AND {_SELECTED}"
    ),
    "random_of_n": (
        "SELECT avg(p)::DOUBLE AS success_rate FROM (SELECT t.task_id, avg(o.resolved::INT) AS p "
        f"FROM {_OUTCOMES} WHERE t.generation = 1 GROUP BY t.task_id)"
    ),
    "pass_at_n": (
        "SELECT avg(s::INT)::DOUBLE AS success_rate FROM (SELECT t.task_id, bool_or(o.resolved) "
        f"AS s FROM {_OUTCOMES} WHERE t.generation = 1 GROUP BY t.task_id)"
    ),
}
"""The SQL behind every success rate of the report (`outcomes` is the labelled outcome).

`best_of_n` reads the selection the value model made at inference, stored on each gen-1
rollout as `attrs.best_of_n`; `random_of_n` is the expected success of a uniformly random pick
(the mean of per-task success rates), `pass_at_n` the oracle (a task counts if any candidate
succeeded)."""


@dataclass(frozen=True)
class PolicyResult:
    """One behaviour-cloned policy (or the gen-0 policy) and its exact expected success."""

    name: str
    """Row label, e.g. 'credit-weighted: rise (prefix-mc)'."""
    variant: str
    """Short key, also the export's folder name ('gen-0' for the untrained policy)."""
    training_data: str
    """What it was fitted on, in words."""
    credit_run: str | None
    """The credit run weighting the exported turns (None: all turns weight 1, or no training)."""
    export: str | None
    """The SFT export folder the examples were read back from."""
    examples: int
    """(observation, action) examples with a positive weight."""
    weight: float
    """Sum of the example weights."""
    exact_success_train: float
    """Expected success on gen-0's tasks (in sample), exact given the drawn rollout skills."""
    exact_success_heldout: float
    """Expected success on the held-out tasks gen-1 runs on."""


@dataclass
class LoopReport:
    """Everything one run of the generation loop did and measured (JSON-able via `to_dict`)."""

    lake: str
    out: str
    seed: int
    quick: bool
    sizes: dict[str, int | None]
    steps: list[dict[str, Any]] = field(default_factory=list)
    """One entry per step: name, seconds and what it did (counts, snapshots, names)."""
    generations: list[dict[str, Any]] = field(default_factory=list)
    """Per generation, from SQL over `outcomes`: policy, trajectories, tasks, success rate."""
    tags: dict[str, int] = field(default_factory=dict)
    """Tag name → snapshot id."""
    credit_runs: list[dict[str, Any]] = field(default_factory=list)
    policies: list[PolicyResult] = field(default_factory=list)
    gen1_policy: dict[str, Any] = field(default_factory=dict)
    """The policy gen-1 runs: its name, registered model id and the run it was trained on."""
    value_model: dict[str, Any] = field(default_factory=dict)
    """Model id, directory, training tag, held-out metrics on gen-0's test tasks and on gen-1."""
    best_of_n: dict[str, Any] = field(default_factory=dict)
    """Gen-1 on held-out tasks: N, tasks, success of the value model's pick, of a random pick
    and of the oracle (all from SQL), and the evaluation report's Best@N for comparison."""
    lineage: dict[str, Any] = field(default_factory=dict)
    """The `attrs.lineage` gen-1 rollouts carry."""
    sql: dict[str, str] = field(default_factory=lambda: dict(SUCCESS_SQL))
    plots: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self), default=str))
        return data


def success_rates(lake: Lake, *, at: SnapshotRef = None) -> dict[str, Any]:
    """Success per generation and per gen-1 method, read with `SUCCESS_SQL` at `at`."""
    with lake.query(at) as session:
        per_gen = session.sql(SUCCESS_SQL["per_generation"]).to_dicts()
        best = session.sql(SUCCESS_SQL["best_of_n"]).to_dicts()[0]
        rand = session.sql(SUCCESS_SQL["random_of_n"]).to_dicts()[0]
        oracle = session.sql(SUCCESS_SQL["pass_at_n"]).to_dicts()[0]
    return {
        "generations": per_gen,
        "best_of_n": best["success_rate"],
        "best_of_n_tasks": best["tasks"],
        "random_of_n": rand["success_rate"],
        "pass_at_n": oracle["success_rate"],
    }


def fill_from_lake(lake: Lake, report: LoopReport, *, at: SnapshotRef = "gen-1") -> None:
    """Set the report's tags, per-generation success and best-of-N numbers from SQL at `at`."""
    rates = success_rates(lake, at=at)
    report.tags = {t.name: t.snapshot_id for t in lake.tags()}
    expected = {0: report.policies[0].exact_success_train if report.policies else None}
    chosen = report.gen1_policy.get("variant")
    for policy in report.policies:
        if policy.variant == chosen:
            expected[1] = policy.exact_success_heldout
    for row in rates["generations"]:
        row["tag"] = f"gen-{row['generation']}"
        row["expected_success"] = expected.get(row["generation"])
    report.generations = rates["generations"]
    gen1 = next((g for g in report.generations if g["generation"] == 1), None)
    evaluated = report.value_model.get("gen1", {})
    report.best_of_n = {
        "n": report.sizes["candidates"],
        "tasks": rates["best_of_n_tasks"],
        "sampled": None if gen1 is None else gen1["success_rate"],
        "selected": rates["best_of_n"],
        "random": rates["random_of_n"],
        "pass": rates["pass_at_n"],
        "eval_best_at_n": evaluated.get("best_at_n"),
        "eval_random_at_n": evaluated.get("random_at_n"),
        "eval_pass_at_n": evaluated.get("pass_at_n"),
        "gap_closed": evaluated.get("gap_closed"),
        "auroc": evaluated.get("auroc"),
    }


CURVE_RUNS = {
    "prefix-mc": "prefix-mc-rise",
    "value-model:builtin": "value-model-rise",
    "crossfit:text-td": "crossfit-td-rise",
}
"""Credit runs whose values the value-curve plot shows, by legend label."""


def sample_curves(
    lake: Lake, truth: Sequence[Mapping[str, Any]], *, per_outcome: int = 2, min_turns: int = 4
) -> list[dict[str, Any]]:
    """Value curves of a few gen-0 trajectories (the first `per_outcome` resolved and failed
    ones with at least `min_turns` turns): the stored credit runs' V(s_0) … V(s_T) and the
    environment's true V*."""
    picked: list[Mapping[str, Any]] = []
    for success in (True, False):
        rows = [t for t in truth if t["success"] is success and len(t["actions"]) >= min_turns]
        picked += rows[:per_outcome]
    if not picked:
        return []
    values_rows = lake.sql(
        "SELECT run_name, trajectory_id, value_before, value_after FROM credits "
        "WHERE run_name IN (SELECT unnest($runs::VARCHAR[])) "
        "AND trajectory_id IN (SELECT unnest($ids::VARCHAR[])) AND thread = 'main' "
        "ORDER BY run_name, trajectory_id, turn",
        {"runs": list(CURVE_RUNS.values()), "ids": [str(t["trajectory_id"]) for t in picked]},
    ).rows()
    stored: dict[tuple[str, str], list[float]] = {}
    for run, tid, before, after in values_rows:
        values = stored.setdefault((run, tid), [])
        values[-1:] = [before, after]  # V(s_t+1) of turn t is V(s_t+1) before turn t + 1
    curves = []
    for t in picked:
        tid = str(t["trajectory_id"])
        series = {label: stored.get((run, tid), []) for label, run in CURVE_RUNS.items()}
        curves.append(
            {
                "trajectory_id": tid,
                "resolved": bool(t["success"]),
                "series": {**series, "true V*": list(t["values"])},
            }
        )
    return curves
