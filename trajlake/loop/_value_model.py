"""Which value model the loop trains, and how it scores gen-1's candidates before they are stored.

The demo must run on the base install: on Linux, pip's default torch is the CUDA build (about
3 GB with its wheels), too much for a first command. By default (`auto`) it trains the best CPU
recipe measured on held-out tasks of both synthetic environments (docs/value-models.md): the
hybrid sparse text model (`models/hybrid.yaml`, numpy only, seconds). `transformer` trains the
tiny transformer (`models/tiny.yaml`, needs torch and transformers) and `baseline` the feature
baseline (`models/baseline.yaml`, logistic regression on whole-trajectory features read with
SQL). The choice and its reason go into the report and onto the console, so no number is read
as another model's.

The hybrid and the transformer read a trajectory itself (`load_reranker`, as a server loads
them); the baseline reads its features with SQL over a lake. Gen-1's candidates are ranked before
they are ingested (the pick is stored on each rollout), so the baseline scores them in a scratch
lake holding only the candidates, without outcomes: what it would see at inference.
"""

from __future__ import annotations

import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trajlake.errors import missing_extra
from trajlake.loop import _steps

if TYPE_CHECKING:
    from trajlake.synth import SynthBatch
    from trajlake.value.recipe import Recipe

VALUE_MODELS = ("auto", "hybrid", "transformer", "baseline")
"""What `--value-model` accepts: auto is the hybrid, the best CPU recipe."""

TRAIN_EXTRA_HINT = "pip install 'trajlake[train]' for the transformer value model"

LABELS = {
    "hybrid": "hybrid sparse text model (CPU)",
    "transformer": "tiny transformer",
    "baseline": "feature baseline (CPU)",
}
BEST_CPU = "the best CPU recipe on held-out tasks of both synthetic environments"


@dataclass(frozen=True)
class ValueModelChoice:
    """The value model one run trains: its kind and why it was chosen."""

    kind: str
    """'hybrid', 'transformer' or 'baseline'."""
    reason: str

    @property
    def label(self) -> str:
        """The kind in words."""
        return LABELS[self.kind]

    def describe(self) -> str:
        """One line for the console: which model, and why."""
        return f"value model: {self.label} — {self.reason}"

    def recipe(self, *, epochs: int | None, max_tokens: int | None) -> Recipe:
        """The recipe this run trains (the budget applies to the transformer only)."""
        if self.kind == "baseline":
            return _steps.baseline_recipe()
        if self.kind == "hybrid":
            return _steps.hybrid_recipe()
        overrides = {"train.epochs": epochs, "serializer.max_tokens": max_tokens}
        return _steps.tiny_recipe({k: v for k, v in overrides.items() if v is not None})


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or blocked install counts as missing
            found = False
        if not found:
            missing.append(name)
    return missing


def choose_value_model(requested: str = "auto") -> ValueModelChoice:
    """The value model for `requested` ('auto', 'transformer' or 'baseline').

    Raises:
        ValueError: `requested` is none of those.
        MissingExtra: 'transformer' was asked for without torch or transformers.
    """
    if requested not in VALUE_MODELS:
        raise ValueError(f"value model {requested!r}: expected one of {', '.join(VALUE_MODELS)}")
    if requested == "auto":
        return ValueModelChoice("hybrid", f"{BEST_CPU} (docs/value-models.md); numpy only")
    if requested in ("hybrid", "baseline"):
        return ValueModelChoice(requested, "asked for")
    missing = _missing(("torch", "transformers"))
    if missing:
        raise missing_extra(missing[0], "train")
    return ValueModelChoice("transformer", "asked for")


def candidate_scores(choice: ValueModelChoice, model_dir: Path, batch: SynthBatch) -> list[float]:
    """The saved value model's score of every rollout of `batch`, in batch order.

    The hybrid and the transformer are loaded as a server loads them (`load_reranker`) and
    score each task's candidates together; the baseline reads features of all of them from one
    scratch lake.
    """
    if choice.kind in ("hybrid", "transformer"):
        from trajlake.serve import load_reranker

        reranker = load_reranker(model_dir)
        scores = [0.0] * len(batch.trajectories)
        for indices in _steps.candidates_by_task(batch).values():
            task_scores = reranker.score([batch.trajectories[i] for i in indices])
            for i, score in zip(indices, task_scores, strict=True):
                scores[i] = score
        return scores
    from trajlake.api import open_lake
    from trajlake.value.artifacts import load_model

    model = load_model(model_dir)
    ids = [str(t["trajectory_id"]) for t in batch.trajectories]
    with tempfile.TemporaryDirectory(prefix="trajlake-candidates-") as tmp:
        rollouts = Path(tmp) / "candidates.jsonl"
        batch.write_jsonl(rollouts)
        with open_lake(Path(tmp) / "lake", create=True) as scratch:
            snapshot = scratch.ingest(rollouts, generation=1, strict=True).snapshot_id
            if snapshot is None:
                raise RuntimeError("the candidates' scratch lake stored nothing")
            return [float(s) for s in model.score_lake(scratch, snapshot, ids)]
