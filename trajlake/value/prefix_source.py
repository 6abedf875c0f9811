"""A trained neural prefix value model as a credit value source (`value-model:<model dir>`):
V(s_t) for every turn boundary of every trajectory, scored from the lake's messages.

Credit may not import value models, so this source joins credit's registry from here: `SPEC`
is the `value-model:` entry point (pyproject.toml), taking the targets that are directories
(credit's own `value-model:` spec takes `builtin` and JSON files).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake.credit._types import TrajectoryTurns, ValueSource
from trajlake.credit.registry import ValueSourceSpec
from trajlake.errors import ModelFormatError

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

log = logging.getLogger(__name__)


class NeuralPrefixValues:
    """Values from a `prefix-value` model trained with `trajlake train value`.

    Prefix t (the trajectory up to and including turn t's observations) is the state s_{t+1},
    so the model gives V(s_1) … V(s_{T-1}); V(s_T) is the outcome (the model's own estimate
    when unknown) and V(s_0), before any action, is the training set's success rate (the
    model's prior, from its card). Trajectories whose turn count differs from the serialized
    conversation's (other thread layouts) are left out and logged.
    """

    name = "value-model"

    def __init__(self, path: str | Path, *, lake: LakeStore, at: int | None = None) -> None:
        from trajlake.value.artifacts import load_model

        self.model = load_model(path)
        card = self.model.card
        if card is None or card.kind != "prefix-value":
            raise ModelFormatError(
                f"{path}: a credit value source needs a prefix-value model (kind "
                f"{card.kind if card else 'unknown'!r}); train one with models/tiny-prefix.yaml"
            )
        train = card.split.counts.get("train", {})
        self.prior = train.get("positives", 0) / max(train.get("examples", 0), 1)
        self.lake = lake
        self.at = at

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """V(s_0) … V(s_T) per trajectory id (T + 1 values)."""
        from trajlake.value.conversations import read_conversations

        snapshot = self.lake.snapshot(self.at).snapshot_id
        convs = read_conversations(self.lake, snapshot, [t.trajectory_id for t in trajectories])
        scorer = self.model.scorer
        out: dict[str, list[float]] = {}
        for trajectory in trajectories:
            conv = convs.get(trajectory.trajectory_id)
            if conv is None:
                continue
            texts = scorer.serializer.prefix_texts(conv)
            if len(texts) != len(trajectory.turns) or not texts:
                log.info(
                    "%s: %d turns in the lake, %d in the conversation: left out",
                    trajectory.trajectory_id,
                    len(trajectory.turns),
                    len(texts),
                )
                continue
            scores = scorer.score_texts(texts)
            last = scores[-1] if trajectory.outcome is None else float(trajectory.outcome)
            out[trajectory.trajectory_id] = [self.prior, *scores[:-1], last]
        return out


def _build(name: str, **kw: Any) -> ValueSource:
    return NeuralPrefixValues(name.removeprefix("value-model:"), **kw)


SPEC = ValueSourceSpec(
    "value-model:",
    _build,
    usage="value-model:<path.json|model dir|builtin>",
    reads_observations=True,  # it reads the trajectories' messages at the run's snapshot
    accepts=lambda target: target not in ("", "builtin") and Path(target).is_dir(),
)
"""`value-model:<model dir>` in credit's registry (the `trajlake.value_sources` entry point)."""
