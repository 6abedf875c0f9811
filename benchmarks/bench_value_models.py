"""Value models on two synthetic environments, trained and evaluated through the CLI.

For each environment (`trajlake.synth`: one bug, locate → edit → test; `trajlake.synth_debug`:
several bugs, misleading visible tests, long exploration) the script generates rollouts with a
fixed seed, ingests them into a fresh lake, tags `gen-0`, runs `trajlake train value` for each
recipe and prints the held-out comparison (Best@n, Random@n, Pass@n, gap closed, AUROC, ECE)
with 95% task-bootstrap intervals, wall time per model, and each model against the floor:

- "gap ≥ 0.6": the model's gap closed at n (all held-out tasks) is at least 0.6;
- "beats the floor": the paired task bootstrap of Best@n(model) − Best@n(floor) on the same
  held-out candidates (`trajlake.value.metrics.paired_best_at_k_difference`) has its whole 95%
  interval above 0. The unpaired reading (model Best@n above the floor's own interval) is
  printed beside it for comparison with older tables.

The floors `trajlake eval value` reports beside the floor model (the sparse text floor, the
"fewer steps" and "exit status" heuristics) are added to the table as `floor: …` rows.
Every recipe splits tasks with its `data.split_seed` / `test_frac`; the script checks that all
models were scored on the same held-out tasks (and says so) before comparing them.

    python benchmarks/bench_value_models.py [--env synth|debug|both] [--tasks 120]
        [--rollouts 8] [--seed 0] [--recipe NAME=PATH[:k=v,...]]... [--floor NAME]
        [--workdir DIR]

Default recipes: baseline.yaml, sparse.yaml, hybrid.yaml, tiny.yaml, tiny-compact.yaml (those of
them that exist under models/). `--workdir` keeps lakes and models between runs and reuses a
trained model when its recipe file, overrides and data knobs are unchanged (the line says
"reused", when it was trained, and whether the library code has changed since). With
`--input PATH...` the same runs use real rollouts instead (any format `trajlake ingest` reads,
with outcomes in the files or attached with `--labels`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.value.artifacts import load_model
from trajlake.value.evaluate import select_examples
from trajlake.value.metrics import PairedDifference, best_at_k, paired_best_at_k_difference
from trajlake.value.report import comparison_table

MODELS = Path(__file__).resolve().parents[1] / "models"
PACKAGE = Path(tl.__file__).resolve().parent
ENVS = ("synth", "debug")
DEFAULT_RECIPES = (
    ("baseline", "baseline.yaml"),
    ("sparse", "sparse.yaml"),
    ("hybrid", "hybrid.yaml"),
    ("tiny", "tiny.yaml"),
    ("tiny-compact", "tiny-compact.yaml"),
)
GAP_TARGET = 0.6


@dataclass(frozen=True)
class Run:
    """One model to train: a row label, a recipe file and `--set` overrides."""

    name: str
    recipe: Path
    overrides: tuple[str, ...]

    def fingerprint(self, data: dict[str, Any]) -> str:
        """What a trained model depends on: recipe bytes, overrides and the data knobs."""
        payload = json.dumps(
            {"recipe": self.recipe.read_text(), "overrides": self.overrides, "data": data},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class Result:
    """A trained model's report and its scores on the held-out candidates."""

    run: Run
    report: dict[str, Any]
    seconds: float
    how: str  # trained now, or reused (when, on which library code)
    trajectory_ids: list[str]
    task_ids: list[str]
    labels: np.ndarray
    scores: np.ndarray


