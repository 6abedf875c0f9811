"""`WeightedSFTTrainer` in real TRL training steps on a tiny Llama built from a config: the loss it
reports equals Σ w·nll / Σ w computed here from the model and the tokenized export, for the trl
and the tokenized exports, with gradient accumulation too; a weight-0 turn gets no gradient; the
README's hand-off runs as written."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import trajlake as tl
from tests._tiny_lm import tiny_llama
from trajlake.credit import run_credit
from trajlake.export.sft import export_sft
from trajlake.synth import SynthConfig, generate
from trajlake.testing_tokenizer import tiny_chat_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
trl = pytest.importorskip("trl")
weighted_sft = pytest.importorskip("trajlake.weighted_sft")

README = Path(__file__).resolve().parents[1] / "README.md"
# TrainingArguments warns (FutureWarning) about its own deprecated `gradient_checkpointing`
# argument, which SFTConfig sets; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A credit run with float weights (`advantage` mask), exported as trl and as tokenized."""
    root = tmp_path_factory.mktemp("wsft")
    lake = tl.open_lake(root / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=2, rollouts_per_task=2)).trajectories)
    run_credit(lake, estimator="prefix-mc", mask="advantage", name="adv")
    tiny_chat_tokenizer(root / "tok", template="chatml")
    tok = transformers.AutoTokenizer.from_pretrained(str(root / "tok"))
    export_sft(lake, str(root / "trl"), format="trl", credit="adv")
    export_sft(lake, str(root / "tokenized"), format="tokenized", tokenizer=tok, credit="adv")
    return root


@pytest.fixture(scope="module")
def tok(root: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(root / "tok"))


def _tiny_model(tok: Any) -> Any:
    # wide enough initial weights that token losses differ, so weighting them matters
    return tiny_llama(tok, initializer_range=0.5)


def _args(out: Path, **overrides: Any) -> Any:
    options: dict[str, Any] = {
        "output_dir": str(out),
        "max_steps": 1,
        "per_device_train_batch_size": 2,
        "report_to": [],
        "max_length": None,
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "save_strategy": "no",
        "logging_strategy": "no",
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        **overrides,
    }
    return trl.SFTConfig(**options)


def _trl_dataset(root: Path) -> Any:
    files = str(root / "trl" / "train-00000.jsonl")
    return datasets.load_dataset("json", data_files=files, split="train").select(range(2))


def _tokenized_rows(root: Path) -> dict[str, dict[str, Any]]:
    rows = pq.read_table(root / "tokenized" / "train-00000.parquet").to_pylist()
    return {r["trajectory_id"]: r for r in rows}


