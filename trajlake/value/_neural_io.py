"""Saving and loading value nets: safetensors weights, JSON spec and config, and the tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trajlake.errors import ModelFormatError, missing_extra
from trajlake.value._neural_model import FORMAT, ValueNet, ValueNetSpec
from trajlake.value._neural_tokenizers import load_tokenizer

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

try:
    import transformers
    from transformers import AutoModel, PreTrainedTokenizerBase
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e

_WEIGHTS = "model.safetensors"
_SPEC = "value_net.json"
_CONFIG = "backbone_config.json"
_PICKLES = ("pytorch_model.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt")


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
