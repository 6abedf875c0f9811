"""Training recipes: the YAML files under `models/` that say what value model to train on which
data, validated into one pydantic config (every field documented)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trajlake._names import check_name
from trajlake.errors import TrajlakeError

ModelKind = Literal["value", "prefix-value", "baseline", "sparse"]
LossKind = Literal["bce", "bt", "listwise", "bce+bt", "bce+listwise"]


class RecipeError(TrajlakeError, ValueError):
    """A recipe file is missing, is not YAML/JSON or does not validate."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenizerSpec(_Section):
    """Where the tokenizer comes from: a name/path, or trained locally on the training texts."""

    name_or_path: str | None = Field(
        None, description="Tokenizer to load (defaults to the backbone's when it has a path)."
    )
    train_vocab_size: int | None = Field(
        None, description="Train a tokenizer of this size on the training texts (tiny models)."
    )
    train_kind: Literal["wordpiece", "bpe"] = Field(
        "wordpiece", description="Tokenizer model to train (wordpiece for encoders)."
    )


class LoraSpec(_Section):
    """Low-rank adapters on the backbone (needs `peft`); the head is always fully trained."""

    r: int = Field(16, description="Adapter rank.")
    alpha: int = Field(32, description="Scaling numerator (alpha / r).")
    dropout: float = Field(0.05, description="Dropout on the adapter input.")
    target_modules: list[str] | str = Field(
        "all-linear", description="Modules to adapt (peft syntax)."
    )


class BackboneSpec(_Section):
    """The transformer under the scalar head."""

    name_or_path: str | None = Field(
        None, description="A Hugging Face model name or a local path (`from_pretrained`)."
    )
    config: dict[str, Any] | None = Field(
        None, description="Build a randomly initialised backbone from this config instead."
    )
    pooling: Literal["mean", "cls", "last"] | None = Field(
        None, description="Pooling; default mean for encoders, last token for decoders."
    )
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    torch_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights dtype (bfloat16 for large models on GPU)."
    )
    gradient_checkpointing: bool = Field(False, description="Trade compute for activation memory.")
    lora: LoraSpec | None = Field(
        None, description="Train low-rank adapters instead of all weights."
    )
    trust_remote_code: bool = Field(False, description="Allow custom model code from the hub.")

    @model_validator(mode="after")
    def _one_source(self) -> BackboneSpec:
        if (self.name_or_path is None) == (self.config is None):
            raise ValueError("backbone needs exactly one of name_or_path and config")
        tokenizer = self.tokenizer
        no_tokenizer = tokenizer.train_vocab_size is None and tokenizer.name_or_path is None
        if self.config is not None and no_tokenizer:
            raise ValueError("a backbone built from config needs tokenizer.train_vocab_size")
        return self


class SerializerSpec(_Section):
    """How a trajectory becomes model input (see `trajlake.value.serialize`)."""

    kind: Literal["whole", "final", "prefix", "compact", "tail", "patch"] = Field(
        "whole",
        description="Whole trajectory, issue + final output, prefix up to a turn, Orchard's "
        "compact form, issue + newest turns, or issue + patch (the last three end in the exit "
        "status).",
    )
    max_tokens: int = Field(4096, ge=64, description="Token budget of one input.")
    observation_max_tokens: int = Field(
        512, ge=8, description="Long tool observations are cut in the middle to this many tokens."
    )
    reasoning_max_chars: int = Field(
        600, ge=16, description="compact: characters kept of each turn's reasoning."
    )
    command_max_chars: int = Field(
        400, ge=16, description="compact: characters kept of each tool call."
    )
    observation_max_chars: int = Field(
        1200, ge=64, description="compact: characters of each observation, kept by type."
    )


class DataSpec(_Section):
    """Which trajectories and labels, and how they are split."""

    where: str | None = Field(None, description="SQL predicate over `trajectories` (alias t).")
    label: str = Field(
        "outcomes",
        pattern=r"^(outcomes|labels:.+)$",
        description="outcomes (the effective outcome) or labels:<source> (one verifier only).",
    )
    val_frac: float = Field(0.15, ge=0, lt=1, description="Share of tasks for validation.")
    test_frac: float = Field(0.3, ge=0, lt=1, description="Share of tasks held out for testing.")
    split_seed: int = Field(0, description="Seed of the task-hash split.")
    balance: float | None = Field(
        None, ge=0, description="Keep at most this many negatives per positive in training."
    )


