"""Value models on real labelled SWE candidates, trained and evaluated through the CLI.

The candidates are SWE-agent runs of several models on the same SWE-bench-java tasks, read from
a `multi-swe-bench/experiments` snapshot (the `swe-bench/experiments` layout: per submission
`trajs/<instance>.traj` and `results/results.json`): every submission's verdict labels its own
trajectory, so a task has one candidate per submission. `--source DIR` adds folders already on
disk (any format `trajlake ingest` reads, labelled by the verifier outputs inside them, e.g.
`tests/data/swe_real`). The script:

1. extracts the trajectories and `results.json` files from the mirror with `git show` (the
   mirror has no work tree) into a temporary folder;
2. runs `trajlake ingest --labels` into a fresh lake and prints what it found: candidates,
   tasks, labelled candidates, candidates per task, rerankable tasks (both outcomes present);
3. for each recipe runs `trajlake train value` (split by task; `--test-frac` overrides the
   recipe's `data.test_frac`, as few tasks need a larger held-out share) and
   `trajlake eval value --output json`;
4. prints one table with 95% task-bootstrap intervals: each recipe, then the floors that
   `trajlake eval value` scores on the same held-out candidates (the sparse text floor and the
   "fewer steps" and "exit status" heuristics, see `trajlake.value.evaluate.FLOOR_DESCRIPTIONS`),
   and whether every row saw the same candidates.

    git clone --bare https://github.com/multi-swe-bench/experiments /tmp/experiments.git
    python benchmarks/bench_value_real.py [--mirror GIT_DIR] [--prefix evaluation/java/verified]
        [--source DIR]... [--recipe PATH]... [--test-frac 0.5] [--set KEY=VALUE]...
        [--n-boot 1000] [--workdir DIR]

Default recipes: models/baseline.yaml, models/sparse.yaml, models/hybrid.yaml, models/tiny.yaml
(those that exist).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
MIRROR_ENV = "TRAJLAKE_SWE_EXPERIMENTS"
"""Environment variable naming the git dir of a multi-swe-bench/experiments clone."""
DEFAULT_PREFIX = "evaluation/java/verified"
DEFAULT_RECIPES = ("baseline", "sparse", "hybrid", "tiny")

# Only what the ingest and the labels read: the harness logs are large and some of their blobs
# are missing from the snapshot.
_WANTED = ("/trajs/", "/results/results.json")


@dataclass
class Result:
    """One row of the comparison table."""

    name: str
    report: dict[str, Any]
    seconds: float | None = None


def _cli(*args: str) -> str:
    """Run the real `trajlake` CLI in-process; fail loudly with its output."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"trajlake {' '.join(args)} failed:\n{result.output}")
    return result.output


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True
    ).stdout


def extract_mirror(git_dir: Path, prefix: str, dest: Path) -> list[Path]:
    """Copy every submission's trajectories and results.json under `prefix` to `dest`.

    Returns the submission folders written. Blobs absent from the snapshot are reported and
    skipped: a missing trajectory is a missing candidate, not a reason to stop.
    """
    names = _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", prefix).decode().splitlines()
    runs: set[Path] = set()
    for name in names:
        if not any(part in name for part in _WANTED):
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.write_bytes(_git(git_dir, "show", f"HEAD:{name}"))
        except subprocess.CalledProcessError:
            print(f"  missing from the snapshot: {name}")
            continue
        runs.add(dest / name.split("/trajs/")[0].removesuffix("/results/results.json"))
    return sorted(runs)


def ingest(lake: Path, sources: list[Path]) -> None:
    """`trajlake ingest --labels` every source folder into one fresh lake."""
    args = ["ingest", "--lake", str(lake), "--create"]
    for source in sources:
        args += ["--labels", str(source)]
    print(_cli(*args, *map(str, sources)).rstrip())


