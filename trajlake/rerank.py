"""Best-of-N reranking at inference: load a trained value model, score candidate trajectories
(lake rows, canonical records or plain message lists) and pick the best, optionally with the
R2E-Gym hybrid rule (verifier top-k, then execution signals).

    from trajlake.rerank import Reranker
    reranker = Reranker.load("lake/models/tiny-value-s3-1a2b3c4d")
    best = reranker.best_of_n(candidates)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Ranked", "Reranker", "hybrid_select"]


@dataclass(frozen=True)
class Ranked:
    """One candidate's place in a ranking."""

    index: int
    """Position in the input list."""
    score: float
    candidate: Any


class Reranker:
    """A saved neural value model ready to score candidates (CPU or GPU, batched)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        spec: Any,
        *,
        model_id: str,
        device: str = "cpu",
        batch_size: int = 8,
    ) -> None:
        from trajlake.value.serialize import Serializer

        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        self.model_id = model_id
        self.device = device
        self.batch_size = batch_size
        self.serializer = Serializer.from_dict(spec.serializer).with_tokenizer(tokenizer)

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None, batch_size: int = 8) -> Reranker:
        """Load a model directory written by `trajlake train value` (safetensors only).

        Raises:
            ModelFormatError: the directory is not a neural trajlake model of a format this
                version reads (the message says what was found and what to do).
        """
        from trajlake.value.artifacts import model_id_of, neural_model_dir
        from trajlake.value.neural import load_value_net

        directory = neural_model_dir(path)
        if device is None:
            device = _default_device()
        model, tokenizer, spec = load_value_net(directory, device=device)
        return cls(
            model,
            tokenizer,
            spec,
            model_id=model_id_of(directory),
            device=device,
            batch_size=batch_size,
        )

    def info(self) -> dict[str, Any]:
        """What is being served: id, backbone, pooling, serializer, device."""
        return {
            "model_id": self.model_id,
            "backbone": self.spec.backbone,
            "architecture": self.spec.architecture,
            "pooling": self.spec.pooling,
            "max_length": self.spec.max_length,
            "serializer": self.spec.serializer,
            "device": self.device,
        }

    def texts(self, candidates: Sequence[Any]) -> list[str]:
        """The model inputs of candidates (whole trajectories; prefix models see the longest
        prefix)."""
        from trajlake.value.serialize import as_conversation, n_turns

        out = []
        for candidate in candidates:
            conv = as_conversation(candidate)
            turn = max(n_turns(conv) - 1, 0) if self.serializer.kind == "prefix" else None
            out.append(self.serializer.text(conv, turn=turn))
        return out

    def score(self, candidates: Sequence[Any]) -> list[float]:
        """P(success) per candidate, in input order.

        Candidates may be lake rows / canonical dicts (with `messages`), `CanonicalTrajectory`
        records, `{"messages": [...]}` objects or plain OpenAI-style message lists.
        """
        from trajlake.value.neural import score_texts

        if not candidates:
            return []
        scores = score_texts(
            self.model,
            self.tokenizer,
            self.texts(candidates),
            batch_size=self.batch_size,
            max_length=self.spec.max_length,
            device=self.device,
        )
        return [float(s) for s in scores]

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


def _default_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
