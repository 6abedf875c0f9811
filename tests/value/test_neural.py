"""ValueNet: architecture detection, pooling, truncation, tokenizers, save/load and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from trajlake.errors import ModelFormatError, NoSuchModel  # noqa: E402
from trajlake.value.neural import (  # noqa: E402
    ValueNet,
    encode,
    load_tokenizer,
    load_value_net,
    save_value_net,
    score_texts,
    train_tokenizer,
)

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "edit",
    "file",
    "run",
    "patch",
    "diff",
    "grep",
    "tests",
    "passed",
    "failed",
    "ok",
]
TEXTS = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 11)) for i in range(40)]


def bert_config(vocab_size: int) -> dict[str, Any]:
    return {
        "model_type": "bert",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": vocab_size,
        "max_position_embeddings": 512,
    }


def llama_config(vocab_size: int) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "vocab_size": vocab_size,
        "max_position_embeddings": 512,
    }


@pytest.fixture(scope="module")
def wordpiece() -> Any:
    return train_tokenizer(TEXTS, vocab_size=200)


@pytest.fixture(scope="module")
def bpe() -> Any:
    return train_tokenizer(TEXTS, vocab_size=300, kind="bpe")


@pytest.fixture(scope="module")
def encoder(wordpiece: Any) -> ValueNet:
    torch.manual_seed(0)
    return ValueNet.from_backbone_config(bert_config(len(wordpiece))).eval()


@pytest.fixture(scope="module")
def decoder(bpe: Any) -> ValueNet:
    torch.manual_seed(0)
    return ValueNet.from_backbone_config(llama_config(len(bpe))).eval()


@pytest.mark.parametrize(
    ("config", "architecture", "pooling"),
    [
        (bert_config(50), "encoder", "mean"),
        (llama_config(50), "decoder", "last"),
        ({**llama_config(50), "model_type": "qwen2"}, "decoder", "last"),
        ({"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 50,
          "bos_token_id": 0, "eos_token_id": 0}, "decoder", "last"),
    ],
)  # fmt: skip
def test_architecture_and_default_pooling(
    config: dict[str, Any], architecture: str, pooling: str
) -> None:
    model = ValueNet.from_backbone_config(config)
    assert (model.architecture, model.pooling) == (architecture, pooling)
    assert ValueNet.from_backbone_config(config, pooling="cls").pooling == "cls"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="model_type"):
        ValueNet.from_backbone_config({"hidden_size": 8})
    with pytest.raises(ValueError, match="pooling"):
        ValueNet.from_backbone_config(bert_config(50), pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        train_tokenizer(TEXTS, kind="unigram")  # type: ignore[arg-type]


def test_forward_shape_and_float32_head(encoder: ValueNet, wordpiece: Any) -> None:
    batch = encode(wordpiece, TEXTS[:5], 64)
    logits = encoder(batch["input_ids"], batch["attention_mask"])
    assert logits.shape == (5,) and logits.dtype == torch.float32
    bf16 = ValueNet.from_backbone_config(bert_config(len(wordpiece)))
    bf16.backbone.to(torch.bfloat16)
    out = bf16.eval()(batch["input_ids"], batch["attention_mask"])
    assert out.dtype == torch.float32 and bf16.head.weight.dtype == torch.float32


@pytest.mark.parametrize("side", ["left", "right"])
def test_last_token_pooling_with_left_and_right_padding(
    decoder: ValueNet, bpe: Any, side: str
) -> None:
    bpe.padding_side = side
    try:
        batch = encode(bpe, [TEXTS[0], TEXTS[5], TEXTS[10]], 64)
    finally:
        bpe.padding_side = "right"
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert not bool(mask.all())  # the texts differ in length, so there is padding
    with torch.no_grad():
        hidden = decoder.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        pooled = decoder.pool(hidden, mask)
        for row in range(len(ids)):
            n = int(mask[row].sum())
            last = n - 1 if side == "right" else ids.shape[1] - 1
            assert ids[row, last].item() == bpe.eos_token_id  # the eos closes every text
            assert torch.equal(pooled[row], hidden[row, last].float())
        logits = decoder(ids, mask)
        assert torch.allclose(logits, decoder.head(pooled).squeeze(-1))


def test_mean_pooling_ignores_padding(encoder: ValueNet, wordpiece: Any) -> None:
    batch = encode(wordpiece, [TEXTS[1], TEXTS[9]], 64)
    mask = batch["attention_mask"]
    with torch.no_grad():
        hidden = encoder.backbone(**batch).last_hidden_state
        pooled = encoder.pool(hidden, mask)
    for row in range(2):
        n = int(mask[row].sum())
        assert torch.allclose(pooled[row], hidden[row, :n].mean(dim=0), atol=1e-6)


def test_truncation_keeps_the_end_and_special_tokens(wordpiece: Any, bpe: Any) -> None:
    text = "alpha beta gamma delta tests passed"
    ids = encode(wordpiece, [text], 4)["input_ids"][0].tolist()
    assert wordpiece.convert_ids_to_tokens(ids) == ["[CLS]", "tests", "passed", "[SEP]"]
    ids = encode(bpe, [text], 3)["input_ids"][0].tolist()
    assert bpe.decode(ids[:-1]).strip() == "tests passed" and ids[-1] == bpe.eos_token_id


def test_score_texts_restores_order(encoder: ValueNet, wordpiece: Any) -> None:
    texts = TEXTS[:9]
    batched = score_texts(encoder, wordpiece, texts, max_length=64, batch_size=4)
    one_by_one = [score_texts(encoder, wordpiece, [t], max_length=64)[0] for t in texts]
    assert batched.dtype.name == "float64" and batched.shape == (9,)
    assert batched.tolist() == pytest.approx(one_by_one, abs=1e-6)
    assert ((batched > 0) & (batched < 1)).all()
    assert score_texts(encoder, wordpiece, [], max_length=64).shape == (0,)


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_save_load_round_trip(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    model: ValueNet = request.getfixturevalue(kind)
    tokenizer = request.getfixturevalue("wordpiece" if kind == "encoder" else "bpe")
    spec = model.spec(max_length=64, serializer={"kind": "full"}, extra={"loss": "bce"})
    save_value_net(tmp_path / "m", model, tokenizer, spec)
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"model.safetensors", "value_net.json", "backbone_config.json"} <= files
    meta = json.loads((tmp_path / "m" / "value_net.json").read_text())
    assert meta["format"] == "trajlake.value-net/1" and set(meta["versions"]) == {
        "torch",
        "transformers",
    }
    loaded, loaded_tok, loaded_spec = load_value_net(tmp_path / "m")
    assert loaded_spec == spec and not loaded.training
    before = score_texts(model, tokenizer, TEXTS, max_length=64)
    after = score_texts(loaded, loaded_tok, TEXTS, max_length=64)
    assert after.tolist() == before.tolist()


def test_save_rejects_a_spec_that_does_not_fit(encoder: ValueNet, wordpiece: Any) -> None:
    spec = encoder.spec(max_length=8).model_copy(update={"pooling": "last"})
    with pytest.raises(ValueError, match="spec says"):
        save_value_net("unused", encoder, wordpiece, spec)


@pytest.fixture
def saved(encoder: ValueNet, wordpiece: Any, tmp_path: Path) -> Path:
    return save_value_net(tmp_path / "model", encoder, wordpiece, encoder.spec(max_length=64))


def _set_format(path: Path, value: object) -> None:
    meta = json.loads((path / "value_net.json").read_text())
    meta["format"] = value
    (path / "value_net.json").write_text(json.dumps(meta))


def test_other_format_version_fails_clearly(saved: Path) -> None:
    _set_format(saved, "trajlake.value-net/2")
    with pytest.raises(ModelFormatError) as info:
        load_value_net(saved)
    message = str(info.value)
    assert str(saved) in message
    assert "'trajlake.value-net/2'" in message and "'trajlake.value-net/1'" in message


def test_foreign_or_broken_metadata_fails_clearly(saved: Path) -> None:
    (saved / "value_net.json").write_text(json.dumps({"model": "something else"}))
    with pytest.raises(ModelFormatError, match="format None"):
        load_value_net(saved)
    (saved / "value_net.json").write_text("{not json")
    with pytest.raises(ModelFormatError, match="not valid JSON"):
        load_value_net(saved)
    (saved / "value_net.json").unlink()
    with pytest.raises(ModelFormatError, match=r"value_net\.json is missing"):
        load_value_net(saved)
    with pytest.raises(NoSuchModel):
        load_value_net(saved / "nowhere")


def test_pickled_weights_are_never_loaded(saved: Path, encoder: ValueNet) -> None:
    (saved / "model.safetensors").unlink()
    torch.save(encoder.state_dict(), saved / "pytorch_model.bin")
    with pytest.raises(ModelFormatError, match=r"pickled weights \['pytorch_model.bin'\]"):
        load_value_net(saved)


def test_missing_and_unexpected_weight_keys(saved: Path) -> None:
    weights = saved / "model.safetensors"
    state = load_file(str(weights))
    state["extra.weight"] = state.pop("head.weight")
    save_file(state, str(weights))
    with pytest.raises(ModelFormatError, match=r"missing keys \['head.weight'\].*extra.weight"):
        load_value_net(saved)


def test_from_pretrained_backbone_reads_a_local_checkpoint(tmp_path: Path, bpe: Any) -> None:
    torch.manual_seed(0)
    source = ValueNet.from_backbone_config(llama_config(len(bpe)))
    source.backbone.save_pretrained(tmp_path / "backbone")
    model = ValueNet.from_pretrained_backbone(
        str(tmp_path / "backbone"), gradient_checkpointing=True, torch_dtype=torch.float32
    )
    assert model.architecture == "decoder" and model.backbone_name == str(tmp_path / "backbone")
    for name, value in source.backbone.state_dict().items():
        assert torch.equal(model.backbone.state_dict()[name], value)
    assert model.spec(max_length=16).backbone == str(tmp_path / "backbone")


def test_load_tokenizer_pads_with_eos(tmp_path: Path, bpe: Any) -> None:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(bpe.backend_tokenizer.to_str())
    backend.no_padding()
    bare = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")
    assert bare.pad_token is None
    bare.save_pretrained(str(tmp_path / "tok"))
    loaded = load_tokenizer(tmp_path / "tok")
    assert loaded.pad_token == "<eos>" and loaded.truncation_side == "left"
