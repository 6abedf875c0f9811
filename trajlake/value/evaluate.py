"""`trajlake eval value`: score a saved model on lake trajectories and write the honest report
(Best@k / Random@k / Pass@k, gap closed, AUROC, ECE, Brier, bootstrap CIs, plots)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trajlake._names import refuse_inside_lake
from trajlake.errors import TrainingError
from trajlake.value.artifacts import SavedModel
from trajlake.value.dataset import ValueExample, load_examples, split_by_task

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Split = Literal["test", "all"]


@dataclass(frozen=True)
class Evaluation:
    """The report and where it was written."""

    report: dict[str, Any]
    files: dict[str, Path]


def select_examples(
    lake: LakeStore,
    model: SavedModel,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    split: Split = "test",
) -> tuple[list[ValueExample], int]:
    """Labelled examples to evaluate on, and how many of their tasks the model trained on.

    `split="test"` keeps the tasks the model's card held out (the same task-hash split);
    `split="all"` keeps every selected example (another generation, another lake) and counts
    tasks that fall in the card's training split, so leakage is visible in the report.
    """
    label = model.card.lineage.label_source if model.card is not None else "outcomes"
    examples = load_examples(lake, at=at, where=where, label=label)
    if model.card is None:
        if split == "test":
            raise TrainingError(
                f"{model.directory}: no model card, so no recorded split: use --split all"
            )
        return examples, 0
    s = model.card.split
    splits = split_by_task(examples, val_frac=s.val_frac, test_frac=s.test_frac, seed=s.seed)
    seen = {e.task_id for e in splits["train"]} | {e.task_id for e in splits["val"]}
    if split == "test":
        return splits["test"], 0
    return examples, len(seen & {e.task_id for e in examples})


def evaluate_saved_model(
    lake: LakeStore,
    model: SavedModel,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    split: Split = "test",
    out: str | Path | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> Evaluation:
    """Score the selected examples and write `eval.json`, `eval.md` and the PNG plots to `out`
    (default: `<model dir>/eval-<snapshot>-<split>`)."""
    from trajlake.value.report import evaluation_report, write_report

    snapshot = lake.snapshot(at)
    directory = Path(out) if out else model.directory / f"eval-s{snapshot.snapshot_id}-{split}"
    refuse_inside_lake(directory, lake.location.uri, what="evaluation report folder")
    examples, seen = select_examples(lake, model, at=snapshot.snapshot_id, where=where, split=split)
    if not examples:
        raise TrainingError("no labelled trajectories to evaluate in this selection")
    scores = model.score_lake(lake, snapshot.snapshot_id, [e.trajectory_id for e in examples])
    report = evaluation_report(
        [e.task_id for e in examples],
        scores,
        [e.label for e in examples],
        model_id=model.model_id,
        n_boot=n_boot,
        seed=seed,
        probabilities=model.calibrated,
        extra={
            "lake": lake.uri,
            "snapshot_id": snapshot.snapshot_id,
            "where": where,
            "split": split,
            "tasks_seen_in_training": seen,
        },
    )
    files = write_report(report, directory)
    return Evaluation(report, files)
