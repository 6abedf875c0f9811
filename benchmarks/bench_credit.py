"""Credit quality on two synthetic environments, held-out tasks only, against the exact credit c*.

For each environment (`trajlake.synth`: one bug, locate → edit → test; `trajlake.synth_debug`:
several bugs, misleading visible tests, long exploration, reversible regressions) the script
generates rollouts with a fixed seed, ingests them into a fresh lake, splits the task ids with a
seed (printed) and scores every source on the held-out tasks only: the outcome broadcast floor
(each turn scored with its trajectory's outcome), then each `--estimator` at each `--lam`.
Sources fitted on data see only the train tasks (`value-model:builtin` is fitted on them);
every source is run on the held-out tasks' trajectories alone, so model-free sources
(prefix-MC, group) use only the held-out task's own rollouts. Intervals: 95% percentile
bootstrap over held-out tasks (`--bootstrap` resamples, seeded). The judge is not run (it
needs an LLM endpoint); any other name `trajlake credit --estimator` accepts can be listed.

Run: `python benchmarks/bench_credit.py [--env synth|debug|both] [--estimator NAME ...]`.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import trajlake as tl
from trajlake.credit import diagnostics, load_turns, run_credit
from trajlake.credit.evaluate import CreditEval, TaskSplit, evaluate_credit, load_truth, split_tasks
from trajlake.credit.value_model import PrefixModelValues

ENVS = ("synth", "debug")
DEFAULT_ESTIMATORS = ("outcome", "prefix-mc", "group:grpo", "group:rloo", "value-model:builtin")
HEADER = [
    "source",
    "signal",
    "pooled ρ [95% CI]",
    "interior ρ [95% CI]",
    "within-traj ρ (n/eligible)",
    "value ρ",
    "P",
    "R",
    "F1",
    "s",
]


@dataclass
class Env:
    """One environment's lake, truth and split."""

    name: str
    lake: tl.Lake
    truth: dict[str, dict[str, Any]]
    split: TaskSplit
    root: Path

    def where(self, tasks: tuple[str, ...]) -> str:
        return "task_id IN (" + ", ".join(f"'{t}'" for t in tasks) + ")"


def build_env(name: str, args: argparse.Namespace, root: Path) -> Env:
    """Generate, write and ingest one environment; split its tasks."""
    t0 = time.perf_counter()
    if name == "synth":
        from trajlake.synth import SynthConfig
        from trajlake.synth import generate as generate_synth

        batch: Any = generate_synth(
            SynthConfig(seed=args.seed, n_tasks=args.tasks, rollouts_per_task=args.rollouts)
        )
    else:
        from trajlake.synth_debug import DebugConfig
        from trajlake.synth_debug import generate as generate_debug

        batch = generate_debug(
            DebugConfig(seed=args.seed, n_tasks=args.tasks, rollouts_per_task=args.rollouts)
        )
    folder = root / name
    folder.mkdir()
    batch.write_jsonl(folder / "rollouts.jsonl")
    batch.write_truth(folder / "truth.jsonl")
    lake = tl.open_lake(folder / "lake", create=True)
    lake.ingest(folder / "rollouts.jsonl")
    truth = load_truth(folder / "truth.jsonl")
    split_seed = args.seed if args.split_seed is None else args.split_seed
    split = split_tasks(
        (t["task_id"] for t in truth.values()), test_fraction=args.test_fraction, seed=split_seed
    )
    held = [t for t in truth.values() if t["task_id"] in set(split.test)]
    n_turns = sum(len(t["credits"]) for t in held)
    productive = sum(c >= args.eps for t in held for c in t["credits"])
    digest = hashlib.sha256(",".join(split.test).encode()).hexdigest()[:12]
    print(
        f"\n## {name}: seed={args.seed}, {args.tasks} tasks × {args.rollouts} rollouts = "
        f"{len(truth)} trajectories, success rate {batch.success_rate:.3f}; "
        f"setup {time.perf_counter() - t0:.1f} s\n"
        f"{split.describe()}; held-out ids sha256[:12]={digest} (first: {split.test[0]}); "
        f"scored on {len(held)} held-out trajectories, {n_turns} turns, "
        f"{productive} productive (c* ≥ {args.eps})"
    )
    return Env(name, lake, truth, split, folder)


@dataclass
class Scored:
    """One row of an environment's table."""

    label: str
    signal: Literal["credit", "advantage", "broadcast"]
    ev: CreditEval
    seconds: float
    run_name: str


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _rho(x: float | None, low: float | None, high: float | None) -> str:
    return _f(x) if low is None or high is None else f"{_f(x)} [{low:.2f}, {high:.2f}]"


def table_row(s: Scored) -> list[str]:
    ev = s.ev
    return [
        s.label,
        s.signal,
        _rho(ev.pooled_spearman, ev.pooled_ci_low, ev.pooled_ci_high),
        _rho(ev.interior_spearman, ev.interior_ci_low, ev.interior_ci_high),
        f"{_f(ev.within_spearman)} ({ev.within_trajectories}/{ev.within_eligible})",
        _f(ev.value_spearman),
        _f(ev.precision),
        _f(ev.recall),
        _f(ev.f1),
        f"{s.seconds:.1f}",
    ]


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def _score(env: Env, run_name: str, signal: Any, args: argparse.Namespace) -> CreditEval:
    return evaluate_credit(
        env.lake,
        run_name,
        env.truth,
        eps=args.eps,
        signal=signal,
        tasks=env.split.test,
        bootstrap=args.bootstrap,
        bootstrap_seed=args.seed,
    )


