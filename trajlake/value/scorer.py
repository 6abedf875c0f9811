"""A saved neural value model loaded for scoring: weights, tokenizer and serializer together,
turning candidates (lake rows, canonical records, message lists) into P(success).

This is the one place a neural model is loaded to score. It belongs to the value package
because lake scoring, evaluation and the `value-model:<dir>` credit source need it, and they
may not import `trajlake.serve`; the serving side (`trajlake.serve.Reranker`) builds ranking
and best-of-N on top of it. Nothing here imports training code, and torch only inside the
neural-net functions it calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from trajlake.value.model_files import model_id_of, neural_model_dir


class NeuralScorer:
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
    def load(cls, path: str | Path, *, device: str | None = None, batch_size: int = 8) -> Self:
        """Load a model directory written by `trajlake train value` (safetensors only).

        Raises:
            ModelFormatError: the directory is not a neural trajlake model of a format this
                version reads (the message says what was found and what to do).
        """
        from trajlake.value.neural import load_value_net

        directory = neural_model_dir(path)
        if device is None:
            device = default_device()
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

    def score_texts(self, texts: Sequence[str]) -> list[float]:
        """P(success) of already serialized inputs, in order."""
        from trajlake.value.neural import score_texts

        if not texts:
            return []
        scores = score_texts(
            self.model,
            self.tokenizer,
            list(texts),
            batch_size=self.batch_size,
            max_length=self.spec.max_length,
            device=self.device,
        )
        return [float(s) for s in scores]

    def score(self, candidates: Sequence[Any]) -> list[float]:
        """P(success) per candidate, in input order.

        Candidates may be lake rows / canonical dicts (with `messages`), `CanonicalTrajectory`
        records, `{"messages": [...]}` objects or plain OpenAI-style message lists.
        """
        if not candidates:
            return []
        return self.score_texts(self.texts(candidates))


def default_device() -> str:
    """cuda when torch sees a GPU, else cpu (cpu too when torch is not installed)."""
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
