"""Saved value models on disk: recognise a model directory (neural or feature baseline), read
its card, and score lake trajectories with it — the one entry point for eval, score and rerank.

A model directory holds `model_card.json` and either `value_net.json` + `model.safetensors`
(+ tokenizer files) or `baseline.json`. Pickled weights are never loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trajlake.errors import ModelFormatError, NoSuchModel
from trajlake.value.card import CARD_JSON, ModelCard, read_card
from trajlake.value.dataset import ValueExample

if TYPE_CHECKING:
    from trajlake.lake._lake import Lake
    from trajlake.rerank import Reranker

NEURAL_FILE = "value_net.json"
BASELINE_FILE = "baseline.json"


def _directory(path: str | Path) -> Path:
    directory = Path(path)
    if not directory.exists():
        raise NoSuchModel(f"{path}: no such model directory")
    if not directory.is_dir():
        raise ModelFormatError(f"{path}: a model is a directory (with {CARD_JSON}), not a file")
    return directory


def model_kind(path: str | Path) -> str:
    """'neural' or 'baseline', from the files in the directory."""
    directory = _directory(path)
    if (directory / NEURAL_FILE).is_file():
        return "neural"
    if (directory / BASELINE_FILE).is_file():
        return "baseline"
    pickles = sorted(p.name for p in directory.glob("*") if p.suffix in (".bin", ".pt", ".pkl"))
    hint = f" (found {', '.join(pickles)}: pickled weights are never loaded)" if pickles else ""
    raise ModelFormatError(
        f"{path}: not a trajlake model directory: neither {NEURAL_FILE} nor {BASELINE_FILE}{hint}"
    )


def neural_model_dir(path: str | Path) -> Path:
    """The directory, checked to hold a neural model."""
    if model_kind(path) != "neural":
        raise ModelFormatError(
            f"{path}: a feature baseline scores lake trajectories only (its features are SQL "
            "over the lake): use `trajlake score` / `trajlake eval value` with --lake"
        )
    return Path(path)


def model_id_of(path: str | Path) -> str:
    """The model id from the card (the directory name when there is no card)."""
    directory = Path(path)
    if not (directory / CARD_JSON).is_file():
        return directory.resolve().name
    return read_card(directory).model_id


@dataclass
class SavedModel:
    """A loaded model that can score trajectories stored in a lake."""

    directory: Path
    kind: str
    card: ModelCard | None
    model_id: str
    _impl: Any

    @property
    def calibrated(self) -> bool:
        """Scores are probabilities (BCE-trained or the logistic baseline)."""
        if self.card is None or self.kind == "baseline":
            return True
        loss = str(self.card.recipe.get("train", {}).get("loss", "bce"))
        return loss.startswith("bce")

    @property
    def reranker(self) -> Reranker:
        """The neural model's Reranker (ModelFormatError for a baseline)."""
        if self.kind != "neural":
            neural_model_dir(self.directory)
        return self._impl  # type: ignore[no-any-return]

    def score_lake(self, lake: Lake, snapshot_id: int, ids: Sequence[str]) -> np.ndarray:
        """P(success) (or a ranking score) for trajectories of the lake, in the order of `ids`."""
        if not ids:
            return np.zeros(0)
        if self.kind == "baseline":
            examples = [_bare_example(i, snapshot_id) for i in ids]
            return np.asarray(self._impl.predict_proba(examples, lake, snapshot_id))
        from trajlake.value._train_neural import read_conversations

        convs = read_conversations(lake, snapshot_id, ids)
        missing = [i for i in ids if i not in convs]
        if missing:
            raise NoSuchModel(f"trajectories not found at snapshot {snapshot_id}: {missing[:5]}")
        return np.asarray(self._impl.score([convs[i] for i in ids]), dtype=np.float64)


def _bare_example(trajectory_id: str, snapshot_id: int) -> ValueExample:
    return ValueExample(
        trajectory_id=trajectory_id,
        task_id=trajectory_id,
        label=0,
        reward=None,
        outcome_source=None,
        harness=None,
        policy_model=None,
        run_id=None,
        snapshot_id=snapshot_id,
    )


def load_model(path: str | Path, *, device: str | None = None, batch_size: int = 8) -> SavedModel:
    """Load any saved trajlake value model (neural or baseline) with its card."""
    kind = model_kind(path)
    directory = Path(path)
    card = read_card(directory) if (directory / CARD_JSON).is_file() else None
    model_id = card.model_id if card else directory.resolve().name
    if kind == "baseline":
        from trajlake.value.baseline import FeatureBaseline

        impl: Any = FeatureBaseline.load(directory / BASELINE_FILE)
    else:
        from trajlake.rerank import Reranker

        impl = Reranker.load(directory, device=device, batch_size=batch_size)
    return SavedModel(directory, kind, card, model_id, impl)
