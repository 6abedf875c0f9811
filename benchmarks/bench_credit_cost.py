"""Cost of the cross-fitted sparse text value source (`crossfit:text`) as the lake grows.

Draws `trajlake.synth` rollouts of 40 turns (a policy that never submits, so every rollout
uses its whole budget), turns them into `TrajectoryTurns` and observations the way the `turns`
view and the source's observation query do, and times `CrossFitTextValues.values()` (5 folds:
featurising, fitting, out-of-fold prediction) at growing sizes. Training uses at most
`max_train` trajectories (default 5,000), so past that only featurising and prediction grow;
the extrapolation to 100,000 × 40 says which part it scales.

`--workers N` caps the featurising processes (`TRAJLAKE_CREDIT_WORKERS`; default: every usable
core). `--lake N` also times a whole `run_credit` on a real lake of N such trajectories (written
with `lake.write`): reading the turns and observations, values, rows and the commit. Its time
beyond `values()` at the same size grows linearly with the lake and is extrapolated as such.

Run: `python benchmarks/bench_credit_cost.py [--sizes 1000 2000 4000] [--target mc|td]
[--workers N] [--lake N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import trajlake as tl
from trajlake.credit import CrossFitTextValues, TrajectoryTurns, Turn, run_credit
from trajlake.credit._featurise_pool import pooled, shutdown_pool, usable_workers
from trajlake.credit._text_features import NgramHasher, Observation
from trajlake.credit.crossfit import TextFeaturiser
from trajlake.synth import OBSERVATIONS, PolicyParams, SynthConfig, generate

TURNS = 40


def never_submits() -> PolicyParams:
    """The default policy with submitting made (almost) impossible: 40-turn rollouts."""
    base = PolicyParams.default()
    return PolicyParams({o: (*base.logits[o][:4], -30.0) for o in OBSERVATIONS})


def as_turns(record: dict[str, Any], observations: dict) -> TrajectoryTurns:
    """One canonical trajectory as the lake would load it (action text = content + calls)."""
    tid = record["trajectory_id"]
    t = TrajectoryTurns(tid, record["task_id"], 1.0 if record["resolved"] else 0.0)
    messages = record["messages"]
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        u = len(t.turns)
        calls = m.get("tool_calls") or []
        text = "\n".join([m["content"], *(f"{c['name']}({c['arguments']})" for c in calls)])
        t.turns.append(Turn(tid, "main", u, text, tuple(c["name"] for c in calls), False, None))
        tool = messages[i + 1]
        failed = bool(tool.get("is_error")) or (tool.get("exit_code") or 0) != 0
        observations[(tid, "main", u)] = Observation(tool["content"], failed)
    return t


def records(n: int, seed: int) -> list[dict[str, Any]]:
    config = SynthConfig(seed=seed, n_tasks=max(n // 8, 1), rollouts_per_task=8, max_turns=TURNS)
    return generate(config, never_submits()).trajectories[:n]


def make(n: int, seed: int) -> tuple[list[TrajectoryTurns], dict]:
    observations: dict = {}
    return [as_turns(r, observations) for r in records(n, seed)], observations


def end_to_end(n: int, args: argparse.Namespace) -> float:
    """Seconds of `run_credit(crossfit:<target>)` on a fresh lake of `n` 40-turn trajectories."""
    root = Path(tempfile.mkdtemp(prefix="bench-credit-cost-"))
    try:
        lake = tl.open_lake(root / "lake", create=True)
        t0 = time.perf_counter()
        lake.write(records(n, args.seed))
        written = time.perf_counter() - t0
        estimator = "crossfit:text" if args.target == "mc" else "crossfit:text-td"
        t0 = time.perf_counter()
        report = run_credit(lake, estimator=estimator, max_train=args.max_train)
        wall = time.perf_counter() - t0
        print(
            f"run_credit {estimator} on a lake of {n} trajectories ({report.turns} turns, "
            f"written in {written:.1f} s): {wall:.1f} s wall, {report.rows_added} rows stored"
        )
        return wall
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--target", choices=["mc", "td"], default="mc")
    parser.add_argument("--max-train", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="featurising processes")
    parser.add_argument("--lake", type=int, default=None, help="also run_credit on N")
    args = parser.parse_args()
    if args.workers is not None:
        os.environ["TRAJLAKE_CREDIT_WORKERS"] = str(args.workers)
    workers = usable_workers()
    print(f"featurising processes: {workers}; load average {os.getloadavg()[0]:.1f}")
    rates: list[tuple[int, float, float, float]] = []
    for n in args.sizes:
        t0 = time.perf_counter()
        trajs, observations = make(n, args.seed)
        made = time.perf_counter() - t0
        turns = sum(len(t.turns) for t in trajs)
        source = CrossFitTextValues(
            args.target, observations=observations, max_train=args.max_train
        )
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        values = source.values(trajs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        assert len(values) == len(trajs)
        t0 = time.perf_counter()
        pooled(TextFeaturiser(source.n_buckets, TURNS, observations, NgramHasher())).design(trajs)
        featurise = time.perf_counter() - t0
        rates.append((n, wall, cpu, featurise))
        print(
            f"{n:>7} trajectories, {turns:>8} turns (generated in {made:.1f} s): "
            f"values() {wall:.1f} s wall, {cpu:.1f} s CPU → {n / wall:.0f} trajectories/s "
            f"({turns / wall:.0f} turns/s); featurising alone {featurise:.1f} s"
        )
    e2e = end_to_end(args.lake, args) if args.lake else None
    shutdown_pool()
    n, wall, cpu, featurise = rates[-1]
    # Featurising and predicting grow with the lake; fitting grows with the training rows
    # (at most `max_train` trajectories, and at most `iterations` L-BFGS steps per fit), so
    # its measured share is scaled to the cap. Prediction is a single pass per trajectory
    # and is counted with fitting (an over-estimate of the fixed part).
    per_traj = featurise / n
    fit = (wall - featurise) * max(args.max_train, n) / n
    total = per_traj * 100_000 + fit
    print(
        f"\nEXTRAPOLATION crossfit:{args.target} 100,000 × {TURNS} turns ≈ {total / 60:.1f} min "
        f"with {workers} featurising processes: featurising {per_traj * 100_000 / 60:.1f} min "
        f"({per_traj * 1000:.1f} ms per trajectory) + fitting/prediction {fit / 60:.1f} min "
        f"(measured {wall - featurise:.1f} s at {n}, scaled to {max(args.max_train, n)} "
        "training trajectories)"
    )
    same = [r for r in rates if r[0] == args.lake]
    if e2e is not None and same:
        # What run_credit adds to values() (reading turns and observations, building and
        # committing the rows) is per turn, so it is scaled linearly with the lake.
        extra = (e2e - same[0][1]) / args.lake * 100_000
        print(
            f"EXTRAPOLATION run_credit crossfit:{args.target} 100,000 × {TURNS} turns ≈ "
            f"{(total + extra) / 60:.1f} min: values() {total / 60:.1f} min + the rest of the "
            f"run {extra / 60:.1f} min ({e2e - same[0][1]:.1f} s beyond values() at {args.lake})"
        )


if __name__ == "__main__":
    main()
