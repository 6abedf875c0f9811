"""Value models on the synthetic environment, trained and evaluated through the CLI.

Generates `trajlake.synth` rollouts (fixed seed), ingests them into a fresh lake, tags `gen-0`,
then runs `trajlake train value` for the feature baseline and the tiny transformer recipes and
prints the held-out comparison (Best@n, Random@n, Pass@n, gap closed, AUROC, ECE) with 95%
task-bootstrap intervals, plus wall time per model.

    python benchmarks/bench_value_models.py [--tasks 120] [--rollouts 8] [--seed 0]

With `--input PATH...` the same runs use real rollouts instead (any format `trajlake ingest`
reads, with outcomes in the files or attached with `--labels`), e.g. the τ-bench airline file of
the shared corpus.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from trajlake.cli.main import cli
from trajlake.synth import SynthConfig, generate
from trajlake.value.report import comparison_table

MODELS = Path(__file__).resolve().parents[1] / "models"
RUNS: list[tuple[str, str, list[str]]] = [
    ("feature baseline", "baseline.yaml", []),
    ("tiny transformer, BCE", "tiny.yaml", []),
    ("tiny transformer, BCE + Bradley–Terry", "tiny.yaml", ["--set", "train.loss=bce+bt"]),
]


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"trajlake {' '.join(args)} failed:\n{result.output}")
    return result.output


def _ci(report: dict[str, Any], key: str) -> str:
    ci = report["ci"].get(key)
    if not ci or ci.get("low") is None:
        return "n/a"
    return f"{ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--input", nargs="+", help="Real rollout files instead of synth data.")
    parser.add_argument("--labels", help="Outcome file to attach (e.g. a results.json).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lake = str(root / "lake")
        _cli("init", "--lake", lake)
        if args.input:
            labels = ["--labels", args.labels] if args.labels else []
            print(_cli("ingest", *args.input, "--lake", lake, *labels).strip())
        else:
            batch = generate(
                SynthConfig(seed=args.seed, n_tasks=args.tasks, rollouts_per_task=args.rollouts)
            )
            batch.write_jsonl(root / "synth.jsonl")
            _cli("ingest", str(root / "synth.jsonl"), "--lake", lake)
            print(
                f"synth seed={args.seed}: {args.tasks} tasks × {args.rollouts} rollouts, "
                f"success rate {batch.success_rate:.3f}"
            )
        _cli("tag", "gen-0", "--lake", lake)
        reports: dict[str, dict[str, Any]] = {}
        for label, recipe, extra in RUNS:
            started = time.perf_counter()
            out = root / label.replace(" ", "_")
            _cli(
                "train",
                "value",
                "--lake",
                lake,
                "--config",
                str(MODELS / recipe),
                "--at",
                "gen-0",
                "--out",
                str(out),
                "-o",
                "json",
                *extra,
            )
            seconds = time.perf_counter() - started
            reports[label] = json.loads((out / "eval" / "eval.json").read_text())
            print(f"{label}: trained and evaluated in {seconds:.1f} s")
        print()
        print(comparison_table(reports))
        print()
        for label, report in reports.items():
            print(
                f"{label}: Best@n {_ci(report, 'best_at_k')}, AUROC {_ci(report, 'auroc')}, "
                f"gap closed {_ci(report, 'gap_closed')}"
            )


if __name__ == "__main__":
    main()
