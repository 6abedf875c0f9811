"""fit_value_net on a learnable toy task: learning, determinism, early stopping, errors."""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trajlake.errors import TrainingError  # noqa: E402
from trajlake.value._fit_batches import _BucketBatchSampler, _encode  # noqa: E402
from trajlake.value.fit import FitConfig, TextExamples, fit_value_net  # noqa: E402
from trajlake.value.metrics import auroc  # noqa: E402
from trajlake.value.neural import ValueNet, load_value_net, score_texts, train_tokenizer  # noqa: E402

NOISE = [
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
    "cat",
    "ls",
    "open",
    "read",
    "write",
    "build",
]


def toy(n: int, seed: int, *, flip: bool = False) -> TextExamples:
    """Texts ending in "tests passed" (1) or "tests failed" (0) among noise; 4 per task."""
    rng = random.Random(seed)
    texts, labels, groups = [], [], []
    for i in range(n):
        y = i % 2
        head = " ".join(rng.choice(NOISE) for _ in range(rng.randint(5, 25)))
        tail = " ".join(rng.choice(NOISE) for _ in range(3))
        texts.append(f"{head} tests {'passed' if y else 'failed'} {tail}")
        labels.append(1 - y if flip else y)
        groups.append(f"task-{seed}-{i // 4}")
    return TextExamples(texts, labels, groups)


TRAIN, VAL = toy(200, 0), toy(60, 1)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return train_tokenizer(TRAIN.texts, vocab_size=200)


def encoder(tokenizer: Any, seed: int = 0) -> ValueNet:
    torch.manual_seed(seed)
    return ValueNet.from_backbone_config(
        {
            "model_type": "bert",
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 512,
        }
    )


def config(**overrides: Any) -> FitConfig:
    base: dict[str, Any] = {"epochs": 3, "batch_size": 8, "lr": 3e-3, "warmup_ratio": 0.0}
    return FitConfig(**(base | {"max_length": 64} | overrides))


@pytest.mark.parametrize("loss", ["bce", "bce+bt"])
def test_fit_learns_the_toy_task(tokenizer: Any, loss: str) -> None:
    model = encoder(tokenizer)
    steps: list[tuple[int, int]] = []
    logged: list[dict[str, Any]] = []
    result = fit_value_net(
        model,
        tokenizer,
        TRAIN,
        VAL,
        config(loss=loss),
        progress=lambda step, total, metrics: steps.append((step, total)),
        log=logged.append,
    )
    assert result.best_val is not None and result.best_val["val_auroc"] is not None
    assert result.best_val["val_auroc"] > 0.9
    assert [r["epoch"] for r in result.history] == [1, 2, 3] and logged == result.history
    assert {"train_loss", "val_loss", "val_auroc", "val_accuracy"} <= set(result.history[0])
    if loss == "bce+bt":  # group batches make same-task pairs exist
        assert all(r["train_bt_pairs"] > 0 for r in result.history)  # type: ignore[operator]
    per_epoch = math.ceil(200 / 8)
    assert steps == [(i, 3 * per_epoch) for i in range(1, 3 * per_epoch + 1)]
    assert result.n_steps == 3 * per_epoch and not result.stopped_early
    assert result.n_train_tokens > 3 * 200 and result.tokens_per_second > 0
    scores = score_texts(model, tokenizer, VAL.texts, max_length=64)
    assert auroc(scores, VAL.labels) == pytest.approx(result.best_val["val_auroc"])


