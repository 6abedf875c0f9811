"""ValueTrainer on a learnable toy task: every loss kind learns, a resumed run matches an
uninterrupted one, determinism, early stopping with the best weights restored, errors."""

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

from transformers import TrainerCallback  # noqa: E402

from trajlake.errors import TrainingError  # noqa: E402
from trajlake.value.metrics import auroc  # noqa: E402
from trajlake.value.neural import ValueNet, score_texts, train_tokenizer  # noqa: E402
from trajlake.value.trainer import train_value_net  # noqa: E402
from trajlake.value.trainer_args import ValueTrainingArguments  # noqa: E402
from trajlake.value.trainer_data import (  # noqa: E402
    BucketBatchSampler,
    EncodedExamples,
    TextExamples,
)

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


def arguments(out: Path, *, val: bool = True, **overrides: Any) -> ValueTrainingArguments:
    """Evaluate, log and checkpoint every epoch (or every eval_steps); best by val AUROC."""
    strategy = "steps" if "eval_steps" in overrides else "epoch"
    every = {"save_steps": overrides["eval_steps"]} if strategy == "steps" else {}
    base: dict[str, Any] = {
        "output_dir": str(out),
        "num_train_epochs": 3,
        "per_device_train_batch_size": 8,
        "learning_rate": 3e-3,
        "max_length": 64,
        "logging_strategy": strategy,
        "logging_steps": overrides.get("eval_steps", 500),
        "save_strategy": strategy,
        "eval_strategy": strategy if val else "no",
        "load_best_model_at_end": val,
        "metric_for_best_model": "auroc" if val else None,
        "greater_is_better": True if val else None,
        "dataloader_pin_memory": False,
        **every,
    }
    return ValueTrainingArguments(**(base | overrides))


class Steps(TrainerCallback):
    """Records (step, total) after each optimizer step."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.seen.append((state.global_step, state.max_steps))


@pytest.mark.parametrize("loss", ["bce", "bt", "listwise", "bce+bt", "bce+listwise"])
def test_every_loss_kind_learns_the_toy_task(tokenizer: Any, tmp_path: Path, loss: str) -> None:
    model, steps = encoder(tokenizer), Steps()
    logged: list[dict[str, Any]] = []
    args = arguments(tmp_path, loss=loss, num_train_epochs=2)
    result = train_value_net(
        model, tokenizer, TRAIN, VAL, args, callbacks=[steps], log=logged.append
    )
    assert result.best_val is not None and result.best_val["val_auroc"] is not None
    assert result.best_val["val_auroc"] > 0.9
    assert [r["epoch"] for r in result.history] == [1, 2] and logged == result.history
    assert {"train_loss", "val_loss", "val_auroc", "val_accuracy"} <= set(result.history[0])
    if "bt" in loss:  # group batches make same-task pairs exist
        assert all(r["train_bt_pairs"] > 0 for r in result.history)  # type: ignore[operator]
    if "listwise" in loss:
        assert all(r["train_listwise"] is not None for r in result.history)
    per_epoch = math.ceil(200 / 8)
    assert steps.seen == [(i, 2 * per_epoch) for i in range(1, 2 * per_epoch + 1)]
    assert result.n_steps == 2 * per_epoch and not result.stopped_early
    assert result.n_train_tokens > 2 * 200 and result.tokens_per_second > 0
    scores = score_texts(model, tokenizer, VAL.texts, max_length=64)
    assert auroc(scores, VAL.labels) == pytest.approx(result.best_val["val_auroc"])


class StopAt(TrainerCallback):
    """Ends training after `step` optimizer steps, as an interrupted run would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            control.should_training_stop = True


@pytest.mark.parametrize("stop", [6, 12])  # mid-epoch and at an epoch's end
def test_a_resumed_run_matches_an_uninterrupted_one(
    tokenizer: Any, tmp_path: Path, stop: int
) -> None:
    # Dropout is on, the batches of a ranking loss are whole task groups and the order changes
    # every epoch: resuming restores weights, optimizer, schedule, RNG and the batch order.
    train = toy(96, 0)  # 12 steps an epoch

    def run(out: Path, model: ValueNet, **kwargs: Any) -> Any:
        args = arguments(out, loss="bce+bt", num_train_epochs=2, eval_steps=6, warmup_steps=0.2)
        return train_value_net(model, tokenizer, train, VAL, args, **kwargs)

    whole = encoder(tokenizer)
    uninterrupted = run(tmp_path / "a", whole)
    run(tmp_path / "b", encoder(tokenizer), callbacks=[StopAt(stop)])
    checkpoint = tmp_path / "b" / f"checkpoint-{stop}"
    assert checkpoint.is_dir()
    resumed_model = encoder(tokenizer, seed=1)  # the checkpoint's weights replace these
    resumed = run(tmp_path / "b", resumed_model, resume_from_checkpoint=str(checkpoint))
    expected, got = whole.state_dict(), resumed_model.state_dict()
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6)
    assert resumed.n_steps == uninterrupted.n_steps == 24
    assert resumed.best_step == uninterrupted.best_step
    after = [r for r in uninterrupted.history if r["step"] > stop]
    again = [r for r in resumed.history if r["step"] > stop]
    assert len(again) == len(after) > 0
    for mine, theirs in zip(again, after, strict=True):
        assert mine["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-5, abs=1e-6)
        assert mine["val_auroc"] == pytest.approx(theirs["val_auroc"], abs=1e-9)
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5, abs=1e-6)


