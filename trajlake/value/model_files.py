"""What a saved value-model directory holds, and how to tell its kind: `model_card.json` and
either `value_net.json` + `model.safetensors` (+ tokenizer files) for a neural model,
`baseline.json` for the feature baseline or `sparse_value.json` + `.npz` for the sparse text
model. Pickled weights are never loaded.

Kept apart from `artifacts` (which loads either kind for scoring a lake) so that inference code
(`trajlake.serve`) can check a directory without importing the baseline and what it is fitted
with.
"""

from __future__ import annotations

from pathlib import Path

from trajlake.errors import ModelFormatError, NoSuchModel
from trajlake.value.card import CARD_JSON, read_card

NEURAL_FILE = "value_net.json"
BASELINE_FILE = "baseline.json"
SPARSE_FILE = "sparse_value.json"


def _directory(path: str | Path) -> Path:
    directory = Path(path)
    if not directory.exists():
        raise NoSuchModel(f"{path}: no such model directory")
    if not directory.is_dir():
        raise ModelFormatError(f"{path}: a model is a directory (with {CARD_JSON}), not a file")
    return directory


def model_kind(path: str | Path) -> str:
    """'neural', 'baseline' or 'sparse', from the files in the directory."""
    directory = _directory(path)
    if (directory / NEURAL_FILE).is_file():
        return "neural"
    if (directory / BASELINE_FILE).is_file():
        return "baseline"
    if (directory / SPARSE_FILE).is_file():
        return "sparse"
    pickles = sorted(p.name for p in directory.glob("*") if p.suffix in (".bin", ".pt", ".pkl"))
    hint = f" (found {', '.join(pickles)}: pickled weights are never loaded)" if pickles else ""
    raise ModelFormatError(
        f"{path}: not a trajlake model directory: no {NEURAL_FILE}, {BASELINE_FILE} or "
        f"{SPARSE_FILE}{hint}"
    )


def neural_model_dir(path: str | Path) -> Path:
    """The directory, checked to hold a neural model."""
    kind = model_kind(path)
    if kind == "sparse":
        raise ModelFormatError(
            f"{path}: a sparse text model, not a neural one: load it with "
            "`trajlake.serve.load_reranker` (or `trajlake.value.sparse.SparseValueModel`)"
        )
    if kind != "neural":
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
