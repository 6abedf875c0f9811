"""Throughput of `--engine ray` against the single-process path, on the same input, as ratios.

Input (outside every timed region): a synthetic lake (`trajlake.synth`, `--tasks` × `--rollouts`
trajectories), the sparse text value model (`models/sparse.yaml`) trained on it, and credit's
prefix value model (JSON) fitted on its turns. Each workload runs on a fresh copy of the lake:
  - score:  `score_to_lake` vs `score_with_ray` with the sparse model;
  - credit (value-model): `run_credit` vs `credit_with_ray` with the prefix value model (one
    unit per trajectory);
  - credit (group): the same with `group` (no model; one unit per task).
Ray runs `--workers` CPU actors on a local cluster started before the timing (cluster start
excluded; actor start and model loading included: they are part of every job). Each number is
the best of `--repeats`. The script ends with one `RATIO bench_ray[<workload>] ray/local = …`
line per workload, trajectories/s over trajectories/s.

What bounds the measured ratio: on a machine of 2 cores shared with other work, 2 actors and
the driver compete for the same cores, and these models cost well under a millisecond per
trajectory, so Ray's per-job fixed cost (actor start, the model loaded per actor, the DuckDB
views built per actor) and per-batch cost dominate. The ratio measured here is a floor for
this machine, not a speed-up to expect from a cluster.

Projection to N GPUs (printed; the numbers in it are arguments, not measurements): a value
model of P parameters scoring trajectories of L tokens costs 2·P·L FLOPs per trajectory (a
forward pass); at a dense bf16 peak F and utilisation u, one GPU scores F·u / (2·P·L)
trajectories per second. The job's rate is then min(N · per-GPU rate, driver ceiling), where the
driver ceiling is the rows a commit holds divided by the measured time of one commit of that
many score rows (the driver commits while the actors work; reading is spread over the actors
and is not the bound). Defaults: P = 4e9 (a 4B value model), L = 8192, F = 989 TFLOP/s
(H100 SXM dense bf16), u = 0.4.

    python benchmarks/bench_ray.py [--tasks 100] [--rollouts 4] [--workers 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trajlake as tl
from trajlake.credit import load_turns, run_credit
from trajlake.credit.value_model import PrefixModelValues
from trajlake.distributed import (
    BatchDone,
    RayOptions,
    credit_with_ray,
    import_ray,
    score_with_ray,
)
from trajlake.records import rows_for_table
from trajlake.synth import SynthConfig, generate
from trajlake.value.artifacts import load_model
from trajlake.value.recipe import load_recipe
from trajlake.value.scoring import score_to_lake
from trajlake.value.train import train_value_model

MODELS = Path(__file__).resolve().parents[1] / "models"


def build_input(root: Path, tasks: int, rollouts: int) -> dict[str, Any]:
    lake = tl.open_lake(root / "lake", create=True)
    lake.write(
        generate(SynthConfig(seed=7, n_tasks=tasks, rollouts_per_task=rollouts)).trajectories
    )
    trained = train_value_model(lake, load_recipe(MODELS / "sparse.yaml"), out=root / "sparse")
    prefix = root / "prefix-value.json"
    PrefixModelValues().fit(load_turns(lake)).save(prefix)
    return {"lake": root / "lake", "sparse": str(trained.directory), "prefix": str(prefix)}


class Steady:
    """Batch arrival times on the driver: the rate after the first batch (actors started)."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, int]] = []

    def __call__(self, done: BatchDone) -> None:
        self.arrivals.append((time.perf_counter(), done.units))

    def rate(self) -> float:
        if len(self.arrivals) < 2:
            return float("nan")
        units = sum(u for _, u in self.arrivals[1:])
        return units / (self.arrivals[-1][0] - self.arrivals[0][0])


def timed(root: Path, source: Path, run: Callable[[tl.Lake], Any], repeats: int) -> float:
    """Best wall time of `run` on fresh copies of the lake."""
    best = float("inf")
    for i in range(repeats):
        copy = root / f"copy-{time.monotonic_ns()}-{i}"
        shutil.copytree(source, copy)
        lake = tl.open_lake(copy)
        start = time.perf_counter()
        run(lake)
        best = min(best, time.perf_counter() - start)
        lake.close()
        shutil.rmtree(copy)
    return best


