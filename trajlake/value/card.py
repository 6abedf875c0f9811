"""Model cards: what a trained value model is, what it was trained on (lineage) and how well it
does, written beside the weights as JSON and Markdown and registered as a row of `models`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake.errors import ModelFormatError
from trajlake.records import rows_for_table

if TYPE_CHECKING:
    from trajlake.lake import CommitResult, LakeStore

CARD_FORMAT = "trajlake.model-card/1"
CARD_JSON = "model_card.json"
CARD_MD = "README.md"


@dataclass(frozen=True)
class Lineage:
    """Where a model's training data came from."""

    lake_uri: str
    snapshot_id: int
    tags: list[str]
    """Tags pointing at the training snapshot (e.g. `gen-0`)."""
    selection_sql: str | None
    label_source: str
    generations: list[int]
    """Agent generations present in the training data."""


@dataclass(frozen=True)
class SplitInfo:
    """How examples were split by task, so evaluation can find the held-out tasks again."""

    seed: int
    val_frac: float
    test_frac: float
    balance: float | None
    counts: dict[str, dict[str, int]]
    """Per split: examples, positives and tasks."""


@dataclass(frozen=True)
class ModelCard:
    """Everything needed to trust (or distrust) a saved model."""

    model_id: str
    name: str
    kind: str
    description: str
    base_model: str | None
    lineage: Lineage
    split: SplitInfo
    recipe: dict[str, Any]
    metrics: dict[str, Any]
    """Held-out test metrics (Best@n, Random@n, Pass@n, gap closed, AUROC, Brier, ECE)."""
    training: dict[str, Any] = field(default_factory=dict)
    """History, best epoch, tokens/s, seconds, library versions."""
    created_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    format: str = CARD_FORMAT

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what `model_card.json` holds)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<card>") -> ModelCard:
        """Read a card dict, refusing other formats with a clear message."""
        found = data.get("format")
        if found != CARD_FORMAT:
            raise ModelFormatError(
                f"{source}: model card format {found!r}, this version of trajlake reads "
                f"{CARD_FORMAT!r}; retrain the model or use the trajlake version that wrote it"
            )
        try:
            body = {k: v for k, v in data.items() if k not in ("lineage", "split")}
            return cls(**body, lineage=Lineage(**data["lineage"]), split=SplitInfo(**data["split"]))
        except (KeyError, TypeError) as e:
            raise ModelFormatError(f"{source}: model card is missing or has bad fields: {e}") from e


def write_card(card: ModelCard, directory: str | Path) -> dict[str, Path]:
    """Write `model_card.json` and a Markdown `README.md` into the model directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"json": directory / CARD_JSON, "markdown": directory / CARD_MD}
    paths["json"].write_text(json.dumps(card.to_dict(), indent=2, sort_keys=True) + "\n")
    paths["markdown"].write_text(card_markdown(card))
    return paths


def read_card(directory: str | Path) -> ModelCard:
    """The card of a saved model directory."""
    path = Path(directory) / CARD_JSON
    if not path.is_file():
        raise ModelFormatError(f"{directory}: no {CARD_JSON}: not a trajlake model directory")
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise ModelFormatError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: a model card is a JSON object")
    return ModelCard.from_dict(data, source=str(path))


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _metric_rows(metrics: Mapping[str, Any]) -> list[str]:
    rows = []
    for key in ("best_at_n", "random_at_n", "pass_at_n", "gap_closed", "auroc", "ece", "brier"):
        if key in metrics:
            rows.append(f"| {key} | {_fmt(metrics[key])} |")
    return rows


def card_markdown(card: ModelCard) -> str:
    """A human-readable card: purpose, lineage, split, metrics."""
    lin, split = card.lineage, card.split
    lines = [
        f"# {card.name} ({card.kind})",
        "",
        card.description or "A trajectory value model trained with trajlake.",
        "",
        f"- model id: `{card.model_id}`",
        f"- base model: `{card.base_model or 'feature logistic regression'}`",
        f"- created: {card.created_at}",
        "",
        "## Lineage",
        "",
        f"- lake: `{lin.lake_uri}`",
        f"- snapshot: {lin.snapshot_id}" + (f" (tags: {', '.join(lin.tags)})" if lin.tags else ""),
        f"- selection: `{lin.selection_sql or 'all labelled trajectories'}`",
        f"- labels: {lin.label_source}",
        f"- generations: {', '.join(map(str, lin.generations)) or 'unknown'}",
        "",
        "## Split (by task)",
        "",
        f"seed {split.seed}, validation {split.val_frac:.0%}, test {split.test_frac:.0%} of tasks"
        + (f", negatives ≤ {split.balance}× positives in training" if split.balance else ""),
        "",
        "| split | examples | positives | tasks |",
        "| --- | --- | --- | --- |",
        *(
            f"| {name} | {c.get('examples', 0)} | {c.get('positives', 0)} | {c.get('tasks', 0)} |"
            for name, c in split.counts.items()
        ),
        "",
        "## Held-out metrics (test tasks)",
        "",
        "| metric | value |",
        "| --- | --- |",
        *_metric_rows(card.metrics),
        "",
    ]
    return "\n".join(lines)


def register_model(
    lake: LakeStore, card: ModelCard, *, artifact_uri: str, parent_model_id: str | None = None
) -> CommitResult:
    """Add the model's row to the lake's `models` table (a new snapshot; a no-op if present)."""
    row = {
        "model_id": card.model_id,
        "name": card.name,
        "kind": card.kind,
        "base_model": card.base_model,
        "training_snapshot": card.lineage.snapshot_id,
        "training_tag": card.lineage.tags[0] if card.lineage.tags else None,
        "selection_sql": card.lineage.selection_sql,
        "label_source": card.lineage.label_source,
        "metrics": card.metrics,
        "artifact_uri": artifact_uri,
        "parent_model_id": parent_model_id,
        "config": card.recipe,
        "created_at": dt.datetime.fromisoformat(card.created_at),
    }
    return lake.commit(
        {"models": rows_for_table("models", [row])},
        operation="register-model",
        summary={"model_id": card.model_id, "kind": card.kind},
    )


def split_counts(splits: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, int]]:
    """Examples, positives and tasks per split (items need `.label` and `.task_id`)."""
    return {
        name: {
            "examples": len(items),
            "positives": sum(int(e.label) for e in items),
            "tasks": len({e.task_id for e in items}),
        }
        for name, items in splits.items()
    }
