"""What a saved value-model directory holds, and how to tell its kind: `model_card.json` and
either `value_net.json` + `model.safetensors` (+ tokenizer files) for a neural model or
`baseline.json` for the feature baseline. Pickled weights are never loaded.

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