def test_same_seed_same_weights(tokenizer: Any, tmp_path: Path) -> None:
    def run(seed: int) -> dict[str, Any]:
        model = encoder(tokenizer)
        args = arguments(tmp_path / str(seed), val=False, seed=seed, max_steps=8)
        train_value_net(model, tokenizer, TRAIN, None, args)
        return model.state_dict()

    first, second, other = run(1), run(1), run(2)
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_early_stopping_restores_the_best_weights(tokenizer: Any, tmp_path: Path) -> None:
    # Validation labels are flipped, so learning the training task makes val AUROC worse: the
    # first evaluation is the best one and training stops after `patience` worse ones.
    model, flipped = encoder(tokenizer), toy(60, 1, flip=True)
    args = arguments(tmp_path, num_train_epochs=10, eval_steps=5, early_stopping_patience=2)
    result = train_value_net(model, tokenizer, TRAIN, flipped, args)
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
    # save_total_limit 1 under load_best_model_at_end keeps the best checkpoint and the last.
    kept = {p.name for p in tmp_path.glob("checkpoint-*")}
    assert {"checkpoint-5", "checkpoint-15"} <= kept


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
    # (here bf16 mixed precision on a forced CPU); training must go as in a fresh process and
    # return a model without accelerate's autocast wrapper.
    from accelerate import Accelerator

    val = toy(24, 1)
    with accelerate_singletons():
        reference = encoder(tokenizer)
        train_value_net(reference, tokenizer, TRAIN, val, arguments(tmp_path / "a", max_steps=4))
    with accelerate_singletons():
        # Built first: constructing any TrainingArguments resets accelerate's state (transformers
        # does that itself); what is guarded here is the training run.
        args = arguments(tmp_path / "b", max_steps=4)
        earlier = Accelerator(mixed_precision="bf16", cpu=True, gradient_accumulation_steps=3)
        model = encoder(tokenizer)
        train_value_net(model, tokenizer, TRAIN, val, args)
        left = (earlier.state.mixed_precision, earlier.gradient_state.num_steps)
    assert "forward" not in vars(model)  # no forward patched by accelerate's `prepare`
    trained, expected = model.state_dict(), reference.state_dict()
    assert all(torch.equal(trained[k], expected[k]) for k in expected)
    assert left == ("bf16", 3)  # the earlier trainer's state is as it left it


def test_max_steps_caps_training_and_evaluates_at_the_end(tokenizer: Any, tmp_path: Path) -> None:
    args = arguments(tmp_path, max_steps=3, gradient_accumulation_steps=2)
    result = train_value_net(encoder(tokenizer), tokenizer, TRAIN, VAL, args)
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
def test_data_that_cannot_train(
    tokenizer: Any, tmp_path: Path, labels: list[int], loss: str, match: str
) -> None:
    data = TextExamples(TRAIN.texts[:4], labels, ["a", "a", "b", "b"])
    args = arguments(tmp_path, val=False, loss=loss)
    with pytest.raises(TrainingError, match=match):
        train_value_net(encoder(tokenizer), tokenizer, data, None, args)
    with pytest.raises(TrainingError, match="empty"):
        train_value_net(encoder(tokenizer), tokenizer, TextExamples([], [], []), None, args)


