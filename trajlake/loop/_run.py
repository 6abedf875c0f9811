"""`run_loop`: one turn of the generation loop on the synthetic environment, end to end — gen-0
rollouts → lake → credit → SFT → behaviour cloning and a value model → gen-1 with best-of-N."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake._names import refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.api import open_lake
from trajlake.errors import LakeAlreadyExists, TrainingError, UnsupportedStorage
from trajlake.loop import _plots, _steps
from trajlake.loop._report import LoopReport, PolicyResult, fill_from_lake, sample_curves
from trajlake.loop._value_model import ValueModelChoice, candidate_scores, choose_value_model
from trajlake.synth import PolicyParams, SynthBatch, SynthConfig, exact_success, generate

if TYPE_CHECKING:
    from trajlake.api import Lake
    from trajlake.value.train import TrainedModel

REPORT_DIR = "demo-report"


@dataclass(frozen=True)
class LoopSizes:
    """How big one run is: tasks and rollouts per generation, value-model training budget."""

    gen0_tasks: int
    rollouts_per_task: int
    heldout_tasks: int
    """Tasks gen-1 runs on, disjoint from gen-0's (`SynthConfig.task_offset`)."""
    candidates: int
    """Gen-1 rollouts per held-out task: the N of best-of-N."""
    epochs: int | None
    """Transformer value-model epochs (None: the recipe's)."""
    max_tokens: int | None
    """Token budget of one transformer value-model input (None: the recipe's)."""


# 256 tokens per transformer input: the recipe's 512 took 76 s of a 98 s run on 2 cores, 256 about
# 15 s, and gen-1's Best@8 over seeds 0-7 stayed the same (0.927 [0.888, 0.967] against 0.923
# [0.892, 0.953] at 512; README).
DEFAULT_SIZES = LoopSizes(80, 8, 50, 8, epochs=None, max_tokens=256)
QUICK_SIZES = LoopSizes(24, 6, 12, 4, epochs=1, max_tokens=256)


class _Steps:
    """Times each step, records what it did in the report and shows it on `progress`."""

    def __init__(self, report: LoopReport, progress: Progress) -> None:
        self.report, self.progress = report, progress

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[dict[str, Any]]:
        self.progress.start(name, None)
        start = time.perf_counter()
        info: dict[str, Any] = {"name": name}
        try:
            yield info
        finally:
            self.progress.finish()
        info["seconds"] = round(time.perf_counter() - start, 3)
        self.report.steps.append(info)


def _check_environment(path: str) -> None:
    if "://" in path:
        raise UnsupportedStorage(f"the demo needs a local lake directory, not {path!r}")


def _check_fresh(lake: Lake) -> None:
    if lake.sql("SELECT count(*) FROM trajectories").rows()[0][0]:
        raise LakeAlreadyExists(
            f"{lake.uri} already holds trajectories; the demo starts from an empty lake: "
            "pass --lake with a new path (or remove that one)"
        )


def run_loop(
    lake_path: str | os.PathLike[str],
    *,
    quick: bool = False,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    value_model: str = "auto",
) -> LoopReport:
    """Run the generation loop on the synthetic environment in a new local lake.

    gen-0 rollouts of the initial policy are written as JSONL without outcomes, ingested,
    labelled and tagged `gen-0`; credit runs (outcome, prefix-MC, the built-in value model, the
    cross-fitted text model) are exported as weighted SFT data and read back to clone six
    policies; a value model is trained on `gen-0` (the tiny transformer when torch and
    transformers are installed, else the CPU feature baseline); the credit-weighted policy
    (`GEN1_VARIANT`) produces gen-1 on held-out tasks, N candidates
    per task, the value model picks one per task, and gen-1 is ingested with its lineage and
    tagged `gen-1`. Success rates are read back from the lake with SQL.

    Args:
        lake_path: Local directory of the lake (created; it must hold no trajectories yet).
        quick: A smaller run (well under a minute on 2 CPU cores; the default takes about one).
        seed: Seed of the synthetic tasks, rollouts and outcomes.
        out: Folder for the report, plots, data files and SFT exports (default
            `<lake>/demo-report`).
        progress: Told when each step starts and ends.
        value_model: 'auto' (the hybrid sparse text model, the best CPU recipe), 'hybrid',
            'transformer' (needs torch) or 'baseline'; the report says which ran and why.

    Returns:
        The report; it is also written to `<out>/report.json`.

    Raises:
        LakeAlreadyExists: the lake already holds trajectories.
        UnsupportedStorage: `lake_path` is a URL, not a local directory.
        MissingExtra: `value_model='transformer'` without torch or transformers installed.
    """
    path = os.fspath(lake_path)
    _check_environment(path)
    choice = choose_value_model(value_model)
    if out is not None:  # before the lake is created: a refused run leaves nothing behind
        refuse_inside_lake(out, path, what="report folder")
    started = time.perf_counter()
    with open_lake(path, create=True) as lake:  # closing waits for background maintenance
        return _run(lake, choice, quick=quick, seed=seed, out=out, progress=progress, start=started)