def _dicts(lake: tl.Lake, query: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = lake.sql(query, params).to_arrow().to_pylist()
    return rows


def describe(lake: Path) -> dict[str, Any]:
    """What the lake holds: candidates, tasks, labels, candidates per task, rerankable tasks."""
    opened = tl.open_lake(str(lake))
    (totals,) = _dicts(
        opened,
        "SELECT count(*) AS candidates, count(DISTINCT task_id) AS tasks, "
        "count(resolved) AS labelled, count(*) FILTER (WHERE resolved) AS resolved "
        "FROM outcomes",
    )
    per_task = _dicts(
        opened,
        "WITH g AS (SELECT task_id, count(*) AS c, count(*) FILTER (WHERE resolved) AS r "
        "FROM outcomes WHERE resolved IS NOT NULL GROUP BY task_id) "
        "SELECT c AS candidates, count(*) AS tasks, "
        "count(*) FILTER (WHERE r > 0 AND r < c) AS rerankable FROM g GROUP BY c ORDER BY c",
    )
    by_harness = _dicts(
        opened,
        "SELECT t.harness, count(*) AS candidates, count(o.resolved) AS labelled "
        "FROM trajectories t JOIN outcomes o USING (trajectory_id) GROUP BY 1 ORDER BY 1",
    )
    return {"totals": totals, "per_task": per_task, "by_harness": by_harness}


def print_description(found: dict[str, Any]) -> None:
    t = found["totals"]
    print(
        f"found {t['candidates']} candidates on {t['tasks']} tasks; {t['labelled']} labelled "
        f"({t['resolved']} resolved)"
    )
    for row in found["by_harness"]:
        print(f"  {row['harness']}: {row['candidates']} candidates, {row['labelled']} labelled")
    print("labelled candidates per task:")
    for row in found["per_task"]:
        print(
            f"  {row['candidates']} candidates: {row['tasks']} tasks, "
            f"{row['rerankable']} rerankable"
        )
    rerankable = sum(r["rerankable"] for r in found["per_task"])
    multi = sum(r["tasks"] for r in found["per_task"] if r["candidates"] >= 2)
    print(f"tasks with >= 2 labelled candidates: {multi}; rerankable tasks: {rerankable}")


def train_and_eval(recipe: Path, lake: Path, out: Path, sets: list[str], n_boot: int) -> Result:
    """`trajlake train value` (with `--set` overrides) then `trajlake eval value --output json`."""
    overrides = [arg for pair in sets for arg in ("--set", pair)]
    start = time.perf_counter()
    _cli(
        "train",
        "value",
        "--lake",
        str(lake),
        "--config",
        str(recipe),
        "--out",
        str(out),
        "--no-register",
        *overrides,
    )
    seconds = time.perf_counter() - start
    report = json.loads(
        _cli(
            "eval",
            "value",
            str(out),
            "--lake",
            str(lake),
            "--n-boot",
            str(n_boot),
            "--output",
            "json",
        )
    )
    return Result(recipe.stem, report, seconds)


def report_floors(report: dict[str, Any]) -> list[Result]:
    """The floors `trajlake eval value` scored on the same held-out candidates as the model."""
    floors = report.get("floors")
    if not floors:
        raise SystemExit("this `trajlake eval value` reports no floors (sparse / heuristics)")
    return [Result(f"floor: {name}", floor) for name, floor in floors.items()]


def _cell(report: dict[str, Any], key: str) -> str:
    value, ci = report["headline"].get(key), report["ci"].get(key)
    if value is None:
        return "–"
    return f"{value:.3f}" if ci is None else f"{value:.3f} [{ci['low']:.2f}, {ci['high']:.2f}]"


def print_table(results: list[Result]) -> None:
    head = results[0].report
    print(
        f"\nheld-out: {head['n_examples']} candidates, {head['n_tasks']} tasks "
        f"({head['n_rerankable_tasks']} rerankable), positive rate {head['positive_rate']:.3f}; "
        f"95% task-bootstrap CIs ({head['ci']['n_boot']} resamples)"
    )
    columns = {
        "best_at_k": "Best@n",
        "random_at_k": "Random@n",
        "pass_at_k": "Pass@n",
        "gap_closed_rerankable": "gap closed (rerankable)",
        "auroc": "AUROC",
        "auroc_per_task": "AUROC per task",
        "ece": "ECE",
    }
    cols, names = list(columns), list(columns.values())
    print("| model | n | " + " | ".join(names) + " | train s |")
    print("| --- | ---: |" + " ---: |" * (len(names) + 1))
    for r in results:
        cells = [_cell(r.report, key) for key in cols]
        seconds = "–" if r.seconds is None else f"{r.seconds:.0f}"
        print(f"| {r.name} | {r.report['k_max']} | " + " | ".join(cells) + f" | {seconds} |")


def _same_split(results: list[Result]) -> bool:
    keys = {(r.report["n_examples"], r.report["n_tasks"]) for r in results}
    return len(keys) == 1


def default_recipes() -> list[Path]:
    return [p for name in DEFAULT_RECIPES if (p := ROOT / "models" / f"{name}.yaml").exists()]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--mirror",
        default=os.environ.get(MIRROR_ENV, ""),
        help="git dir of a clone of github.com/multi-swe-bench/experiments (e.g. made with "
        f"`git clone --bare`; default: ${MIRROR_ENV}; '' skips it)",
    )
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help="submissions folder in the mirror")
    p.add_argument(
        "--source",
        type=Path,
        action="append",
        default=[],
        help="extra folder of labelled trajectories (repeatable)",
    )
    p.add_argument(
        "--recipe",
        type=Path,
        action="append",
        default=None,
        help="recipe YAML, repeatable (default: baseline, sparse, hybrid, tiny)",
    )
    p.add_argument(
        "--test-frac",
        type=float,
        default=0.5,
        help="held-out share of tasks, overrides data.test_frac (<= 0: the recipe's)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recipe override for every recipe, e.g. data.split_seed=1 (repeatable)",
    )
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--workdir", type=Path, default=None, help="keep the lake and models here")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_value_real_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        sources = list(args.source)
        if args.mirror:
            if not Path(args.mirror).is_dir():
                raise SystemExit(f"no git dir at {args.mirror}: clone one, or pass --mirror ''")
            sources += extract_mirror(Path(args.mirror), args.prefix, work / "extracted")
        if not sources:
            raise SystemExit("no candidates: give --mirror or --source")
        lake = work / "lake"
        if lake.exists():
            shutil.rmtree(lake)
        ingest(lake, sources)
        print_description(describe(lake))
        sets = [f"data.test_frac={args.test_frac}"] if args.test_frac > 0 else []
        sets += args.set
        results: list[Result] = []
        floors: list[Result] = []
        for recipe in args.recipe or default_recipes():
            result = train_and_eval(recipe, lake, work / "models" / recipe.stem, sets, args.n_boot)
            results.append(result)
            # Every recipe shares the split, so the first report's floors serve the table.
            floors = floors or report_floors(result.report)
        print_table(results + floors)
        print(
            "same held-out counts (candidates, tasks) in every row:", _same_split(results + floors)
        )
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