def _resolve(env: Env, estimator: str) -> tuple[str, str, float]:
    """(estimator to run, row label, seconds spent fitting) — fitted sources see train tasks."""
    if estimator != "value-model:builtin":
        return estimator, estimator, 0.0
    t0 = time.perf_counter()
    path = env.root / "value_model_train.json"
    PrefixModelValues().fit(load_turns(env.lake, where=env.where(env.split.train))).save(path)
    return (
        f"value-model:{path}",
        "value-model:builtin (fit on train tasks)",
        (time.perf_counter() - t0),
    )


def score_env(env: Env, args: argparse.Namespace) -> list[Scored]:
    """Every row of one environment's table (held-out tasks only)."""
    held = env.where(env.split.test)
    t0 = time.perf_counter()
    base = run_credit(env.lake, estimator="outcome", eps=args.eps, where=held, name="broadcast")
    rows = [
        Scored(
            "outcome broadcast",
            "broadcast",
            _score(env, base.run_name, "broadcast", args),
            time.perf_counter() - t0,
            base.run_name,
        )
    ]
    for i, name in enumerate(args.estimator):
        estimator, label, fit_seconds = _resolve(env, name)
        for lam in args.lam:
            if estimator == "outcome" and lam:
                continue  # R − V(s_t) = 0 on every turn: the same all-zero signal as λ = 0
            t0 = time.perf_counter()
            report = run_credit(
                env.lake, estimator=estimator, lam=lam, eps=args.eps, where=held,
                name=f"bench-{i}-lam{lam:g}",
            )  # fmt: skip
            seconds = time.perf_counter() - t0 + fit_seconds
            signal = "advantage" if lam else "credit"
            ev = _score(env, report.run_name, signal, args)
            shown = label if not lam else f"{label}, GAE λ={lam:g}"
            rows.append(Scored(shown, signal, ev, seconds, report.run_name))
    return rows


def report_env(env: Env, rows: list[Scored]) -> None:
    print()
    print_table(HEADER, [table_row(r) for r in rows])
    print("\nOrchard diagnostics (held-out unresolved trajectories; rise mask on the TD credit):")
    for r in rows:
        if r.signal != "credit":  # the mask is the TD credit's: one line per stored source
            continue
        d = diagnostics(env.lake, r.run_name)
        print(
            f"  {r.label:<48} inverted_u={_f(d['inverted_u'])} "
            f"with_segment={_f(d['with_segment'])} "
            f"median_segment={d['median_segment_length']} turns_kept={_f(d['turns_kept'])}"
        )
    floor = rows[0].ev
    best = max(rows[1:], key=lambda r: r.ev.pooled_spearman or -1.0, default=None)
    if best is None or best.ev.pooled_spearman is None or floor.pooled_spearman is None:
        print(f"RATIO bench_credit[{env.name}] best pooled ρ − broadcast pooled ρ = undefined")
        return
    # A difference, not a quotient: the broadcast floor's ρ can be near 0 (or negative).
    gap = best.ev.pooled_spearman - floor.pooled_spearman
    print(
        f"RATIO bench_credit[{env.name}] best pooled ρ − broadcast pooled ρ = {gap:+.3f} "
        f"(best: {best.label}, "
        f"{_rho(best.ev.pooled_spearman, best.ev.pooled_ci_low, best.ev.pooled_ci_high)} vs "
        f"{_rho(floor.pooled_spearman, floor.pooled_ci_low, floor.pooled_ci_high)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=[*ENVS, "both"], default="both")
    parser.add_argument("--tasks", type=int, default=200, help="Tasks per environment.")
    parser.add_argument("--rollouts", type=int, default=8, help="Rollouts per task.")
    parser.add_argument("--seed", type=int, default=7, help="Generation and bootstrap seed.")
    parser.add_argument(
        "--split-seed", type=int, default=None, help="Task split (default: --seed)."
    )
    parser.add_argument("--test-fraction", type=float, default=0.5)
    parser.add_argument(
        "--estimator",
        action="append",
        default=None,
        help="A value source as `trajlake credit --estimator` names it (repeatable; default: "
        + ", ".join(DEFAULT_ESTIMATORS)
        + "). value-model:builtin is fitted on the train tasks.",
    )
    parser.add_argument(
        "--lam", type=float, action="append", default=None, help="GAE λ (repeatable; default 0 1)."
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="Task resamples for CIs.")
    parser.add_argument("--eps", type=float, default=0.05)
    args = parser.parse_args()
    args.estimator = args.estimator or list(DEFAULT_ESTIMATORS)
    args.lam = args.lam or [0.0, 1.0]

    root = Path(tempfile.mkdtemp(prefix="bench_credit_"))
    start = time.perf_counter()
    try:
        for name in ENVS if args.env == "both" else (args.env,):
            env = build_env(name, args, root)
            report_env(env, score_env(env, args))
        print(f"\ntotal {time.perf_counter() - start:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
