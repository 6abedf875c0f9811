"""The neural half of `train_value_model`: serialize lake trajectories, build the backbone and
tokenizer, fit (whole-trajectory or prefix targets), save weights, score the test split."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trajlake.errors import TrainingError, missing_extra
from trajlake.value._train_inputs import is_main_process
from trajlake.value.conversations import read_conversations
from trajlake.value.dataset import ValueExample
from trajlake.value.recipe import LoraSpec, Recipe
from trajlake.value.serialize import Conversation, Serializer, n_turns

if TYPE_CHECKING:
    from trajlake._progress import Progress
    from trajlake.lake import LakeStore
    from trajlake.value._train_inputs import TrainingData
    from trajlake.value.trainer import FitResult
    from trajlake.value.trainer_args import ValueTrainingArguments
    from trajlake.value.trainer_data import TextExamples


log = logging.getLogger(__name__)


def build_tokenizer(recipe: Recipe, train_convs: Sequence[Conversation]) -> Any:
    """Load the recipe's tokenizer, or train one locally on the training texts."""
    from trajlake.value.neural import load_tokenizer, train_tokenizer

    backbone = recipe.backbone
    assert backbone is not None
    spec = backbone.tokenizer
    if spec.name_or_path or (backbone.name_or_path and spec.train_vocab_size is None):
        return load_tokenizer(spec.name_or_path or backbone.name_or_path)  # type: ignore[arg-type]
    rough = _serializer(recipe)
    texts = [rough.text(c, turn=_last_turn(rough, c)) for c in train_convs]
    return train_tokenizer(
        texts,
        vocab_size=int(spec.train_vocab_size or 2000),
        kind=spec.train_kind,
        model_max_length=recipe.serializer.max_tokens,
    )


def _serializer(recipe: Recipe) -> Serializer:
    """The recipe's serializer, every setting it gives (kind, budgets, character limits)."""
    return Serializer(**recipe.serializer.model_dump())


def _model_serializer(recipe: Recipe, tokenizer: Any) -> Serializer:
    """The serializer counting with the model's tokenizer; its budget leaves room for the
    special tokens the tokenizer adds, so inputs fit `max_tokens` without truncation."""
    settings = recipe.serializer.model_dump()
    settings["max_tokens"] -= len(tokenizer("", add_special_tokens=True)["input_ids"])
    return Serializer(**settings).with_tokenizer(tokenizer)


def _last_turn(serializer: Serializer, conv: Conversation) -> int | None:
    """Prefix serializers score a whole trajectory as its longest prefix."""
    return max(n_turns(conv) - 1, 0) if serializer.kind == "prefix" else None


def build_model(recipe: Recipe, tokenizer: Any) -> Any:
    """The backbone with its scalar head, from a name/path or from a config dict."""
    import torch

    from trajlake.value.neural import ValueNet

    backbone = recipe.backbone
    assert backbone is not None
    torch.manual_seed(recipe.train.seed)  # the head (and a config-built backbone) start seeded
    if backbone.config is not None:
        config = {**backbone.config, "vocab_size": len(tokenizer)}
        model = ValueNet.from_backbone_config(config, pooling=backbone.pooling)
        if backbone.gradient_checkpointing:
            model.enable_gradient_checkpointing()
        return model
    return ValueNet.from_pretrained_backbone(
        backbone.name_or_path,  # type: ignore[arg-type]
        pooling=backbone.pooling,
        torch_dtype=getattr(torch, backbone.torch_dtype),
        gradient_checkpointing=backbone.gradient_checkpointing,
        trust_remote_code=backbone.trust_remote_code,
    )


