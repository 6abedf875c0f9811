"""`trajlake eval value`: score a saved model on lake trajectories and write the honest report
(Best@k / Random@k / Pass@k, gap closed, AUROC, ECE, Brier, bootstrap CIs, plots), with the
floors beside it: the sparse text model fitted on the card's training split, and two heuristics
that need no training ("fewer steps", "exit status")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from trajlake._names import refuse_inside_lake
from trajlake.errors import TrainingError
from trajlake.query import sql
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
    floors: bool = True,
) -> Evaluation:
    """Score the selected examples and write `eval.json`, `eval.md` and the PNG plots to `out`
    (default: `<model dir>/eval-<snapshot>-<split>`).

    With `floors`, the report's ``"floors"`` holds the same report for each floor on the same
    examples (`floor_scores`), each with ``model_minus_floor``: the paired differences."""
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
    if floors:
        report["floors"] = _floor_reports(
            lake, model, examples, scores, snapshot.snapshot_id, n_boot=n_boot, seed=seed
        )
    files = write_report(report, directory)
    return Evaluation(report, files)


# --------------------------------------------------------------------------------- floors

SPARSE_FLOOR = "sparse-floor"
FLOOR_DESCRIPTIONS = {
    SPARSE_FLOOR: "hashed text n-grams, pointwise logistic regression with class weights "
    "(models/sparse.yaml), fitted on the card's training split",
    "fewer-steps": "score = −(number of turns); no training",
    "exit-status": "score = 1 if the run completed cleanly with a final output/patch, else 0; "
    "no training",
}

_HEURISTICS_SQL = """
SELECT t.trajectory_id,
       coalesce(t.n_turns, (SELECT count(*) FROM messages m
                            WHERE m.trajectory_id = t.trajectory_id AND m.role = 'assistant'
                              AND coalesce(m.thread, 'main') = 'main')) AS n_turns,
       coalesce(trim(t.final_output), '') <> ''
         AND coalesce(t.status, 'completed') = 'completed'
         AND NOT regexp_matches(coalesce(t.exit_reason, ''),
                                'limit|exceed|error|cost|context|format|timeout|budget|max', 'i')
         AS clean_exit
FROM trajectories t WHERE t.trajectory_id IN (SELECT unnest($ids::VARCHAR[]))
"""


def heuristic_scores(lake: LakeStore, snapshot_id: int, ids: list[str]) -> dict[str, np.ndarray]:
    """The training-free floors' scores of `ids` (in order): fewer-steps and exit-status."""
    rows = {r[0]: r[1:] for r in sql(lake, _HEURISTICS_SQL, {"ids": ids}, at=snapshot_id).rows()}
    turns = np.array([float(rows[i][0] or 0) for i in ids])
    clean = np.array([1.0 if rows[i][1] else 0.0 for i in ids])
    return {"fewer-steps": -turns, "exit-status": clean}


def _is_the_floor(model: SavedModel) -> bool:
    from trajlake.value.recipe import SparseSpec

    # The same recipe on unbalanced training data is the floor; a balanced one is not.
    if model.kind != "sparse" or model.card is None or model.card.split.balance is not None:
        return False
    return bool(model.card.recipe.get("sparse") == SparseSpec().model_dump(mode="json"))


def sparse_floor_scores(
    lake: LakeStore, model: SavedModel, snapshot_id: int, ids: list[str]
) -> np.ndarray | None:
    """The sparse floor fitted on the card's training split (at the card's snapshot when the
    card is of this lake), scoring `ids`; None without a card (no recorded split)."""
    from trajlake.value._sparse_fit import fit_from_lake
    from trajlake.value.recipe import SparseSpec

    card = model.card
    if card is None:
        return None
    same_lake = card.lineage.lake_uri == lake.uri
    train_at = card.lineage.snapshot_id if same_lake else snapshot_id
    where = card.lineage.selection_sql if same_lake else None
    examples = load_examples(lake, at=train_at, where=where, label=card.lineage.label_source)
    s = card.split
    splits = split_by_task(examples, val_frac=s.val_frac, test_frac=s.test_frac, seed=s.seed)
    if len({e.label for e in splits["train"]}) < 2:
        return None  # a logistic model needs both outcomes
    floor = fit_from_lake(lake, train_at, {"train": splits["train"]}, SparseSpec())
    return floor.score_lake(lake, snapshot_id, ids)


def floor_scores(
    lake: LakeStore,
    model: SavedModel,
    snapshot_id: int,
    ids: list[str],
    model_scores: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Each floor's scores of `ids`; the model's own scores stand for the sparse floor when the
    model is the floor (same recipe), so it is not fitted twice."""
    out: dict[str, np.ndarray] = {}
    if _is_the_floor(model) and model_scores is not None:
        out[SPARSE_FLOOR] = model_scores
    else:
        sparse = sparse_floor_scores(lake, model, snapshot_id, ids)
        if sparse is not None:
            out[SPARSE_FLOOR] = sparse
    return {**out, **heuristic_scores(lake, snapshot_id, ids)}


def _floor_reports(
    lake: LakeStore,
    model: SavedModel,
    examples: list[ValueExample],
    scores: np.ndarray,
    snapshot_id: int,
    *,
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    from trajlake.value.report import evaluation_report, paired_difference

    ids = [e.trajectory_id for e in examples]
    tasks, labels = [e.task_id for e in examples], [e.label for e in examples]
    out: dict[str, Any] = {}
    for name, floor in floor_scores(lake, model, snapshot_id, ids, scores).items():
        report = evaluation_report(
            tasks, floor, labels, model_id=name, n_boot=n_boot, seed=seed,
            probabilities=name == SPARSE_FLOOR,
        )  # fmt: skip
        report.pop("extra")
        report["description"] = FLOOR_DESCRIPTIONS[name]
        report["model_minus_floor"] = paired_difference(
            tasks, scores, floor, labels, k=report["k_max"], n_boot=n_boot, seed=seed
        )
        out[name] = report
    return out
