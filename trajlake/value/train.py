"""Train a value model from the lake: pinned snapshot + SQL selection + labels → examples split by
task → a fitted model (feature baseline or transformer) → held-out report, model card, `models` row.

`train_value_model` is what `trajlake train value` runs; torch is only imported for neural kinds.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trajlake._names import check_name, refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.errors import UnsupportedStorage
from trajlake.query import sql
from trajlake.value._train_inputs import TrainingData, is_main_process, prepare_data
from trajlake.value.artifacts import BASELINE_FILE
from trajlake.value.card import (
    Lineage,
    ModelCard,
    SplitInfo,
    register_model,
    split_counts,
    write_card,
)
from trajlake.value.recipe import Recipe

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainedModel:
    """What training produced: the directory, its card and the held-out report (the card is
    None and the report empty on the non-main processes of a multi-process run)."""

    model_id: str
    directory: Path
    card: ModelCard | None
    report: dict[str, Any]
    registered_snapshot: int | None


def model_id_for(recipe: Recipe, data: TrainingData) -> str:
    """`<name>-s<snapshot>-<hash of recipe + selection>`: the same recipe on the same data is
    the same model (re-registering it is a no-op)."""
    key = f"{recipe.fingerprint()}\x00{data.where or ''}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return check_name("model id", f"{recipe.name}-s{data.snapshot_id}-{digest}")


def default_model_dir(lake: LakeStore, model_id: str) -> Path:
    """Local lakes keep models beside their tables (`<lake>/models/<id>`); others need --out."""
    if not lake.location.is_local:
        raise UnsupportedStorage(
            f"{lake.uri} is not a local lake: pass an output directory (--out) for the model"
        )
    return Path(lake.location.uri) / "models" / check_name("model id", model_id)


def train_value_model(
    lake: LakeStore,
    recipe: Recipe,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    out: str | Path | None = None,
    register: bool = True,
    progress: Progress | None = None,
    resume: bool = False,
) -> TrainedModel:
    """Train `recipe` on the lake at `at`, evaluate on held-out tasks, save and register it.

    Args:
        lake: The lake to read (and register the model in).
        recipe: What to train (see `trajlake.value.recipe`).
        at: Snapshot id, tag or time (default: the latest); recorded as lineage.
        where: SQL predicate over `trajectories` (alias `t`), overriding the recipe's.
        out: Model directory (default: `<lake>/models/<model id>` for local lakes).
        register: Add the model to the lake's `models` table (a new snapshot).
        progress: Reporter of the optimisation steps (the CLI draws a bar).
        resume: Continue an interrupted neural training run from the latest Trainer checkpoint
            in `<out>/checkpoints` (same recipe and data, so the same directory).

    Returns:
        The model id, directory, card and held-out evaluation report.
    """
    from trajlake.value.report import evaluation_report, write_report

    progress = progress or NullProgress()
    if out is not None:
        refuse_inside_lake(out, lake.location.uri, what="model directory")
    data = prepare_data(lake, recipe, at=at, where=where)
    model_id = model_id_for(recipe, data)
    directory = Path(out) if out is not None else default_model_dir(lake, model_id)
    directory.mkdir(parents=True, exist_ok=True)
    log.info("training %s on snapshot %s into %s", model_id, data.snapshot_id, directory)

    fitted = _fit(lake, recipe, data, directory, progress, resume)
    if not is_main_process():  # under torchrun / accelerate launch, rank 0 writes and registers
        return TrainedModel(model_id, directory, None, {}, None)
    test = data.splits["test"]
    report = evaluation_report(
        [e.task_id for e in test],
        fitted.test_scores,
        [e.label for e in test],
        model_id=model_id,
        probabilities=fitted.calibrated,
        extra={"split": "test", "snapshot_id": data.snapshot_id},
    )
    write_report(report, directory / "eval")
    card = _card(lake, recipe, data, model_id, report, fitted.training)
    write_card(card, directory)
    registered = None
    if register:
        result = register_model(lake, card, artifact_uri=str(directory.resolve()))
        registered = result.snapshot_id
    return TrainedModel(model_id, directory, card, report, registered)


@dataclass(frozen=True)
class _Fitted:
    test_scores: np.ndarray
    calibrated: bool
    training: dict[str, Any]


def _fit(
    lake: LakeStore,
    recipe: Recipe,
    data: TrainingData,
    directory: Path,
    progress: Progress,
    resume: bool,
) -> _Fitted:
    if recipe.kind == "baseline":
        return _fit_baseline(lake, recipe, data, directory)
    if recipe.kind == "sparse":
        return _fit_sparse(lake, recipe, data, directory)
    from trajlake.value._train_neural import fit_neural

    scores, calibrated, training = fit_neural(
        lake, recipe, data, directory, progress, resume=resume
    )
    return _Fitted(scores, calibrated, training)


def _fit_baseline(lake: LakeStore, recipe: Recipe, data: TrainingData, directory: Path) -> _Fitted:
    from trajlake.value.baseline import FeatureBaseline

    model = FeatureBaseline(l2=recipe.baseline.l2, top_n=recipe.baseline.top_n)
    model.fit(data.splits["train"], lake, data.snapshot_id)
    model.save(directory / BASELINE_FILE)  # the file that marks a baseline model directory
    scores = model.predict_proba(data.splits["test"], lake, data.snapshot_id)
    return _Fitted(scores, True, {"features": model.feature_names})


def _fit_sparse(lake: LakeStore, recipe: Recipe, data: TrainingData, directory: Path) -> _Fitted:
    from trajlake.value._sparse_fit import fit_from_lake

    model = fit_from_lake(lake, data.snapshot_id, data.splits, recipe.sparse)
    model.save(directory)  # writes the file that marks a sparse model directory
    scores = model.score_lake(
        lake, data.snapshot_id, [e.trajectory_id for e in data.splits["test"]]
    )
    return _Fitted(scores, True, dict(model.info))


def headline_metrics(report: dict[str, Any]) -> dict[str, Any]:
    """Best@n, Random@n, Pass@n, gap closed, AUROC, ECE, Brier at the largest k of a report."""
    head = report["headline"]
    return {
        "n": report["k_max"],
        "best_at_n": head["best_at_k"],
        "random_at_n": head["random_at_k"],
        "pass_at_n": head["pass_at_k"],
        "gap_closed": head["gap_closed"],
        "auroc": head["auroc"],
        "auroc_per_task": head["auroc_per_task"],
        "ece": report["ece"],
        "brier": report["brier"],
        "n_test_tasks": report["n_tasks"],
        "n_rerankable_tasks": report["n_rerankable_tasks"],
    }


def _generations(lake: LakeStore, data: TrainingData) -> list[int]:
    ids = [e.trajectory_id for e in data.splits["train"]]
    rows = sql(
        lake,
        "SELECT DISTINCT generation FROM trajectories WHERE generation IS NOT NULL "
        "AND trajectory_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY 1",
        [ids],
        at=data.snapshot_id,
    ).rows()
    return [int(r[0]) for r in rows]


def _card(
    lake: LakeStore,
    recipe: Recipe,
    data: TrainingData,
    model_id: str,
    report: dict[str, Any],
    training: dict[str, Any],
) -> ModelCard:
    backbone = recipe.backbone
    base = None
    if backbone is not None:
        base = backbone.name_or_path or f"{backbone.config.get('model_type')} (from config)"  # type: ignore[union-attr]
    spec = recipe.data
    return ModelCard(
        model_id=model_id,
        name=recipe.name,
        kind=recipe.kind,
        description=recipe.description,
        base_model=base,
        lineage=Lineage(
            lake_uri=lake.uri,
            snapshot_id=data.snapshot_id,
            tags=data.tags,
            selection_sql=data.where,
            label_source=spec.label,
            generations=_generations(lake, data),
        ),
        split=SplitInfo(
            seed=spec.split_seed,
            val_frac=spec.val_frac,
            test_frac=spec.test_frac,
            balance=spec.balance,
            counts=split_counts(data.splits),
        ),
        recipe=recipe.model_dump(mode="json"),
        metrics={k: v for k, v in headline_metrics(report).items() if not _nan(v)},
        training=training,
    )


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
