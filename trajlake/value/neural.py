"""Neural value models: a transformer backbone with a scalar head, its tokenizers, save and load.

A saved model is a directory of safetensors weights, JSON metadata and a tokenizer; never a pickle.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, ValidationError

from trajlake.errors import ModelFormatError, missing_extra

try:
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

try:
    import transformers
    from transformers import AutoConfig, AutoModel, PreTrainedModel, PreTrainedTokenizerBase
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

FORMAT = "trajlake.value-net/1"
Architecture = Literal["encoder", "decoder"]
Pooling = Literal["mean", "cls", "last"]
_WEIGHTS = "model.safetensors"
_SPEC = "value_net.json"
_CONFIG = "backbone_config.json"
_PICKLES = ("pytorch_model.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt")


class ValueNetSpec(BaseModel):
    """What a saved value net is: format, lineage, pooling, token budget and serializer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["trajlake.value-net/1"] = "trajlake.value-net/1"
    backbone: str | None = None
    architecture: Architecture
    pooling: Pooling
    max_length: int
    serializer: dict[str, Any] = {}
    extra: dict[str, Any] = {}


def _architecture(config: Any) -> Architecture:
    """Encoder or decoder, from `is_decoder`, `architectures` or the causal-LM registry."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"encoder-decoder backbones ({config.model_type}) are not supported")
    if getattr(config, "is_decoder", False):
        return "decoder"
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "decoder"
    # BERT-likes register a causal-LM head too; a masked-LM head marks them as encoders.
    model_type = getattr(config, "model_type", "")
    causal = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return "decoder" if causal and not masked else "encoder"


class ValueNet(nn.Module):
    """A backbone (`AutoModel`, no LM head) plus dropout and a Linear(hidden, 1) value head."""

    def __init__(
        self,
        backbone: PreTrainedModel,
        *,
        pooling: Pooling | None = None,
        dropout: float = 0.1,
        backbone_name: str | None = None,
    ) -> None:
        """Wrap `backbone`; `pooling` defaults to mean for encoders and last for decoders."""
        super().__init__()
        if pooling not in (None, "mean", "cls", "last"):
            raise ValueError(f"pooling must be 'mean', 'cls' or 'last', got {pooling!r}")
        self.backbone = backbone
        self.architecture: Architecture = _architecture(backbone.config)
        self.pooling: Pooling = pooling or ("mean" if self.architecture == "encoder" else "last")
        self.backbone_name = backbone_name
        if self.architecture == "decoder" and hasattr(backbone.config, "use_cache"):
            backbone.config.use_cache = False  # no KV cache is needed to score whole texts
        self.dropout = nn.Dropout(dropout)
        # The head stays float32 even under a bf16 backbone (see `forward`).
        self.head = nn.Linear(int(backbone.config.hidden_size), 1, dtype=torch.float32)

    @classmethod
    def from_pretrained_backbone(
        cls,
        name_or_path: str,
        *,
        pooling: Pooling | None = None,
        torch_dtype: torch.dtype | None = None,
        gradient_checkpointing: bool = False,
        trust_remote_code: bool = False,
    ) -> ValueNet:
        """Load a pretrained backbone (hub name or local path) and add a fresh value head."""
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        backbone = AutoModel.from_pretrained(
            name_or_path, config=config, dtype=torch_dtype, trust_remote_code=trust_remote_code
        )
        model = cls(backbone, pooling=pooling, backbone_name=name_or_path)
        if gradient_checkpointing:
            model.enable_gradient_checkpointing()
        return model

    @classmethod
    def from_backbone_config(
        cls, config_dict: dict[str, Any], *, pooling: Pooling | None = None
    ) -> ValueNet:
        """A randomly initialised backbone from a config dict (must name its `model_type`)."""
        if "model_type" not in config_dict:
            raise ValueError("config_dict must contain 'model_type'")
        config = AutoConfig.for_model(**config_dict)
        return cls(AutoModel.from_config(config), pooling=pooling)  # type: ignore[no-untyped-call]

    def enable_gradient_checkpointing(self) -> None:
        """Recompute backbone activations in the backward pass to save memory."""
        self.backbone.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )

    def spec(
        self,
        *,
        max_length: int,
        serializer: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ValueNetSpec:
        """The spec describing this model, for `save_value_net`."""
        return ValueNetSpec(
            backbone=self.backbone_name,
            architecture=self.architecture,
            pooling=self.pooling,
            max_length=max_length,
            serializer=serializer or {},
            extra=extra or {},
        )

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pool `[batch, seq, hidden]` states to `[batch, hidden]` float32 under `self.pooling`."""
        hidden = hidden.float()
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = attention_mask.to(hidden.dtype)
        if self.pooling == "mean":
            summed = (hidden * mask.unsqueeze(-1)).sum(dim=1)
            return summed / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        # The largest position whose mask is 1 is the last real token under left or right padding.
        positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        last = (positions * attention_mask.long()).argmax(dim=1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Float32 logits of shape `[batch]` (sigmoid gives the success probability)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        pooled = self.pool(out.last_hidden_state, attention_mask)
        # The head runs in float32 even when the backbone runs in bf16 (or under autocast): bf16
        # keeps ~3 significant digits, which would erase the small logit differences that rank
        # candidates of one task and make the BCE/BT gradients of confident examples coarse.
        with torch.autocast(device_type=pooled.device.type, enabled=False):
            logits: torch.Tensor = self.head(self.dropout(pooled).to(self.head.weight.dtype))
        return logits.squeeze(-1).float()


# --------------------------------------------------------------------------- tokenizers


def train_tokenizer(
    texts: Sequence[str],
    *,
    vocab_size: int = 2000,
    kind: Literal["wordpiece", "bpe"] = "wordpiece",
    model_max_length: int = 512,
) -> Any:
    """Train a small tokenizer on `texts` locally (a `PreTrainedTokenizerFast`).

    Args:
        texts: the training corpus.
        vocab_size: vocabulary size, special tokens included.
        kind: "wordpiece" for encoders ([PAD]/[UNK]/[CLS]/[SEP], texts framed as [CLS] … [SEP]) or
            byte-level "bpe" for decoders (<pad>/<eos>, <eos> appended to every text).
        model_max_length: the tokenizer's maximum length.

    Returns:
        The tokenizer, truncating on the left (see `encode`).
    """
    import tokenizers as tk
    from transformers import PreTrainedTokenizerFast

    if kind not in ("wordpiece", "bpe"):
        raise ValueError(f"kind must be 'wordpiece' or 'bpe', got {kind!r}")
    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        tok = tk.Tokenizer(tk.models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = tk.normalizers.BertNormalizer(lowercase=False)
        tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
        tok.decoder = tk.decoders.WordPiece()
        trainer: Any = tk.trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=specials, show_progress=False
        )
        template, names = "[CLS] $A [SEP]", {"unk_token": "[UNK]", "cls_token": "[CLS]"}
        names |= {"sep_token": "[SEP]", "pad_token": "[PAD]"}
    else:
        specials = ["<pad>", "<eos>"]
        tok = tk.Tokenizer(tk.models.BPE())
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        template, names = "$A <eos>", {"eos_token": "<eos>", "pad_token": "<pad>"}
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.post_processor = tk.processors.TemplateProcessing(
        single=template,
        special_tokens=[(t, tok.token_to_id(t)) for t in specials if t in template],
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        model_max_length=model_max_length,
        truncation_side="left",
        padding_side="right",
        clean_up_tokenization_spaces=False,
        **names,
    )


def load_tokenizer(name_or_path: str | Path) -> Any:
    """Load a tokenizer with `AutoTokenizer`; pad with eos when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.truncation_side = "left"
    return tokenizer


def encode(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int
) -> dict[str, torch.Tensor]:
    """Tokenize and pad `texts` to `input_ids` / `attention_mask` tensors.

    The serializer already fits texts into the token budget, so truncation is only a safety net:
    it keeps a text's LAST tokens, because the end of a trajectory (final tests, submission)
    carries the outcome signal, and the special tokens stay in place ([CLS] … [SEP], or the
    trailing eos) because the tokenizer truncates before adding them (`truncation_side="left"`).
    """
    tokenizer.truncation_side = "left"
    enc = tokenizer(
        list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt"
    )
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


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


# --------------------------------------------------------------------------- save / load


def save_value_net(
    directory: str | Path, model: ValueNet, tokenizer: PreTrainedTokenizerBase, spec: ValueNetSpec
) -> Path:
    """Write `model`, `tokenizer` and `spec` to `directory` (created if needed); return it.

    Files: `model.safetensors` (full state dict, head included), `value_net.json` (spec plus
    library versions), `backbone_config.json` and the tokenizer's files.
    """
    from safetensors.torch import save_file

    if (spec.architecture, spec.pooling) != (model.architecture, model.pooling):
        raise ValueError(
            f"spec says {spec.architecture}/{spec.pooling} but the model is "
            f"{model.architecture}/{model.pooling}"
        )
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    # Cloning to contiguous tensors unshares tied weights, which safetensors refuses to save.
    state = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / _WEIGHTS), metadata={"format": FORMAT})
    meta = spec.model_dump(mode="json") | {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__}
    }
    (path / _SPEC).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    config = model.backbone.config.to_dict()
    (path / _CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True, default=str) + "\n")
    tokenizer.save_pretrained(str(path))
    return path


def _read_spec(path: Path) -> ValueNetSpec:
    spec_file = path / _SPEC
    if not spec_file.is_file():
        raise ModelFormatError(
            f"{path} is not a saved value net: {_SPEC} is missing (expected format {FORMAT!r})"
        )
    try:
        meta = json.loads(spec_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelFormatError(f"{spec_file} is not valid JSON: {e}") from e
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != FORMAT:
        raise ModelFormatError(
            f"{path} holds a model in format {found!r}, but this version of trajlake reads "
            f"{FORMAT!r}; load it with the trajlake version that wrote it, or retrain"
        )
    meta.pop("versions", None)
    try:
        return ValueNetSpec.model_validate(meta)
    except ValidationError as e:
        raise ModelFormatError(f"{spec_file} is not a valid {FORMAT} spec: {e}") from e


def _read_backbone_config(path: Path) -> Any:
    from transformers import CONFIG_MAPPING

    config_file = path / _CONFIG
    if not config_file.is_file():
        raise ModelFormatError(f"{path} is missing {_CONFIG}")
    try:
        config = json.loads(config_file.read_text())
        config_class = CONFIG_MAPPING[config["model_type"]]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise ModelFormatError(f"{config_file} is not a backbone config this install reads") from e
    return config_class.from_dict(config)


def _load_weights(path: Path, model: ValueNet, device: str) -> None:
    from safetensors.torch import load_file

    weights = path / _WEIGHTS
    if not weights.is_file():
        pickles = sorted(p.name for pattern in _PICKLES for p in path.glob(pattern))
        hint = f"; found only pickled weights {pickles}, which are never loaded" if pickles else ""
        raise ModelFormatError(f"{path} has no {_WEIGHTS}{hint}")
    state = load_file(str(weights), device=device)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ModelFormatError(
            f"{weights} does not match the model: missing keys {missing[:10]}, "
            f"unexpected keys {unexpected[:10]}"
        )
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:  # shape mismatches
        raise ModelFormatError(f"{weights} does not match the model: {e}") from e


def load_value_net(
    directory: str | Path, *, device: str = "cpu", torch_dtype: torch.dtype | None = None
) -> tuple[ValueNet, Any, ValueNetSpec]:
    """Load a value net saved by `save_value_net`: `(model, tokenizer, spec)`, model in eval mode.

    The backbone is rebuilt from the saved config (no hub access) and the weights are read with
    safetensors only. `torch_dtype` sets the backbone dtype; the head stays float32.

    Raises:
        NoSuchModel: the directory does not exist.
        ModelFormatError: files missing, another format version, invalid JSON, weights that do not
            match the model, or only pickled weights.
    """
    from trajlake.errors import NoSuchModel

    path = Path(directory)
    if not path.is_dir():
        raise NoSuchModel(f"no saved value net at {path}")
    spec = _read_spec(path)
    config = _read_backbone_config(path)
    backbone = AutoModel.from_config(config, dtype=torch_dtype)  # type: ignore[no-untyped-call]
    model = ValueNet(backbone, pooling=spec.pooling, backbone_name=spec.backbone)
    if model.architecture != spec.architecture:
        raise ModelFormatError(f"{path}: the spec says {spec.architecture}, the config does not")
    _load_weights(path, model, device)
    model.to(device)
    model.eval()
    return model, load_tokenizer(path), spec