def parse_recipe(spec: str) -> Run:
    """`NAME=PATH[:k=v,...]` (a leading `--set ` in the overrides is accepted) → Run."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise SystemExit(f"--recipe wants NAME=PATH[:k=v,...], got {spec!r}")
    path, _, sets = rest.partition(":")
    sets = sets.removeprefix("--set").strip()
    recipe = Path(path) if Path(path).is_file() else MODELS / path
    if not recipe.is_file():
        raise SystemExit(f"--recipe {spec!r}: no recipe file {path}")
    return Run(name, recipe, tuple(s.strip() for s in sets.split(",") if s.strip()))


def default_runs() -> list[Run]:
    return [Run(n, MODELS / f, ()) for n, f in DEFAULT_RECIPES if (MODELS / f).is_file()]


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"trajlake {' '.join(args)} failed:\n{result.output}")
    return result.output


def _generate(env: str, args: argparse.Namespace) -> Any:
    if env == "synth":
        from trajlake.synth import SynthConfig
        from trajlake.synth import generate as generate_synth

        return generate_synth(
            SynthConfig(seed=args.seed, n_tasks=args.tasks, rollouts_per_task=args.rollouts)
        )
    from trajlake.synth_debug import DebugConfig
    from trajlake.synth_debug import generate as generate_debug

    return generate_debug(
        DebugConfig(seed=args.seed, n_tasks=args.tasks, rollouts_per_task=args.rollouts)
    )


def build_lake(env: str, args: argparse.Namespace, folder: Path) -> tuple[str, dict[str, Any]]:
    """Generate (or read `--input`), ingest and tag `gen-0`; reuse a matching lake in `folder`."""
    data = {"env": env, "tasks": args.tasks, "rollouts": args.rollouts, "seed": args.seed}
    if args.input:
        data = {"env": "input", "input": args.input, "labels": args.labels}
    lake, meta = folder / "lake", folder / "lake.json"
    if meta.is_file() and json.loads(meta.read_text())["data"] == data:
        summary = json.loads(meta.read_text())["summary"]
        print(f"{summary} (lake reused from {folder})")
        return str(lake), data
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    _cli("init", "--lake", str(lake))
    if args.input:
        labels = ["--labels", args.labels] if args.labels else []
        summary = _cli("ingest", *args.input, "--lake", str(lake), *labels).strip()
    else:
        batch = _generate(env, args)
        batch.write_jsonl(folder / "rollouts.jsonl")
        _cli("ingest", str(folder / "rollouts.jsonl"), "--lake", str(lake))
        summary = (
            f"{env} seed={args.seed}: {args.tasks} tasks × {args.rollouts} rollouts, "
            f"success rate {batch.success_rate:.3f}"
        )
    _cli("tag", "gen-0", "--lake", str(lake))
    meta.write_text(json.dumps({"data": data, "summary": summary}))
    print(summary)
    return str(lake), data


def library_digest() -> str:
    """A hash of the library's source: a reused model says whether it was trained on this code."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _reuse_note(stamp: dict[str, Any]) -> str:
    if "library" not in stamp:
        return "reused (training time and library code not recorded), trained in"
    same = stamp["library"] == library_digest()
    code = "same library code" if same else "library code changed since"
    return f"reused, trained at {stamp['trained_at']} ({code}) in"