def commit_seconds(root: Path, source: Path, rows: int, repeats: int = 5) -> float:
    """Median time of one driver commit of `rows` score rows (the driver's cost per window)."""
    copy = root / "commit-copy"
    shutil.copytree(source, copy)
    lake = tl.open_lake(copy)
    ids = [r[0] for r in lake.sql("SELECT trajectory_id FROM trajectories").rows()][:rows]
    times = []
    for i in range(repeats):
        now = dt.datetime.now(dt.UTC)
        records = [
            {"model_id": f"bench-{i}", "trajectory_id": tid, "turn": None, "score": 0.5,
             "source_snapshot": 1, "created_at": now, "attrs": {"calibrated": True}}
            for tid in ids
        ]  # fmt: skip
        start = time.perf_counter()
        lake.commit({"scores": rows_for_table("scores", records)}, operation="score")
        times.append(time.perf_counter() - start)
    lake.close()
    shutil.rmtree(copy)
    return statistics.median(times)


def projection(args: argparse.Namespace, window_rows: int, commit_s: float) -> list[str]:
    per_gpu = args.gpu_tflops * 1e12 * args.mfu / (2 * args.params * args.tokens)
    ceiling = window_rows / commit_s
    lines = [
        f"projection (assumed: {args.params:.0e} parameters, {args.tokens} tokens per trajectory, "
        f"{args.gpu_tflops:.0f} TFLOP/s peak, utilisation {args.mfu}):",
        f"  per GPU: {per_gpu:.2f} trajectories/s; driver ceiling: {window_rows} rows per commit "
        f"/ {commit_s * 1000:.1f} ms measured = {ceiling:.0f} trajectories/s",
    ]
    for n in (1, 8, 64, 512):
        rate = min(n * per_gpu, ceiling)
        bound = "GPUs" if n * per_gpu <= ceiling else "driver commits"
        lines.append(f"  {n:>4} GPUs: {rate:9.1f} trajectories/s (bound: {bound})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--commit-every", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--params", type=float, default=4e9)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--gpu-tflops", type=float, default=989.0)
    parser.add_argument("--mfu", type=float, default=0.4)
    args = parser.parse_args()
    ray = import_ray()
    options = RayOptions(
        num_workers=args.workers, batch_size=args.batch_size, commit_every=args.commit_every
    )
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        data = build_input(root, args.tasks, args.rollouts)
        n = args.tasks * args.rollouts
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        prefix = f"value-model:{data['prefix']}"
        steady = {name: Steady() for name in ("score", "credit-value-model", "credit-group")}
        workloads: dict[str, tuple[Callable[[tl.Lake], Any], Callable[[tl.Lake], Any]]] = {
            "score": (
                lambda lake: score_to_lake(lake, load_model(data["sparse"])),
                lambda lake: score_with_ray(
                    lake, data["sparse"], options=options, on_batch=steady["score"]
                ),
            ),
            "credit-value-model": (
                lambda lake: run_credit(lake, estimator=prefix),
                lambda lake: credit_with_ray(
                    lake, estimator=prefix, options=options, on_batch=steady["credit-value-model"]
                ),
            ),
            "credit-group": (
                lambda lake: run_credit(lake, estimator="group"),
                lambda lake: credit_with_ray(
                    lake, estimator="group", options=options, on_batch=steady["credit-group"]
                ),
            ),
        }
        print(f"{n} trajectories; Ray: {args.workers} CPU actors, batch {args.batch_size}")
        print(
            f"{'workload':<20} {'local traj/s':>13} {'ray traj/s':>11} {'ray/local':>10} "
            f"{'ray steady traj/s':>18}"
        )
        ratios = {}
        for name, (local, remote) in workloads.items():
            local_s = timed(root, data["lake"], local, args.repeats)
            steady[name].arrivals.clear()
            ray_s = timed(root, data["lake"], remote, 1)  # one run: `steady` records it
            rate = steady[name].rate()
            ray_s = min(ray_s, timed(root, data["lake"], remote, args.repeats - 1))
            ratios[name] = local_s / ray_s
            print(
                f"{name:<20} {n / local_s:>13.1f} {n / ray_s:>11.1f} {ratios[name]:>10.2f} "
                f"{rate:>18.1f}"
            )
        window = args.batch_size * args.commit_every
        commit_s = commit_seconds(root, data["lake"], min(window, n))
        ray.shutdown()
        for line in projection(args, min(window, n), commit_s):
            print(line)
        for name, ratio in ratios.items():
            print(f"RATIO bench_ray[{name}] ray/local = {ratio:.2f}")


if __name__ == "__main__":
    main()