def _run(
    lake: Lake,
    choice: ValueModelChoice,
    *,
    quick: bool,
    seed: int,
    out: str | os.PathLike[str] | None,
    progress: Progress | None,
    start: float,
) -> LoopReport:
    _check_fresh(lake)
    sizes = QUICK_SIZES if quick else DEFAULT_SIZES
    out_dir = Path(out).resolve() if out is not None else Path(lake.uri) / REPORT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    report = LoopReport(lake.uri, str(out_dir), seed, quick, asdict(sizes))
    step = _Steps(report, progress or NullProgress())
    config0 = SynthConfig(
        seed=seed, n_tasks=sizes.gen0_tasks, rollouts_per_task=sizes.rollouts_per_task
    )
    config1 = SynthConfig(
        seed=seed,
        n_tasks=sizes.heldout_tasks,
        rollouts_per_task=sizes.candidates,
        task_offset=sizes.gen0_tasks,
    )
    batch0 = _gen0(lake, config0, out_dir, step)
    with step("credit") as info:
        report.credit_runs = _steps.compute_credit(lake, at="gen-0")
        info["runs"] = [r["run_name"] for r in report.credit_runs]
    policies = _clone_policies(lake, report, (config0, config1), out_dir, step)
    trained = _value_model(lake, report, sizes, choice, step)
    _gen1(lake, report, policies, trained, choice, config1, out_dir, step)
    _evaluate(lake, report, trained, out_dir, step)
    with step("report") as info:
        fill_from_lake(lake, report, at="gen-1")
        report.plots = _draw(lake, report, batch0, trained, out_dir)
        info["plots"] = len(report.plots)
    report.seconds = round(time.perf_counter() - start, 3)
    report.files["report"] = str(out_dir / "report.json")
    (out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return report


def _gen0(lake: Lake, config: SynthConfig, out_dir: Path, step: _Steps) -> SynthBatch:
    with step("generate gen-0") as info:
        batch = generate(config, PolicyParams.default())
        (out_dir / "data").mkdir(parents=True, exist_ok=True)
        batch.write_truth(out_dir / "data" / "gen-0-truth.jsonl")  # V*, for the value curves
        info.update(
            rollouts=len(batch.trajectories), tasks=config.n_tasks, policy=batch.params.name
        )
    with step("ingest, label, tag gen-0") as info:
        info.update(
            _steps.land_generation(
                lake,
                _steps.without_outcomes(batch),
                out_dir / "data",
                generation=0,
                tag="gen-0",
                note=f"generation 0: {batch.params.name} on {config.n_tasks} synthetic tasks",
            )
        )
    return batch


def _export_sft(lake: Lake, out_dir: Path, step: _Steps) -> tuple[int, dict[str, Path]]:
    """Tag gen-0 with its credit runs `gen-0-sft` and export one SFT dataset per variant."""
    with step("export SFT") as info:
        note = "gen-0 with its credit runs: what the SFT exports read"
        snapshot = lake.tag("gen-0-sft", note=note).snapshot_id
        folders: dict[str, Path] = {}
        info["exports"] = []
        for variant in _steps.VARIANTS:
            export, folders[variant.key] = _steps.export_variant(
                lake, variant, out_dir / "sft", at=snapshot
            )
            info["exports"].append(export)
        info.update(tag="gen-0-sft", snapshot=snapshot)
    return snapshot, folders


def _export_id(lake: Lake, folder: str | None) -> str | None:
    """The `exports` row of an SFT export folder (None without an export)."""
    if folder is None:
        return None
    rows = lake.sql("SELECT export_id FROM exports WHERE uri = ?", [folder]).rows()
    return str(rows[0][0]) if rows else None


def _result(
    policy: PolicyParams,
    variant: _steps.Variant,
    examples: list[tuple[str, str, float]],
    folder: Path | None,
    configs: tuple[SynthConfig, SynthConfig],
) -> PolicyResult:
    return PolicyResult(
        name=variant.label,
        variant=variant.key,
        training_data=variant.training_data,
        credit_run=variant.credit_run,
        export=None if folder is None else str(folder),
        examples=len(examples),
        weight=sum(w for _, _, w in examples),
        exact_success_train=exact_success(policy, configs[0]),
        exact_success_heldout=exact_success(policy, configs[1]),
    )


_UNTRAINED = _steps.Variant("gen-0", "gen-0 policy (no training)", "–", None)


def _clone_policies(
    lake: Lake,
    report: LoopReport,
    configs: tuple[SynthConfig, SynthConfig],
    out_dir: Path,
    step: _Steps,
) -> dict[str, PolicyParams]:
    """Behaviour cloning of the gen-0 policy on each export; exact success of each result."""
    snapshot, folders = _export_sft(lake, out_dir, step)
    base = PolicyParams.default()
    with step("behaviour cloning") as info:
        turns = _steps.synth_turns_by_trajectory(lake, at=snapshot, generation=0)
        fitted = {_UNTRAINED.key: base}
        report.policies.append(_result(base, _UNTRAINED, [], None, configs))
        for variant in _steps.VARIANTS:
            examples = _steps.read_weighted_turns(folders[variant.key], turns)
            policy = fitted[variant.key] = base.fit(examples)
            report.policies.append(
                _result(policy, variant, examples, folders[variant.key], configs)
            )
        info.update(policies=len(fitted) - 1, snapshot=snapshot)
    return fitted


def _value_model(
    lake: Lake, report: LoopReport, sizes: LoopSizes, choice: ValueModelChoice, step: _Steps
) -> TrainedModel:
    from trajlake.value.train import headline_metrics, train_value_model

    with step("train value model") as info:
        recipe = choice.recipe(epochs=sizes.epochs, max_tokens=sizes.max_tokens)
        # The bar shows optimizer steps of their total and each evaluation, not a bare spinner.
        trained = train_value_model(lake, recipe, at="gen-0", progress=step.progress)
        if trained.card is None:  # only non-main ranks of a multi-process launch get no card
            raise TrainingError("the demo trains in one process; run it without a launcher")
        report.value_model = {
            "kind": choice.kind,
            "label": choice.label,
            "why": choice.reason,
            "model_id": trained.model_id,
            "directory": str(trained.directory),
            "recipe": recipe.name,
            "training_snapshot": trained.card.lineage.snapshot_id,
            "training_tags": trained.card.lineage.tags,
            "registered_snapshot": trained.registered_snapshot,
            "test_split": headline_metrics(trained.report),
            "train_seconds": trained.card.training.get("seconds"),
        }
        info.update(
            kind=choice.kind,
            model_id=trained.model_id,
            registered_snapshot=trained.registered_snapshot,
        )
    return trained


def _gen1(
    lake: Lake,
    report: LoopReport,
    policies: dict[str, PolicyParams],
    trained: TrainedModel,
    choice: ValueModelChoice,
    config: SynthConfig,
    out_dir: Path,
    step: _Steps,
) -> None:
    variant = _steps.GEN1_VARIANT
    policy = policies[variant]
    result = next(p for p in report.policies if p.variant == variant)
    with step("register gen-1 policy") as info:
        sft = lake.snapshot("gen-0-sft").snapshot_id
        policy_id = _steps.register_policy(
            lake,
            policy,
            path=out_dir / "policies" / f"{policy.name}.json",
            training_snapshot=sft,
            training_tag="gen-0-sft",
            config={
                "variant": variant,
                "credit_run": result.credit_run,
                "export": result.export,
                # `trajlake lineage` links a model to the export it was trained from by this id.
                "export_id": _export_id(lake, result.export),
            },
            metrics={"exact_success_heldout": result.exact_success_heldout},
        )
        report.gen1_policy = {
            "name": policy.name,
            "model_id": policy_id,
            "variant": variant,
            "credit_run": result.credit_run,
        }
        info.update(model_id=policy_id)
    with step("generate gen-1 + best-of-N") as info:
        batch = generate(config, policy)
        report.lineage = {"policy_model_id": policy_id, "value_model_id": trained.model_id}
        candidates = _steps.without_outcomes(batch)
        scores = candidate_scores(choice, trained.directory, candidates)
        marked = _steps.select_best_of_n(candidates, scores, lineage=report.lineage)
        info.update(rollouts=len(batch.trajectories), tasks=config.n_tasks, policy=policy.name)
    with step("ingest, label, tag gen-1") as info:
        info.update(
            _steps.land_generation(
                lake,
                marked,
                out_dir / "data",
                generation=1,
                tag="gen-1",
                note=f"generation 1: {policy.name} on held-out tasks, best-of-N by the value model",
            )
        )
        # The value model's scores of the candidates, stored as `trajlake score` stores them
        # (after the gen-1 tag): `trajlake view` shows each task's candidates with the scores
        # and ranks best-of-N picked by (the same scores as `attrs.best_of_n`).
        from trajlake.value.artifacts import load_model
        from trajlake.value.scoring import score_to_lake

        stored, n = score_to_lake(
            lake, load_model(trained.directory), at="gen-1", where="t.generation = 1"
        )
        info.update(scored=n, scores_snapshot=stored.snapshot_id)


def _evaluate(
    lake: Lake, report: LoopReport, trained: TrainedModel, out_dir: Path, step: _Steps
) -> None:
    from trajlake.value.artifacts import load_model
    from trajlake.value.evaluate import evaluate_saved_model
    from trajlake.value.train import headline_metrics

    with step("evaluate value model on gen-1") as info:
        evaluation = evaluate_saved_model(
            lake,
            load_model(trained.directory),
            at="gen-1",
            where="t.generation = 1",
            split="all",
            out=out_dir / "value-eval-gen-1",
        )
        report.value_model["gen1"] = headline_metrics(evaluation.report)
        report.files["value_eval_gen1"] = str(evaluation.files["json"])
        info.update(tasks=evaluation.report["n_tasks"], candidates=evaluation.report["n_examples"])


def _draw(
    lake: Lake, report: LoopReport, batch0: SynthBatch, trained: TrainedModel, out_dir: Path
) -> dict[str, str]:
    by_gen = {g["generation"]: g["success_rate"] for g in report.generations}
    bon = report.best_of_n
    measured = {
        "gen-0 (gen-0 tasks)": by_gen[0],
        "gen-1 sampled (held-out)": by_gen[1],
        f"gen-1 best-of-{bon['n']} (value model)": bon["selected"],
        f"gen-1 random pick of {bon['n']}": bon["random"],
        f"gen-1 pass@{bon['n']} (oracle)": bon["pass"],
    }
    expected = {p.name: p.exact_success_heldout for p in report.policies}
    gen1_eval = json.loads(Path(report.files["value_eval_gen1"]).read_text())
    curves = sample_curves(lake, batch0.truth)
    return {
        "success": str(_plots.plot_success(measured, expected, out_dir / "success.png")),
        "value_curves": str(_plots.plot_value_curves(curves, out_dir / "value_curves.png")),
        "best_at_k": str(
            _plots.plot_best_at_k(
                {"gen-0 test tasks": trained.report, "gen-1 candidates": gen1_eval},
                out_dir / "best_at_k.png",
            )
        ),
    }
