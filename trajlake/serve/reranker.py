"""Best-of-N reranking at inference: a saved value model that scores candidate trajectories
(lake rows, canonical records or plain message lists) and picks the best, optionally with the
R2E-Gym hybrid rule (verifier top-k, then execution signals).

    from trajlake.serve import load_reranker
    reranker = load_reranker("lake/models/tiny-value-s3-1a2b3c4d")
    best = reranker.best_of_n(candidates)

Loading and scoring are `trajlake.value.scorer.NeuralScorer` for transformer models and
`trajlake.value.sparse.SparseValueModel` for sparse text models (lake scoring and credit need
them too and sit below serving); `Reranker` and `SparseReranker` add ranking and selection, and
are what the HTTP server (`trajlake.serve.server`) serves. Nothing here imports training code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajlake.value.model_files import model_id_of, model_kind
from trajlake.value.scorer import NeuralScorer
from trajlake.value.sparse import SparseValueModel

__all__ = ["Ranked", "Reranker", "SparseReranker", "hybrid_select", "load_reranker"]


@dataclass(frozen=True)
class Ranked:
    """One candidate's place in a ranking."""

    index: int
    """Position in the input list."""
    score: float
    candidate: Any


class _Ranking:
    """Ranking and best-of-N selection over a scorer's `score`."""

    def score(self, candidates: Sequence[Any]) -> list[float]:
        raise NotImplementedError

    def rank(self, candidates: Sequence[Any]) -> list[Ranked]:
        """Candidates best first (ties keep input order)."""
        scores = self.score(candidates)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [Ranked(i, scores[i], candidates[i]) for i in order]

    def best_of_n(
        self,
        candidates: Sequence[Any],
        *,
        signals: Mapping[str, Sequence[float]] | None = None,
    ) -> Ranked:
        """The best candidate; with `signals` (e.g. ``{"regression": [...], "testgen": [...]}``,
        higher is better) the R2E-Gym hybrid rule decides among the verifier's top half."""
        if not candidates:
            raise ValueError("best_of_n needs at least one candidate")
        scores = self.score(candidates)
        order = hybrid_select(scores, signals or {})
        best = order[0]
        return Ranked(best, scores[best], candidates[best])


class Reranker(NeuralScorer, _Ranking):
    """A saved neural value model ready to score and rank candidates (CPU or GPU, batched).

    `Reranker.load(path, device=..., batch_size=...)` reads a model directory written by
    `trajlake train value` (safetensors only); `score`, `texts` and `info` are the scorer's.
    """


class SparseReranker(_Ranking):
    """A saved sparse text value model (`kind: sparse` recipes) ready to score and rank
    candidates; numpy on the CPU, no batching needed."""

    def __init__(self, model: SparseValueModel, *, model_id: str) -> None:
        self.model = model
        self.model_id = model_id

    @classmethod
    def load(cls, path: str | Path) -> SparseReranker:
        """Read a sparse model directory written by `trajlake train value`."""
        return cls(SparseValueModel.load(path), model_id=model_id_of(path))

    def score(self, candidates: Sequence[Any]) -> list[float]:
        """P(success) per candidate, in input order (any candidate shape `Reranker` takes)."""
        return [float(s) for s in self.model.score(candidates)]

    def info(self) -> dict[str, Any]:
        """What is being served: id, kind, features, temperature, members."""
        return {
            "model_id": self.model_id,
            "kind": "sparse",
            "features": self.model.features.fields,
            "scalars": self.model.features.scalars,
            "members": len(self.model.members),
            "temperature": self.model.temperature,
            "device": "cpu",
        }


def load_reranker(
    path: str | Path, *, device: str | None = None, batch_size: int = 8
) -> Reranker | SparseReranker:
    """The reranker of a saved model directory, neural or sparse (`device` and `batch_size`
    apply to neural models).

    Raises:
        ModelFormatError: the directory holds no model a reranker serves (a feature baseline
            reads its features from a lake: use `trajlake score` / `rerank` with --lake).
    """
    if model_kind(path) == "sparse":
        return SparseReranker.load(path)
    return Reranker.load(path, device=device, batch_size=batch_size)


def hybrid_select(
    scores: Sequence[float],
    signals: Mapping[str, Sequence[float]],
    *,
    keep: int | None = None,
) -> list[int]:
    """Candidate indices in selection order (R2E-Gym, methods.md §5.4).

    Keep the verifier's top k = max(3, ⌊n/2⌋) (or `keep`), then order those by each execution
    signal in turn (e.g. regression tests passed, then generated tests passed), then by score;
    the rest follow by score. Without signals this is plain score order. Ties keep input order.
    """
    n = len(scores)
    for name, values in signals.items():
        if len(values) != n:
            raise ValueError(f"signal {name!r} has {len(values)} values for {n} candidates")
    by_score = sorted(range(n), key=lambda i: (-scores[i], i))
    k = min(n, keep if keep is not None else max(3, n // 2))
    top, rest = by_score[:k], by_score[k:]
    names = list(signals)

    def key(i: int) -> tuple[float, ...]:
        return (*(-_finite(signals[s][i]) for s in names), -scores[i], float(i))

    return sorted(top, key=key) + rest


def _finite(value: float) -> float:
    """Missing signals (None/NaN) rank last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return -math.inf
    return float(value)