def test_same_seed_same_weights(tokenizer: Any) -> None:
    def run(seed: int) -> dict[str, Any]:
        model = encoder(tokenizer)
        fit_value_net(model, tokenizer, TRAIN, None, config(epochs=1, seed=seed, max_steps=8))
        return model.state_dict()

    first, second, other = run(1), run(1), run(2)
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_early_stopping_restores_the_best_weights(tokenizer: Any, tmp_path: Path) -> None:
    # Validation labels are flipped, so learning the training task makes val AUROC worse: the
    # first evaluation is the best one and training stops after `patience` worse ones.
    model, flipped = encoder(tokenizer), toy(60, 1, flip=True)
    cfg = config(
        epochs=10, eval_every=5, early_stopping_patience=2, checkpoint_dir=str(tmp_path / "ckpt")
    )
    result = fit_value_net(model, tokenizer, TRAIN, flipped, cfg)
    history = result.history
    assert result.stopped_early and len(history) == 3
    assert [r["step"] for r in history] == [5, 10, 15] and result.best_step == 5
    assert result.best_epoch == 1 and result.best_val == history[0]
    assert history[1]["val_auroc"] <= history[0]["val_auroc"]  # type: ignore[operator]
    probs = score_texts(model, tokenizer, flipped.texts, max_length=64)
    y = np.asarray(flipped.labels, dtype=np.float64)
    val_bce = float(-np.mean(y * np.log(probs) + (1 - y) * np.log(1 - probs)))
    assert val_bce == pytest.approx(history[0]["val_loss"], abs=1e-5)
    assert val_bce != pytest.approx(history[-1]["val_loss"], abs=1e-5)
    saved, saved_tok, spec = load_value_net(tmp_path / "ckpt")
    assert spec.extra == {"loss": "bce", "alpha": 1.0} and spec.max_length == 64
    reloaded = score_texts(saved, saved_tok, flipped.texts, max_length=64)
    assert reloaded.tolist() == pytest.approx(probs.tolist(), abs=1e-6)


@contextlib.contextmanager
def accelerate_singletons() -> Iterator[None]:
    """Fresh accelerate singletons inside; the process' own back afterwards."""
    state = pytest.importorskip("accelerate.state")
    shared = [
        state.AcceleratorState._shared_state,
        state.GradientState._shared_state,
        state.PartialState._shared_state,
    ]
    saved = [dict(d) for d in shared]
    for d in shared:
        d.clear()
    try:
        yield
    finally:
        for d, old in zip(shared, saved, strict=True):
            d.clear()
            d.update(old)


def test_an_earlier_trainers_accelerate_state_changes_nothing(
    tokenizer: Any, tmp_path: Path
) -> None:
    # A TRL/transformers trainer run earlier in the process leaves accelerate's singletons set up
    # (here bf16 mixed precision on a forced CPU); fit_value_net must train as in a fresh process,
    # return a model without accelerate's autocast wrapper and checkpoint exactly what it returns.
    from accelerate import Accelerator

    cfg = config(epochs=1, max_steps=4, eval_every=2, checkpoint_dir=str(tmp_path / "ckpt"))
    val = toy(24, 1)
    with accelerate_singletons():
        reference = encoder(tokenizer)
        fit_value_net(reference, tokenizer, TRAIN, val, cfg)
    with accelerate_singletons():
        earlier = Accelerator(mixed_precision="bf16", cpu=True, gradient_accumulation_steps=3)
        model = encoder(tokenizer)
        fit_value_net(model, tokenizer, TRAIN, val, cfg)
        left = (earlier.state.mixed_precision, earlier.gradient_state.num_steps)
    assert "forward" not in vars(model)  # no forward patched by accelerate's `prepare`
    trained, expected = model.state_dict(), reference.state_dict()
    assert all(torch.equal(trained[k], expected[k]) for k in expected)
    saved, saved_tok, _ = load_value_net(tmp_path / "ckpt")
    assert all(torch.equal(v, trained[k]) for k, v in saved.state_dict().items())
    probs = score_texts(model, tokenizer, val.texts, max_length=64)
    reloaded = score_texts(saved, saved_tok, val.texts, max_length=64)
    assert reloaded.tolist() == pytest.approx(probs.tolist(), abs=1e-6)
    assert left == ("bf16", 3)  # the earlier trainer's state is as it left it


def test_max_steps_caps_training_and_evaluates_at_the_end(tokenizer: Any) -> None:
    result = fit_value_net(
        encoder(tokenizer), tokenizer, TRAIN, VAL, config(max_steps=3, grad_accum=2)
    )
    assert result.n_steps == 3 and [r["step"] for r in result.history] == [3]
    assert result.n_train_tokens > 0