def train(run: Run, lake: str, data: dict[str, Any], out: Path) -> tuple[float, str]:
    """Train through `trajlake train value` unless `out` holds this exact run already (same
    recipe file, overrides and data); returns the training seconds and how the model came."""
    stamp = out / "bench_run.json"
    fingerprint = run.fingerprint(data)
    if stamp.is_file() and json.loads(stamp.read_text())["fingerprint"] == fingerprint:
        previous = json.loads(stamp.read_text())
        return float(previous["seconds"]), _reuse_note(previous)
    shutil.rmtree(out, ignore_errors=True)
    sets = [a for s in run.overrides for a in ("--set", s)]
    started = time.perf_counter()
    _cli(
        "train", "value", "--lake", lake, "--config", str(run.recipe), "--at", "gen-0",
        "--out", str(out), "--no-register", "-o", "json", *sets,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    trained_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    stamp.write_text(
        json.dumps(
            {
                "fingerprint": fingerprint,
                "seconds": seconds,
                "trained_at": trained_at,
                "library": library_digest(),
            }
        )
    )
    return seconds, "trained and evaluated in"


def held_out_scores(model_dir: Path, lake: str) -> tuple[list[Any], np.ndarray]:
    """The model's held-out examples (its card's split) and its scores on them."""
    store = tl.open_lake(lake)
    model = load_model(model_dir)
    snapshot = store.snapshot("gen-0").snapshot_id
    examples, _ = select_examples(store, model, at=snapshot, split="test")
    return examples, model.score_lake(store, snapshot, [e.trajectory_id for e in examples])


def run_model(run: Run, lake: str, data: dict[str, Any], folder: Path) -> Result:
    out = folder / "models" / run.name
    seconds, how = train(run, lake, data, out)
    examples, scores = held_out_scores(out, lake)
    # Align every model's candidates by trajectory id, so paired comparisons pair candidates.
    order = np.argsort([e.trajectory_id for e in examples], kind="stable")
    ordered = [examples[i] for i in order]
    result = Result(
        run=run,
        report=json.loads((out / "eval" / "eval.json").read_text()),
        seconds=seconds,
        how=how,
        trajectory_ids=[e.trajectory_id for e in ordered],
        task_ids=[e.task_id for e in ordered],
        labels=np.array([e.label for e in ordered]),
        scores=np.asarray(scores)[order],
    )
    check_rescored(result)
    return result


def check_rescored(r: Result) -> None:
    """The paired comparisons use scores computed here; they should give the training report's
    Best@n (else the model, the split or the serializer changed since it was trained)."""
    k = r.report["k_max"]
    here = best_at_k(r.task_ids, r.scores, r.labels, k)
    reported = r.report["headline"]["best_at_k"]
    if abs(here - reported) > 1e-9:
        print(
            f"WARNING {r.run.name}: Best@{k} of the rescored held-out candidates is {here:.4f}, "
            f"the training report says {reported:.4f}; the paired lines use the rescored ones"
        )


def _ci(report: dict[str, Any], key: str) -> str:
    ci = report["ci"].get(key)
    if not ci or ci.get("low") is None:
        return "n/a"
    return f"{ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def _paired(model: Result, floor: Result, k: int, n_boot: int, seed: int) -> PairedDifference:
    return paired_best_at_k_difference(
        model.task_ids, model.scores, floor.scores, model.labels, k, n_boot=n_boot, seed=seed
    )


def compare(
    results: list[Result], floor_name: str, n_boot: int, seed: int
) -> dict[str, PairedDifference]:
    """One line per model: gap ≥ 0.6?, and Best@n against the floor (paired and unpaired)."""
    diffs: dict[str, PairedDifference] = {}
    floor = next((r for r in results if r.run.name == floor_name), None)
    ids = {tuple(r.trajectory_ids) for r in results}
    if len(ids) != 1:
        print("held-out candidates differ between models: no paired comparison (check splits)")
        floor = None
    first = results[0]
    digest = hashlib.sha256(",".join(sorted(set(first.task_ids))).encode()).hexdigest()[:12]
    print(
        f"held-out: {len(set(first.task_ids))} tasks, {len(first.task_ids)} candidates, the same "
        f"for every model: {len(ids) == 1} (task ids sha256[:12]={digest})"
    )
    for r in results:
        head, k = r.report["headline"], r.report["k_max"]
        gap = head["gap_closed"]
        line = (
            f"  {r.run.name}: gap closed @{k} {_ci(r.report, 'gap_closed')} → "
            f"{'≥' if gap is not None and gap >= GAP_TARGET else '<'} {GAP_TARGET}"
        )
        if floor is not None and r is not floor:
            d = diffs[r.run.name] = _paired(r, floor, k, n_boot, seed)
            floor_high = floor.report["ci"]["best_at_k"]["high"]
            line += (
                f"; Best@{k} − {floor.run.name} (paired) {d.point:+.3f} "
                f"[{d.low:+.3f}, {d.high:+.3f}], wins/losses {d.wins}/{d.losses} of "
                f"{d.n_tasks} tasks → {'beats' if d.excludes_zero else 'does not beat'} the "
                f"floor; unpaired: Best@{k} {head['best_at_k']:.3f} vs floor's upper bound "
                f"{floor_high:.3f}"
            )
        print(line)
    return diffs


def ratio_line(
    env: str, results: list[Result], floor: str, diffs: dict[str, PairedDifference]
) -> str:
    """The greppable summary: the best non-floor model by gap closed, and its paired margin."""
    models = [r for r in results if r.run.name != floor] or results
    best = max(models, key=lambda r: r.report["headline"]["gap_closed"] or -1.0)
    gap = best.report["headline"]["gap_closed"]
    d = diffs.get(best.run.name)
    margin = "n/a" if d is None else f"{d.point:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
    shown = "undefined" if gap is None else f"{gap:.3f}"
    return (
        f"RATIO bench_value_models[{env}] best gap closed = {shown} ({best.run.name}); "
        f"Best@n − {floor} (paired) = {margin}"
    )


def eval_floors(result: Result, lake: str, folder: Path) -> dict[str, dict[str, Any]]:
    """The floors `trajlake eval value` reports beside a model (sparse text floor fitted on the
    card's training split, fewer-steps, exit-status), each a report on the same held-out tasks."""
    out = folder / "floors" / result.run.name
    shutil.rmtree(out, ignore_errors=True)
    model_dir = folder / "models" / result.run.name
    _cli("eval", "value", str(model_dir), "--lake", lake, "--at", "gen-0", "--out", str(out))
    report = json.loads((out / "eval.json").read_text())
    return dict(report.get("floors") or {})


def report_env(
    env: str, results: list[Result], args: argparse.Namespace, lake: str, folder: Path
) -> None:
    floor = args.floor or ("sparse" if any(r.run.name == "sparse" for r in results) else "baseline")
    anchor = next((r for r in results if r.run.name == floor), results[0])
    floors = eval_floors(anchor, lake, folder)
    rows = {r.run.name: r.report for r in results}
    for name, report in floors.items():
        if not (name == "sparse-floor" and anchor.run.name == "sparse"):  # that is the same model
            rows[f"floor: {name}"] = report
    print()
    print(comparison_table(rows))
    for r in results:
        recipe = ", ".join([r.run.recipe.name, *r.run.overrides])
        print(
            f"  {r.run.name} ({recipe}): "
            f"{r.how} {r.seconds:.1f} s; "
            f"Best@n {_ci(r.report, 'best_at_k')}, AUROC {_ci(r.report, 'auroc')}, "
            f"ECE {_ci(r.report, 'ece')}"
        )
    for name, report in floors.items():
        print(
            f"  floor {name} (`trajlake eval value`, beside {anchor.run.name}): "
            f"Best@n {_ci(report, 'best_at_k')}, gap closed {_ci(report, 'gap_closed')}, "
            f"AUROC {_ci(report, 'auroc')}; {report.get('description', '')}"
        )
    print(f"\nagainst the floor ({floor}); {args.n_boot} paired task resamples, seed {args.seed}:")
    diffs = compare(results, floor, args.n_boot, args.seed)
    print(ratio_line(env, results, floor, diffs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=[*ENVS, "both"], default="both")
    parser.add_argument("--tasks", type=int, default=120, help="Tasks per environment.")
    parser.add_argument("--rollouts", type=int, default=8, help="Rollouts per task.")
    parser.add_argument("--seed", type=int, default=0, help="Generation and bootstrap seed.")
    parser.add_argument(
        "--recipe",
        action="append",
        type=parse_recipe,
        help="NAME=PATH[:k=v,...] (repeatable; PATH relative to models/ or the cwd; default: "
        + ", ".join(f for _, f in DEFAULT_RECIPES)
        + " where present).",
    )
    parser.add_argument("--floor", help="Run the others are compared with (default: sparse).")
    parser.add_argument("--n-boot", type=int, default=1000, help="Paired task resamples.")
    parser.add_argument("--workdir", type=Path, help="Keep lakes and models here (reused).")
    parser.add_argument("--input", nargs="+", help="Real rollout files instead of synth data.")
    parser.add_argument("--labels", help="Outcome file to attach (e.g. a results.json).")
    args = parser.parse_args()
    runs = args.recipe or default_runs()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench_value_"))
    start = time.perf_counter()
    try:
        for env in ("input",) if args.input else ENVS if args.env == "both" else (args.env,):
            print(f"\n## {env}")
            lake, data = build_lake(env, args, root / env)
            results = [run_model(run, lake, data, root / env) for run in runs]
            report_env(env, results, args, lake, root / env)
        print(f"\ntotal {time.perf_counter() - start:.1f} s")
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