class TrainSpec(_Section):
    """Optimisation: the recipe's names for `ValueTrainingArguments` fields.

    Each key maps onto one `transformers.TrainingArguments` field (epochs → num_train_epochs,
    batch_size → per_device_train_batch_size, grad_accum → gradient_accumulation_steps, lr →
    learning_rate, eval_every → eval/save/logging steps) or a value-model one (loss, alpha,
    early_stopping_patience); any other key is passed to `ValueTrainingArguments` as it is
    (`report_to: tensorboard`, `save_total_limit: 3`, ...) and checked when training starts.
    """

    # Extra keys are Trainer arguments; they are validated against TrainingArguments then,
    # because importing transformers to read a recipe would cost every baseline user torch.
    model_config = ConfigDict(extra="allow", frozen=True)

    epochs: int = Field(3, ge=1, description="Passes over the training set.")
    batch_size: int = Field(8, ge=1, description="Examples per step (per device).")
    grad_accum: int = Field(1, ge=1, description="Steps accumulated per optimiser update.")
    lr: float = Field(5e-5, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="Linear warm-up share of steps.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    loss: LossKind = Field("bce", description="Pointwise BCE, Bradley–Terry, listwise, or mixes.")
    alpha: float = Field(1.0, ge=0, description="Weight of the ranking term in bce+bt/listwise.")
    early_stopping_patience: int = Field(
        2, ge=0, description="Evaluations without improvement before stopping (0 = never stop)."
    )
    eval_every: int = Field(0, ge=0, description="Evaluate every N steps (0 = every epoch).")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps.")
    bf16: bool = Field(False, description="bfloat16 autocast (CUDA only).")
    seed: int = Field(0, description="Seeds weights, shuffling and dropout.")


class PrefixSpec(_Section):
    """Targets of a prefix value model (kind prefix-value)."""

    target: Literal["mc", "td"] = Field("mc", description="Monte-Carlo outcome or TD(λ) returns.")
    td_lambda: float = Field(0.8, ge=0, le=1, description="λ of the TD(λ) targets.")
    rounds: int = Field(3, ge=1, description="TD rounds: recompute targets, then train an epoch.")


class BaselineSpec(_Section):
    """The feature baseline (kind baseline): logistic regression on trajectory features."""

    l2: float = Field(1.0, ge=0, description="L2 penalty.")
    top_n: int = Field(5, ge=0, description="One-hot the N most frequent harnesses and policies.")


class SparseSpec(_Section):
    """The sparse text model (kind sparse): hashed word/bigram features of the conversation,
    optional trajectory scalars, a linear logistic model (`trajlake.value.sparse`)."""

    fields: list[Literal["actions", "thoughts", "observations", "issue", "final", "recent"]] = (
        Field(
            ["actions", "observations", "issue", "final", "recent"],
            description="Text fields hashed, each in its own namespace (recent = last turns).",
        )
    )
    buckets: int = Field(2**18, ge=16, description="Size of the hashed feature table.")
    recent_turns: int = Field(3, ge=1, description="Turns in the `recent` fields.")
    observation_head: int = Field(24, ge=0, description="Words kept from each observation's start.")
    observation_tail: int = Field(40, ge=1, description="Words kept from each observation's end.")
    issue_words: int = Field(64, ge=1, description="Words kept from the issue's start.")
    final_words: int = Field(200, ge=2, description="Words kept from the final output/patch.")
    scalars: bool = Field(
        False, description="Add trajectory scalars (turns, length, submitted, errors, last tests)."
    )
    l2: float = Field(1.0, gt=0, description="L2 penalty (on summed losses; bias unpenalised).")
    l2_grid: list[float] = Field(
        [], description="Pick l2 from these by validation within-task AUROC (needs val tasks)."
    )
    loss: Literal["pointwise", "pairwise"] = Field(
        "pointwise", description="Weighted BCE, or logistic loss on within-task score gaps."
    )
    pointwise_weight: float = Field(
        0.1, ge=0, description="Weight of the BCE term kept beside the pairwise loss."
    )
    class_weight: bool = Field(True, description="Balance the classes in the BCE term.")
    temperature: bool = Field(False, description="Fit one temperature on the validation split.")
    ensemble: int = Field(1, ge=1, description="Members with different hash seeds, averaged.")
    seed: int = Field(0, description="Hash seed of the first member.")
    iterations: int = Field(300, ge=1, description="L-BFGS iterations per fit.")


class Recipe(_Section):
    """A value-model training recipe."""

    name: str = Field(
        description="Model name (letters, digits, '.', '_', '-'); the model id starts with it."
    )
    kind: ModelKind = Field("value", description="value | prefix-value | baseline | sparse.")
    description: str = Field("", description="One line for the model card.")
    backbone: BackboneSpec | None = Field(None, description="Neural kinds only.")
    serializer: SerializerSpec = Field(default_factory=SerializerSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    prefix: PrefixSpec = Field(default_factory=PrefixSpec)
    baseline: BaselineSpec = Field(default_factory=BaselineSpec)
    sparse: SparseSpec = Field(default_factory=SparseSpec)
    eval_batch_size: int = Field(16, ge=1, description="Batch size when scoring.")

    @field_validator("name", mode="before")
    @classmethod
    def _safe_name(cls, name: object) -> str:
        # The name starts the model id, which names the model's folder under <lake>/models.
        return check_name("recipe", name)

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        if self.kind not in ("baseline", "sparse") and self.backbone is None:
            raise ValueError(f"kind {self.kind!r} needs a backbone section")
        if self.data.val_frac + self.data.test_frac >= 1:
            raise ValueError("data.val_frac + data.test_frac must be < 1")
        if self.kind == "prefix-value" and self.train.loss != "bce":
            raise ValueError("prefix-value models train with loss bce (soft targets)")
        return self

    def fingerprint(self) -> str:
        """A short stable hash of the recipe (part of the model id)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]


def parse_recipe(data: Any, *, source: str = "<recipe>") -> Recipe:
    """Validate a recipe given as a mapping; errors name the source and the field."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<top>'}: {err['msg']}" for err in e.errors()
        )
        raise RecipeError(f"{source}: invalid recipe: {problems}") from e


def load_recipe(path: str | Path, *, overrides: dict[str, Any] | None = None) -> Recipe:
    """Read a YAML (or JSON) recipe, apply dotted `overrides` ({"train.epochs": 1}) and validate."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: no such recipe file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise RecipeError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping at the top level")
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    return parse_recipe(data, source=str(path))


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise RecipeError(f"cannot set {dotted}: {key} is not a section")
        node = child
    node[leaf] = value
