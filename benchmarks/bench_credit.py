"""Credit quality on the synthetic environment: every value source vs the exact credit c*.

Generates `trajlake.synth` rollouts (fixed seed) with their ground truth, writes JSONL + truth,
ingests into a fresh lake, runs `run_credit` per value source and scores each run with
`evaluate_credit`. The judge is not run (it needs an LLM endpoint). The built-in value model is
scored in-sample (fitted on every rollout it values) and out-of-sample (fitted on the first half
of the tasks, scored on the second half; the other sources are scored on that half too).

Run: `python benchmarks/bench_credit.py [--tasks 200 --rollouts 8 --seed 7]`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trajlake as tl
from trajlake.credit import diagnostics, load_turns, run_credit
from trajlake.credit.evaluate import CreditEval, evaluate_credit, load_truth
from trajlake.credit.value_model import PrefixModelValues
from trajlake.synth import SynthConfig, generate

EPS = 0.05


@dataclass
class Case:
    """One credit run to make and score."""

    label: str
    estimator: str
    lam: float = 0.0
    source: dict[str, Any] = field(default_factory=dict)
    where: str | None = None
    split: Literal["all", "test"] = "all"
    """Truth to score on: every rollout, or only the held-out test tasks."""


def _in(ids: list[str]) -> str:
    return "task_id IN (" + ", ".join(f"'{i}'" for i in ids) + ")"


def row(case: Case, ev: CreditEval, seconds: float) -> list[str]:
    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    est = "TD λ=0" if case.lam == 0 else f"GAE λ={case.lam:g} (adv.)"
    return [
        case.label,
        est,
        case.split,
        f(ev.pooled_spearman),
        f(ev.interior_spearman),
        f"{f(ev.within_spearman)} ({ev.within_trajectories}/{ev.within_eligible})",
        f(ev.value_spearman),
        f(ev.precision),
        f(ev.recall),
        f(ev.f1),
        f"{seconds:.2f}",
    ]


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench_credit_"))
    try:
        t0 = time.perf_counter()
        batch = generate(
            SynthConfig(seed=args.seed, n_tasks=args.tasks, rollouts_per_task=args.rollouts)
        )
        batch.write_jsonl(root / "rollouts.jsonl")
        batch.write_truth(root / "truth.jsonl")
        lake = tl.open_lake(root / "lake", create=True)
        lake.ingest(root / "rollouts.jsonl")
        truth = load_truth(root / "truth.jsonl")
        n_turns = sum(len(t["credits"]) for t in truth.values())
        productive = sum(c >= EPS for t in truth.values() for c in t["credits"])
        print(
            f"synth seed={args.seed}: {args.tasks} tasks × {args.rollouts} rollouts = "
            f"{len(truth)} trajectories, {n_turns} turns, success rate "
            f"{batch.success_rate:.3f}, {productive} productive turns (c* ≥ {EPS}); "
            f"setup {time.perf_counter() - t0:.1f} s"
        )

        task_ids = sorted({t["task_id"] for t in truth.values()})
        train, test = task_ids[: len(task_ids) // 2], task_ids[len(task_ids) // 2 :]
        test_truth = {k: v for k, v in truth.items() if v["task_id"] in set(test)}
        model_path = root / "value_model.json"
        t0 = time.perf_counter()
        PrefixModelValues().fit(load_turns(lake, where=_in(train))).save(model_path)
        fit_seconds = time.perf_counter() - t0

        cases = [
            Case("outcome", "outcome"),
            Case("prefix-mc (min_visits=2)", "prefix-mc"),
            Case("prefix-mc (min_visits=4)", "prefix-mc", source={"min_visits": 4}),
            Case("group:grpo", "group:grpo"),
            Case("group:rloo", "group:rloo"),
            Case("group:rloo", "group:rloo", lam=1.0),
            Case("value-model:builtin (in-sample)", "value-model:builtin"),
            Case("prefix-mc (min_visits=2)", "prefix-mc", lam=1.0),
            Case("outcome", "outcome", split="test"),
            Case("prefix-mc (min_visits=2)", "prefix-mc", split="test"),
            Case("value-model:builtin (in-sample)", "value-model:builtin", split="test"),
            Case(
                "value-model (fit on train tasks)",
                f"value-model:{model_path}",
                where=_in(test),
                split="test",
            ),
        ]
        header = [
            "source",
            "estimator",
            "scored on",
            "pooled ρ",
            "ρ w/o last turn",
            "within-traj ρ (n/eligible)",
            "value ρ",
            "precision",
            "recall",
            "F1",
            "seconds",
        ]
        rows: list[list[str]] = []
        results: list[tuple[Case, CreditEval, str]] = []
        stored: dict[tuple[str, float, str], tuple[str, float]] = {}
        for i, case in enumerate(cases):
            key = (case.estimator, case.lam, repr(case.source))
            if key in stored:  # the same run scored on another split: no re-run
                run_name, seconds = stored[key]
            else:
                t0 = time.perf_counter()
                report = run_credit(
                    lake,
                    estimator=case.estimator,
                    lam=case.lam,
                    eps=EPS,
                    where=case.where,
                    name=f"bench-{i}",
                    **case.source,
                )
                seconds = time.perf_counter() - t0
                if case.estimator.startswith("value-model:/"):
                    seconds += fit_seconds
                run_name = report.run_name
                stored[key] = (run_name, seconds)
            signal: Literal["credit", "advantage"] = "advantage" if case.lam else "credit"
            ev = evaluate_credit(
                lake,
                run_name,
                truth if case.split == "all" else test_truth,
                eps=EPS,
                signal=signal,
            )
            rows.append(row(case, ev, seconds))
            results.append((case, ev, run_name))
        print()
        print_table(header, rows)

        print("\nOrchard diagnostics (unresolved trajectories; rise mask, eps = 0.05):")
        seen: set[str] = set()
        for case, _ev, run_name in results:
            if run_name in seen:
                continue
            seen.add(run_name)
            d = diagnostics(lake, run_name)
            print(
                f"  {case.label:<34} λ={case.lam:g}: inverted_u={_f(d['inverted_u'])} "
                f"with_segment={_f(d['with_segment'])} "
                f"median_segment_length={d['median_segment_length']} "
                f"turns_kept={_f(d['turns_kept'])} tokens_kept={_f(d['tokens_kept'])}"
            )

        base = next(ev for c, ev, _ in results if c.estimator == "outcome" and c.split == "all")
        best_case, best = max(
            ((c, ev) for c, ev, _ in results if c.split == "all" and c.estimator != "outcome"),
            key=lambda ce: ce[1].f1,
        )
        print(
            f"\nbest non-judge source on all rollouts: {best_case.label}, "
            f"{'TD' if not best_case.lam else f'GAE λ={best_case.lam:g}'}, F1 {best.f1:.3f}"
        )
        if base.f1 > 0:
            print(f"RATIO bench_credit best-non-judge F1 / outcome F1 = {best.f1 / base.f1:.2f}")
        else:
            # Outcome broadcast gives V(s_t) = R for every t, so every TD credit is 0 < eps:
            # it never predicts a productive turn and its F1 is 0; a ratio is undefined.
            print(
                "RATIO bench_credit best-non-judge F1 / outcome F1 = undefined (outcome F1 = 0: "
                "its credits are all 0); "
                f"absolute F1 difference = {best.f1 - base.f1:.3f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