def _hand_loss(model: Any, tok: Any, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(Σ w·nll / Σ w, the unweighted mean nll) over shifted tokens, padded here by hand."""
    width = max(len(r["input_ids"]) for r in rows)

    def pad(key: str, value: Any, dtype: Any) -> Any:
        return torch.tensor([r[key] + [value] * (width - len(r[key])) for r in rows], dtype=dtype)

    ids = pad("input_ids", tok.pad_token_id, torch.long)
    labels = pad("labels", -100, torch.long)
    weight = pad("loss_weight", 0.0, torch.float32)[:, 1:]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=pad("attention_mask", 0, torch.long)).logits
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), labels[:, 1:], ignore_index=-100, reduction="none"
    )
    trained = (labels[:, 1:] != -100).float()
    return (
        float((weight * nll).sum() / weight.sum()),
        float((trained * nll).sum() / trained.sum()),
    )


def _varied(weights: list[float]) -> list[float]:
    """Each block of 64 tokens scaled by 4 or 1/4 in turn (zeros stay zero)."""
    return [w * (4.0 if (t // 64) % 2 else 0.25) for t, w in enumerate(weights)]


def test_tokenized_export_step_loss_is_the_weighted_mean(root: Path, tok: Any) -> None:
    files = str(root / "tokenized" / "train-00000.parquet")
    ds = datasets.load_dataset("parquet", data_files=files, split="train").select(range(2))
    # per-token weights of the tokenized format need not be constant over a turn: vary them
    ds = ds.map(lambda row: {"loss_weight": _varied(row["loss_weight"])})
    model = _tiny_model(tok)
    before = copy.deepcopy(model)
    trainer = weighted_sft.WeightedSFTTrainer(
        model=model, args=_args(root / "out-tok"), train_dataset=ds, processing_class=tok
    )
    result = trainer.train()
    weighted, unweighted = _hand_loss(before, tok, list(ds))
    assert result.global_step == 1
    assert result.training_loss == pytest.approx(weighted, abs=1e-5)
    assert abs(weighted - unweighted) > 1e-2  # the weights, not the mask alone, set the loss


def test_trl_export_trains_on_the_tokenized_rows_with_the_weighted_loss(
    root: Path, tok: Any
) -> None:
    ds = _trl_dataset(root)
    model = _tiny_model(tok)
    before = copy.deepcopy(model)
    trainer = weighted_sft.WeightedSFTTrainer(
        model=model,
        args=_args(root / "out-trl"),
        train_dataset=ds,
        eval_dataset=ds,
        processing_class=tok,
    )
    # the trainer tokenized the conversations into exactly the tokenized export's rows
    reference = _tokenized_rows(root)
    rows = [reference[r["trajectory_id"]] for r in trainer.train_dataset]
    for prepared, expected in zip(trainer.train_dataset, rows, strict=True):
        assert prepared["input_ids"] == expected["input_ids"]
        assert prepared["labels"] == expected["labels"]
        assert prepared["loss_weight"] == pytest.approx(expected["loss_weight"], abs=1e-6)
    batch = next(iter(trainer.get_train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "labels", "loss_weight"}
    hand = _hand_loss(before, tok, rows)[0]
    assert trainer.evaluate()["eval_loss"] == pytest.approx(hand, abs=1e-5)  # one eval batch
    result = trainer.train()
    assert result.training_loss == pytest.approx(hand, abs=1e-5)


def test_gradient_accumulation_normalises_over_the_whole_step(root: Path, tok: Any) -> None:
    """Two micro-batches of one row: the step's loss is Σ w·nll / Σ w over both rows, not the
    mean of the two rows' weighted means."""
    ds = _trl_dataset(root)
    model = _tiny_model(tok)
    before = copy.deepcopy(model)
    args = _args(root / "out-ga", per_device_train_batch_size=1, gradient_accumulation_steps=2)
    trainer = weighted_sft.WeightedSFTTrainer(
        model=model, args=args, train_dataset=ds, processing_class=tok
    )
    result = trainer.train()
    reference = _tokenized_rows(root)
    rows = [reference[r["trajectory_id"]] for r in ds]
    whole = _hand_loss(before, tok, rows)[0]
    per_row = [_hand_loss(before, tok, [r])[0] for r in rows]
    assert result.global_step == 1
    assert result.training_loss == pytest.approx(whole, abs=1e-5)
    assert abs(whole - sum(per_row) / 2) > 1e-4


def test_a_turn_of_weight_zero_gets_no_gradient(root: Path, tok: Any) -> None:
    """The gradient reaching the final hidden state at a position is exactly zero when the next
    token has weight 0 (prompts, tool results and a credited-out assistant turn), and nonzero
    where it is trained. The final hidden state at t feeds only the prediction of token t+1."""
    ds = _trl_dataset(root).select(range(1))
    weights = list(ds[0]["message_weights"])
    assistants = [i for i, w in enumerate(weights) if w > 0]
    weights[assistants[1]] = 0.0  # a middle turn credited out
    ds = ds.map(lambda row: {"message_weights": weights})
    model = _tiny_model(tok)
    grads: list[Any] = []

    def keep_grad(module: Any, args: Any, output: Any) -> None:
        output.register_hook(grads.append)

    model.model.norm.register_forward_hook(keep_grad)
    trainer = weighted_sft.WeightedSFTTrainer(
        model=model, args=_args(root / "out-zero"), train_dataset=ds, processing_class=tok
    )
    row = trainer.train_dataset[0]
    turn_start = next(
        t
        for t in range(1, len(row["loss_weight"]))
        if row["loss_weight"][t] == 0.0 and row["loss_weight"][t - 1] > 0.0
    )
    trainer.train()
    (grad,) = grads
    next_weight = torch.tensor(row["loss_weight"][1:])
    per_position = grad[0, :-1].abs().sum(-1)
    assert (per_position[next_weight == 0] == 0).all()
    assert (per_position[next_weight > 0] > 0).all()
    assert next_weight[turn_start - 1 :].eq(0).any()  # the zeroed turn is in the row


def test_collator_pads_raw_trl_rows(root: Path, tok: Any) -> None:
    ds = _trl_dataset(root)
    collate = weighted_sft.WeightedCollator(tok, pad_to_multiple_of=64)
    batch = collate([ds[0], ds[1]])
    reference = _tokenized_rows(root)
    rows = [reference[r["trajectory_id"]] for r in ds]
    width = batch["input_ids"].shape[1]
    assert width % 64 == 0 and width >= max(len(r["input_ids"]) for r in rows)
    for b, row in enumerate(rows):
        n = len(row["input_ids"])
        assert batch["input_ids"][b, :n].tolist() == row["input_ids"]
        assert batch["loss_weight"][b, :n].tolist() == pytest.approx(row["loss_weight"])
        assert batch["attention_mask"][b].sum() == n
        assert (batch["labels"][b, n:] == -100).all() and (batch["loss_weight"][b, n:] == 0).all()
    logits = torch.randn(*batch["input_ids"].shape, len(tok))
    loss = weighted_sft.weighted_nll_loss(logits, batch["labels"], batch["loss_weight"])
    w = batch["loss_weight"][:, 1:]
    nll = -logits[:, :-1].log_softmax(-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    assert loss.item() == pytest.approx(float((w * nll).sum() / w.sum()), abs=1e-5)


def test_what_cannot_be_weighted_is_refused(root: Path, tok: Any) -> None:
    ds = _trl_dataset(root)
    model = _tiny_model(tok)
    with pytest.raises(ValueError, match="packing"):
        weighted_sft.WeightedSFTTrainer(
            model=model,
            args=_args(root / "o", packing=True, max_length=512),
            train_dataset=ds,
            processing_class=tok,
        )
    with pytest.raises(ValueError, match="carry no loss weights"):
        weighted_sft.WeightedSFTTrainer(
            model=model,
            args=_args(root / "o"),
            train_dataset=ds.remove_columns("message_weights"),
            processing_class=tok,
        )


def _readme_recipe() -> str:
    text = README.read_text()
    section = text[text.index("Hand-off to TRL") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.mark.long
def test_the_readme_recipe_runs(
    root: Path, tok: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's hand-off, as written, with a local tiny model in place of `my-base-model`."""
    recipe = _readme_recipe()
    assert "WeightedSFTTrainer" in recipe and '"my-base-model"' in recipe
    model_dir = tmp_path / "tiny-model"
    _tiny_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=2, rollouts_per_task=2)).trajectories)
    run_credit(lake, estimator="prefix-mc", mask="advantage", name="pmc")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"lake": lake}
    recipe = recipe.replace('"my-base-model"', repr(str(model_dir)))
    if not torch.cuda.is_available():  # SFTConfig trains in bf16, which needs a GPU or use_cpu
        recipe = recipe.replace('SFTConfig(output_dir="out")', 'SFTConfig("out", use_cpu=True)')
    exec(recipe, namespace)
    trainer = namespace["trainer"]
    assert isinstance(trainer, weighted_sft.WeightedSFTTrainer)
    assert trainer.state.global_step >= 1
    assert max(len(r) for r in trainer.train_dataset["input_ids"]) <= trainer.args.max_length