def apply_lora(model: Any, lora: LoraSpec) -> None:
    """Wrap the backbone with low-rank adapters (peft); the value head stays fully trainable."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise missing_extra("peft", "lora") from e
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
    )
    model.backbone = get_peft_model(model.backbone, config)


def merge_lora(model: Any) -> None:
    """Fold trained adapters into the backbone weights, so the saved model is a plain backbone
    that loads without peft."""
    if hasattr(model.backbone, "merge_and_unload"):
        model.backbone = model.backbone.merge_and_unload()


def training_arguments(
    recipe: Recipe, output_dir: Path, val: TextExamples | None
) -> ValueTrainingArguments:
    """The recipe's `train` section as Trainer arguments, checkpointing into `output_dir`.

    The best checkpoint is the one of highest validation AUROC, or lowest validation loss when
    the validation labels have one class (AUROC is undefined there).
    """
    from trajlake.value.recipe import RecipeError
    from trajlake.value.trainer_args import Selection, arguments_for_recipe

    selection: Selection | None = None
    if val is not None:
        positive = val.targets >= 0.5
        selection = "auroc" if positive.any() and not positive.all() else "loss"
    try:
        return arguments_for_recipe(
            recipe.train,
            output_dir=output_dir,
            max_length=recipe.serializer.max_tokens,
            selection=selection,
        )
    except (TypeError, ValueError) as e:
        raise RecipeError(f"recipe {recipe.name!r}: train: {e}") from e


def _resume_point(output_dir: Path, resume: bool) -> str | None:
    """The latest checkpoint to resume from, when asked and one exists."""
    if not resume:
        return None
    from transformers.trainer_utils import get_last_checkpoint

    last: str | None = None
    if output_dir.is_dir():
        last = get_last_checkpoint(str(output_dir))  # type: ignore[no-untyped-call]
    if last is None:
        log.warning("no checkpoint under %s to resume from: training from the start", output_dir)
    return last


def _whole_examples(
    serializer: Serializer, convs: Mapping[str, Conversation], examples: Sequence[ValueExample]
) -> TextExamples:
    from trajlake.value.trainer_data import TextExamples

    texts = [
        serializer.text(convs[e.trajectory_id], turn=_last_turn(serializer, convs[e.trajectory_id]))
        for e in examples
    ]
    return TextExamples(
        texts=texts, labels=[e.label for e in examples], groups=[e.task_id for e in examples]
    )


def _prefix_examples(
    serializer: Serializer, convs: Mapping[str, Conversation], examples: Sequence[ValueExample]
) -> tuple[list[str], list[int], list[str], list[int]]:
    """Every turn boundary of every trajectory: texts, outcomes, groups, and owner indices."""
    texts: list[str] = []
    labels: list[int] = []
    groups: list[str] = []
    owners: list[int] = []
    for i, example in enumerate(examples):
        prefixes = serializer.prefix_texts(convs[example.trajectory_id])
        texts += prefixes
        labels += [example.label] * len(prefixes)
        groups += [example.task_id] * len(prefixes)
        owners += [i] * len(prefixes)
    return texts, labels, groups, owners


def fit_neural(
    lake: LakeStore,
    recipe: Recipe,
    data: TrainingData,
    directory: Path,
    progress: Progress,
    *,
    resume: bool = False,
) -> tuple[np.ndarray, bool, dict[str, Any]]:
    """Fit the recipe's neural model; return test scores, whether they are probabilities, and
    training facts for the model card.

    Trainer checkpoints go to `<directory>/checkpoints` and are removed once the model is saved;
    `resume` continues from the latest one an interrupted run left there."""
    from trajlake.value.neural import save_value_net, score_texts

    everything = [e for split in data.splits.values() for e in split]
    convs = read_conversations(lake, data.snapshot_id, [e.trajectory_id for e in everything])
    train_convs = [convs[e.trajectory_id] for e in data.splits["train"]]
    tokenizer = build_tokenizer(recipe, train_convs)
    serializer = _model_serializer(recipe, tokenizer)
    model = build_model(recipe, tokenizer)
    backbone = recipe.backbone
    assert backbone is not None
    if backbone.lora is not None:
        apply_lora(model, backbone.lora)
    started = time.perf_counter()
    if recipe.kind == "prefix-value":
        result, extra = _fit_prefix(
            model, tokenizer, serializer, convs, data, recipe, directory, progress
        )
    else:
        train = _whole_examples(serializer, convs, data.splits["train"])
        val = _whole_examples(serializer, convs, data.splits["val"]) if data.splits["val"] else None
        examples = (train, val)
        result = _fit_whole(model, tokenizer, examples, recipe, directory, progress, resume)
        extra = {}
    merge_lora(model)
    spec = model.spec(
        max_length=recipe.serializer.max_tokens,
        serializer=serializer.to_dict(),
        extra={"kind": recipe.kind, "loss": recipe.train.loss},
    )
    if is_main_process():
        save_value_net(directory, model, tokenizer, spec)
        # The Trainer's checkpoints hold pickles (optimizer, RNG states) and served resuming
        # only; the saved model is safetensors.
        shutil.rmtree(directory / "checkpoints", ignore_errors=True)
    test = _whole_examples(serializer, convs, data.splits["test"])
    scores = score_texts(
        model, tokenizer, test.texts, batch_size=recipe.eval_batch_size, max_length=spec.max_length
    )
    training = {
        "seconds": round(time.perf_counter() - started, 3),
        "history": result.history,
        "best_epoch": result.best_epoch,
        "train_tokens": result.n_train_tokens,
        "tokens_per_second": result.tokens_per_second,
        **extra,
    }
    return np.asarray(scores, dtype=np.float64), recipe.train.loss.startswith("bce"), training


def _fit_whole(
    model: Any,
    tokenizer: Any,
    examples: tuple[TextExamples, TextExamples | None],
    recipe: Recipe,
    directory: Path,
    progress: Progress,
    resume: bool,
) -> FitResult:
    from trajlake.value.trainer import train_value_net

    train, val = examples
    output_dir = directory / "checkpoints"
    try:
        return train_value_net(
            model,
            tokenizer,
            train,
            val,
            training_arguments(recipe, output_dir, val),
            progress=progress,
            resume_from_checkpoint=_resume_point(output_dir, resume),
        )
    finally:
        progress.finish()  # also after an early stop or an error


def _fit_prefix(
    model: Any,
    tokenizer: Any,
    serializer: Serializer,
    convs: Mapping[str, Conversation],
    data: TrainingData,
    recipe: Recipe,
    directory: Path,
    progress: Progress,
) -> tuple[FitResult, dict[str, Any]]:
    """Prefix value model: every turn boundary is an example. MC: the target is the outcome.
    TD(λ): each round recomputes λ-returns from the current model's values, then trains."""
    from trajlake.value.losses import td_lambda_targets
    from trajlake.value.neural import score_texts
    from trajlake.value.trainer import train_value_net
    from trajlake.value.trainer_data import TextExamples

    if serializer.kind != "prefix":
        raise TrainingError("a prefix-value recipe needs serializer.kind: prefix")
    texts, labels, groups, owners = _prefix_examples(serializer, convs, data.splits["train"])
    val = None
    if data.splits["val"]:
        v_texts, v_labels, v_groups, _ = _prefix_examples(serializer, convs, data.splits["val"])
        val = TextExamples(texts=v_texts, labels=v_labels, groups=v_groups)
    spec = recipe.prefix
    targets: list[float] = [float(y) for y in labels]
    rounds = spec.rounds if spec.target == "td" else 1
    result = None
    for round_ in range(rounds):
        if round_ > 0:
            values = score_texts(
                model,
                tokenizer,
                texts,
                batch_size=recipe.eval_batch_size,
                max_length=recipe.serializer.max_tokens,
            )
            targets = _td_targets(values, labels, owners, spec.td_lambda, td_lambda_targets)
        train = TextExamples(texts=texts, labels=targets, groups=groups)
        # Each round is a Trainer run of its own (new targets), with checkpoints of its own.
        args = training_arguments(recipe, directory / "checkpoints" / f"round-{round_}", val)
        try:
            result = train_value_net(model, tokenizer, train, val, args, progress=progress)
        finally:
            progress.finish()
    assert result is not None  # rounds >= 1
    return result, {
        "prefix_target": spec.target,
        "td_lambda": spec.td_lambda,
        "prefix_examples": len(texts),
        "rounds": rounds,
    }


def _td_targets(
    values: Any, labels: Sequence[int], owners: Sequence[int], lam: float, td: Any
) -> list[float]:
    """λ-returns per trajectory from the model's prefix values.

    Prefix t (everything up to and including turn t's observations) is the state s_{t+1}; the
    last prefix is the terminal state s_T, whose target is the outcome R itself, and the
    earlier ones bootstrap from their successors (`td` computes G_t from V(s_{t+1}), V(s_T)=R).
    """
    out: list[float] = []
    values = np.asarray(values, dtype=np.float64)
    start = 0
    while start < len(owners):
        end = start
        while end < len(owners) and owners[end] == owners[start]:
            end += 1
        outcome = float(labels[start])
        out += [float(x) for x in td(values[start : end - 1], outcome, lam)] + [outcome]
        start = end
    return out
