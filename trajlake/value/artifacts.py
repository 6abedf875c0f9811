"""Saved value models on disk, any kind: load a model directory (neural, feature baseline or
sparse text model) with its card and score lake trajectories with it — the one entry point for
`trajlake eval value`, `score` and `rerank`.

What a directory holds and how its kind is told is `model_files` (re-exported here); the neural
model itself is a `NeuralScorer`. This module is lake-side scoring: it reads trajectories from a
lake and may load the baseline, so inference (`trajlake.serve`) uses `NeuralScorer` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trajlake.errors import NoSuchModel
from trajlake.value.card import CARD_JSON, ModelCard, read_card
from trajlake.value.dataset import ValueExample
from trajlake.value.model_files import (
    BASELINE_FILE,
    NEURAL_FILE,
    model_id_of,
    model_kind,
    neural_model_dir,
)

if TYPE_CHECKING:
    from trajlake.lake import LakeStore
    from trajlake.value.scorer import NeuralScorer

__all__ = [
    "BASELINE_FILE",
    "NEURAL_FILE",
    "SavedModel",
    "load_model",
    "model_id_of",
    "model_kind",
    "neural_model_dir",
]


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
        """Scores are probabilities (BCE-trained, the logistic baseline or the sparse model)."""
        if self.card is None or self.kind in ("baseline", "sparse"):
            return True
        loss = str(self.card.recipe.get("train", {}).get("loss", "bce"))
        return loss.startswith("bce")

    @property
    def scorer(self) -> NeuralScorer:
        """The neural model's scorer (ModelFormatError for a baseline)."""
        if self.kind != "neural":
            neural_model_dir(self.directory)
        return self._impl  # type: ignore[no-any-return]

    def score_lake(self, lake: LakeStore, snapshot_id: int, ids: Sequence[str]) -> np.ndarray:
        """P(success) (or a ranking score) for trajectories of the lake, in the order of `ids`."""
        if not ids:
            return np.zeros(0)
        if self.kind == "baseline":
            examples = [_bare_example(i, snapshot_id) for i in ids]
            return np.asarray(self._impl.predict_proba(examples, lake, snapshot_id))
        from trajlake.value.conversations import read_conversations

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
    """Load any saved trajlake value model (neural, baseline or sparse) with its card."""
    kind = model_kind(path)
    directory = Path(path)
    card = read_card(directory) if (directory / CARD_JSON).is_file() else None
    model_id = card.model_id if card else directory.resolve().name
    if kind == "baseline":
        from trajlake.value.baseline import FeatureBaseline

        impl: Any = FeatureBaseline.load(directory / BASELINE_FILE)
    elif kind == "sparse":
        from trajlake.value.sparse import SparseValueModel

        impl = SparseValueModel.load(directory)
    else:
        from trajlake.value.scorer import NeuralScorer

        impl = NeuralScorer.load(directory, device=device, batch_size=batch_size)
    return SavedModel(directory, kind, card, model_id, impl)
