"""Neural value models: a transformer backbone with a scalar head, its tokenizers, save and load.

A saved model is a directory of safetensors weights, JSON metadata and a tokenizer; never a pickle.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from trajlake.errors import missing_extra
from trajlake.value._neural_io import load_value_net, save_value_net
from trajlake.value._neural_model import FORMAT, ValueNet, ValueNetSpec
from trajlake.value._neural_tokenizers import encode, load_tokenizer, train_tokenizer

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

try:
    from transformers import PreTrainedTokenizerBase
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e

__all__ = [
    "FORMAT",
    "ValueNet",
    "ValueNetSpec",
    "encode",
    "load_tokenizer",
    "load_value_net",
    "save_value_net",
    "score_texts",
    "train_tokenizer",
]


def score_texts(
    model: ValueNet,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    max_length: int,
    batch_size: int = 8,
    device: str | torch.device | None = None,
) -> npt.NDArray[np.float64]:
    """Success probabilities (sigmoid of the logits) for `texts`, in their order.

    Texts are scored in length-bucketed batches (sorted by token count, so little padding is
    computed) in eval mode without gradients; `device` defaults to the model's.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts = list(texts)
    if not texts:
        return np.zeros(0, dtype=np.float64)
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    tokenizer.truncation_side = "left"
    lengths = [
        len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    ]
    order = np.argsort(lengths, kind="stable")
    out = np.zeros(len(texts), dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                idx = order[start : start + batch_size]
                enc = encode(tokenizer, [texts[i] for i in idx], max_length)
                logits = model(enc["input_ids"].to(dev), enc["attention_mask"].to(dev))
                out[idx] = torch.sigmoid(logits.double()).cpu().numpy()
    finally:
        model.train(was_training)
    return out