@pytest.mark.parametrize(
    ("labels", "loss", "match"),
    [
        ([1, 1, 1, 1], "bce", "no positives|no negatives"),
        ([0, 0, 0, 0], "bce", "no positives"),
        ([1, 1, 0, 0], "bt", "no task group"),
    ],
)
def test_data_that_cannot_train(tokenizer: Any, labels: list[int], loss: str, match: str) -> None:
    data = TextExamples(TRAIN.texts[:4], labels, ["a", "a", "b", "b"])
    with pytest.raises(TrainingError, match=match):
        fit_value_net(encoder(tokenizer), tokenizer, data, None, config(loss=loss))
    with pytest.raises(TrainingError, match="empty"):
        fit_value_net(encoder(tokenizer), tokenizer, TextExamples([], [], []), None, config())


def test_diverged_loss_raises(tokenizer: Any) -> None:
    model = encoder(tokenizer)
    with torch.no_grad():
        model.head.bias.fill_(float("nan"))
    with pytest.raises(TrainingError, match="diverged"):
        fit_value_net(model, tokenizer, TRAIN, None, config())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        TextExamples(["a"], [1, 0], ["t"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        TextExamples(["a"], [2.0], ["t"])
    with pytest.raises(ValueError, match="batch_size"):
        FitConfig(batch_size=0)
    with pytest.raises(ValueError, match="loss"):
        FitConfig(loss="mse")  # type: ignore[arg-type]
    assert FitConfig(loss="bce+bt").grouped and not FitConfig().grouped


def test_bucketed_batches(tokenizer: Any) -> None:
    data = _encode(tokenizer, TRAIN, 64)
    sampler = _BucketBatchSampler(data, 8, grouped=False, seed=0)
    first, second = list(sampler), list(sampler)
    assert len(first) == len(sampler) == 25 and first != second
    for epoch in (first, second):
        assert sorted(i for b in epoch for i in b) == list(range(200))
    spread = np.mean([np.ptp(data.lengths[b]) for b in first])
    assert spread < np.ptp(data.lengths) / 4  # batches hold similar lengths


def test_group_batches_keep_tasks_whole(tokenizer: Any) -> None:
    data = _encode(tokenizer, TRAIN, 64)
    sampler = _BucketBatchSampler(data, 10, grouped=True, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for b in batches:
        assert len(b) <= 10
        for g in set(data.groups[b].tolist()):
            assert set(np.flatnonzero(data.groups == g)) <= set(b)
    oversized = _BucketBatchSampler(data, 3, grouped=True, seed=0)  # tasks of 4 get split
    assert max(len(b) for b in oversized) <= 3


def test_decoder_fit_with_listwise_loss(tokenizer: Any) -> None:
    bpe = train_tokenizer(TRAIN.texts, vocab_size=300, kind="bpe")
    torch.manual_seed(0)
    model = ValueNet.from_backbone_config(
        {
            "model_type": "llama",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "intermediate_size": 64,
            "vocab_size": len(bpe),
            "max_position_embeddings": 512,
        }
    )
    result = fit_value_net(model, bpe, TRAIN, VAL, config(epochs=1, loss="bce+listwise"))
    assert result.history[0]["train_listwise"] is not None
    assert math.isfinite(float(result.history[0]["val_loss"] or math.nan))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_fit_on_cuda(tokenizer: Any) -> None:
    model = encoder(tokenizer)
    result = fit_value_net(model, tokenizer, TRAIN, VAL, config(bf16=True, loss="bce+bt"))
    assert next(model.parameters()).device.type == "cuda"
    assert model.head.weight.dtype == torch.float32
    assert result.best_val is not None and result.best_val["val_auroc"] is not None
    assert result.best_val["val_auroc"] > 0.9
    scores = score_texts(model, tokenizer, VAL.texts, max_length=64)
    assert np.isfinite(scores).all()
