"""The value net itself: a transformer backbone with a float32 scalar head, and its saved spec."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from trajlake.errors import missing_extra

try:
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

try:
    from transformers import AutoConfig, AutoModel, PreTrainedModel
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e

FORMAT = "trajlake.value-net/1"
Architecture = Literal["encoder", "decoder"]
Pooling = Literal["mean", "cls", "last"]


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