def test_diverged_loss_raises(tokenizer: Any, tmp_path: Path) -> None:
    model = encoder(tokenizer)
    with torch.no_grad():
        model.head.bias.fill_(float("nan"))
    with pytest.raises(TrainingError, match="diverged"):
        train_value_net(model, tokenizer, TRAIN, None, arguments(tmp_path, val=False))


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="differ in length"):
        TextExamples(["a"], [1, 0], ["t"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        TextExamples(["a"], [2.0], ["t"])
    with pytest.raises(ValueError, match="loss"):
        ValueTrainingArguments(output_dir=str(tmp_path), loss="mse")
    with pytest.raises(ValueError, match="remove_unused_columns"):
        ValueTrainingArguments(output_dir=str(tmp_path), remove_unused_columns=True)
    assert ValueTrainingArguments(output_dir=str(tmp_path), loss="bce+bt").grouped
    assert not ValueTrainingArguments(output_dir=str(tmp_path)).grouped


def test_bucketed_batches_follow_the_epoch(tokenizer: Any) -> None:
    data = EncodedExamples(tokenizer, TRAIN, 64)
    sampler = BucketBatchSampler(data, 8, grouped=False, seed=0)
    first, second = list(sampler), list(sampler)
    assert len(first) == len(sampler) == 25 and first != second
    for epoch in (first, second):
        assert sorted(i for b in epoch for i in b) == list(range(200))
    spread = np.mean([np.ptp(data.lengths[b]) for b in first])
    assert spread < np.ptp(data.lengths) / 4  # batches hold similar lengths
    sampler.set_epoch(1)  # what a resumed run asks for: the same batches as the first run's
    assert list(sampler) == second


def test_group_batches_keep_tasks_whole(tokenizer: Any) -> None:
    data = EncodedExamples(tokenizer, TRAIN, 64)
    sampler = BucketBatchSampler(data, 10, grouped=True, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for b in batches:
        assert len(b) <= 10
        for g in set(data.groups[b].tolist()):
            assert set(np.flatnonzero(data.groups == g)) <= set(b)
    oversized = BucketBatchSampler(data, 3, grouped=True, seed=0)  # tasks of 4 get split
    assert max(len(b) for b in oversized) <= 3


def test_decoder_with_left_padding_and_listwise_loss(tmp_path: Path) -> None:
    bpe = train_tokenizer(TRAIN.texts, vocab_size=300, kind="bpe")
    bpe.padding_side = "left"
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
    args = arguments(tmp_path, num_train_epochs=1, loss="bce+listwise")
    result = train_value_net(model, bpe, TRAIN, VAL, args)
    assert result.history[0]["train_listwise"] is not None
    assert math.isfinite(float(result.history[0]["val_loss"] or math.nan))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_training_on_cuda(tokenizer: Any, tmp_path: Path) -> None:
    model = encoder(tokenizer)
    args = arguments(tmp_path, bf16=True, loss="bce+bt", dataloader_pin_memory=True)
    result = train_value_net(model, tokenizer, TRAIN, VAL, args)
    assert next(model.parameters()).device.type == "cuda"
    assert model.head.weight.dtype == torch.float32
    assert "forward" not in vars(model)
    assert result.best_val is not None and result.best_val["val_auroc"] is not None
    assert result.best_val["val_auroc"] > 0.9
    scores = score_texts(model, tokenizer, VAL.texts, max_length=64)
    assert np.isfinite(scores).all()


def test_a_recipe_train_section_maps_onto_the_arguments(tmp_path: Path) -> None:
    from trajlake.value.recipe import parse_recipe
    from trajlake.value.trainer_args import arguments_for_recipe

    section = {"epochs": 4, "batch_size": 2, "grad_accum": 3, "lr": 1e-4, "eval_every": 7}
    section |= {"early_stopping_patience": 0, "loss": "bce+bt", "save_total_limit": 3}
    recipe = parse_recipe({"name": "x", "kind": "baseline", "train": section})
    args = arguments_for_recipe(
        recipe.train, output_dir=tmp_path, max_length=128, selection="auroc"
    )
    assert (args.num_train_epochs, args.per_device_train_batch_size) == (4, 2)
    assert (args.gradient_accumulation_steps, args.learning_rate) == (3, 1e-4)
    assert args.eval_strategy == args.save_strategy == args.logging_strategy == "steps"
    assert args.eval_steps == args.save_steps == args.logging_steps == 7
    assert args.early_stopping_patience is None and args.save_total_limit == 3  # extra key
    assert args.load_best_model_at_end and args.metric_for_best_model == "auroc"
    assert args.greater_is_better and args.grouped and args.max_length == 128
    plain = arguments_for_recipe(
        parse_recipe({"name": "x", "kind": "baseline"}).train,
        output_dir=tmp_path,
        max_length=64,
        selection=None,
    )
    assert plain.eval_strategy == "no" and not plain.load_best_model_at_end
    assert plain.save_strategy == "epoch" and plain.early_stopping_patience is None
    unknown = parse_recipe({"name": "x", "kind": "baseline", "train": {"epochz": 1}})
    with pytest.raises(ValueError, match="epochz"):
        arguments_for_recipe(unknown.train, output_dir=tmp_path, max_length=64, selection=None)
