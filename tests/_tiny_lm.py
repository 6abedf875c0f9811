"""A tiny Llama causal LM built from a config (no hub download), for trainer tests."""

from __future__ import annotations

from typing import Any


def tiny_llama(tok: Any, **overrides: Any) -> Any:
    """One layer, 32 wide, seeded: the same weights on every call with the same arguments."""
    import torch
    import transformers

    settings: dict[str, Any] = {
        "vocab_size": len(tok),
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 8192,
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
    }
    config = transformers.LlamaConfig(**(settings | overrides))
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config)
