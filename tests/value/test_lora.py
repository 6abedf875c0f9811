"""LoRA recipes: adapters on a tiny decoder train, then fold into plain backbone weights, so the
saved model loads and scores without peft."""

from __future__ import annotations

from pathlib import Path

import pytest

import trajlake as tl
from trajlake.synth import SynthConfig, generate
from trajlake.value.recipe import parse_recipe
from trajlake.value.train import train_value_model

pytest.importorskip("torch")
pytest.importorskip("peft")


@pytest.mark.long
# peft 0.21 still calls a transformers 5 alias that warns about its own deprecation.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_lora_adapters_are_merged_into_the_saved_model(tmp_path: Path) -> None:
    from safetensors import safe_open

    from trajlake.serve import Reranker

    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(generate(SynthConfig(seed=2, n_tasks=20, rollouts_per_task=4)).trajectories)
    recipe = parse_recipe(
        {
            "name": "tiny-decoder-lora",
            "backbone": {
                "config": {
                    "model_type": "qwen2",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 1,
                    "max_position_embeddings": 512,
                },
                "tokenizer": {"train_vocab_size": 800, "train_kind": "bpe"},
                "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
            },
            "serializer": {"max_tokens": 192, "observation_max_tokens": 32},
            "data": {"val_frac": 0.0, "test_frac": 0.4},
            "train": {"epochs": 1, "batch_size": 8, "lr": 1e-3},
        }
    )
    trained = train_value_model(lake, recipe, out=tmp_path / "model")
    with safe_open(str(tmp_path / "model" / "model.safetensors"), "pt") as weights:
        keys = list(weights.keys())
    assert keys and not [k for k in keys if "lora" in k]
    reranker = Reranker.load(tmp_path / "model")
    assert reranker.spec.architecture == "decoder" and reranker.spec.pooling == "last"
    (first,) = lake.sql("SELECT min(trajectory_id) FROM trajectories").rows()[0]
    assert trained.report["n_examples"] > 0
    assert 0.0 < reranker.score([lake.trajectory(first)])[0] < 1.0
