"""SFT exports fed to real trainer code: TRL's `SFTTrainer` on the `trl` format, a weighted loss on
the `tokenized` Parquet, and assistant masks on three chat templates (tiny local models/tokenizers).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import trajlake as tl
from tests._tiny_lm import tiny_llama
from trajlake.credit import run_credit
from trajlake.export._chat_render import fast_spans, reference_spans
from trajlake.export.sft import export_sft
from trajlake.export.tokenize import tokenize_conversations, verify_sample
from trajlake.synth import SynthConfig, generate
from trajlake.testing_tokenizer import ChatConversation, sample_conversations, tiny_chat_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
TEMPLATES = ["chatml", "llama3-like", "gemma-like"]


@pytest.fixture(scope="module", params=TEMPLATES)
def tok(request: pytest.FixtureRequest) -> Any:
    return tiny_chat_tokenizer(template=request.param)


def _mixed(conv: ChatConversation) -> ChatConversation:
    """Every other assistant turn untrained, so masks hold 0 and 1 turns."""
    k = 0
    weights: list[float | None] = []
    for w in conv.weights:
        if w is not None:
            w, k = (1.0 if k % 2 == 0 else 0.0), k + 1
        weights.append(w)
    return dataclasses.replace(conv, weights=weights)


@pytest.fixture(scope="module")
def convs() -> list[ChatConversation]:
    return [_mixed(c) for c in sample_conversations(6, seed=21)]


def test_fast_path_equals_reference_and_verifies(tok: Any, convs: list[ChatConversation]) -> None:
    for conv in convs:
        assert any(m.get("tool_calls") for m in conv.messages)
        fast = fast_spans(tok, conv.messages, conv.tools)
        assert fast is not None, "fast path fell back"
        assert fast == reference_spans(tok, conv.messages, conv.tools)
    fast_rows = list(tokenize_conversations(tok, convs, method="fast"))
    assert fast_rows == list(tokenize_conversations(tok, convs, method="reference"))
    by_id = {c.trajectory_id: c for c in convs}
    for row in fast_rows:
        verify_sample(tok, row, by_id[row["trajectory_id"]])


def test_generation_markers_mask_equals_ours(convs: list[ChatConversation]) -> None:
    """On the `{% generation %}` template, HF's assistant mask and ours mark the same tokens.

    Both cover the assistant's content, tool calls and `<end_of_turn>`, not the role header nor
    the `\\n` after the marker (the template puts exactly that inside `{% generation %}`). With a
    template whose generation block stops before the end-of-turn marker (as many do), ours would
    additionally include the marker: the model must learn to stop.
    """
    tok = tiny_chat_tokenizer(template="gemma-like")
    for conv in convs[:3]:
        hf = tok.apply_chat_template(
            conv.messages,
            tools=conv.tools,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        # HF's mask has no weights: compare with every assistant turn trained
        weights = [1.0 if m["role"] == "assistant" else None for m in conv.messages]
        (ours,) = tokenize_conversations(tok, [dataclasses.replace(conv, weights=weights)])
        assert hf["input_ids"] == ours["input_ids"]
        assert list(hf["assistant_masks"]) == [int(w > 0) for w in ours["loss_weight"]]


@pytest.fixture(scope="module")
def synth_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    lake = tl.open_lake(tmp_path_factory.mktemp("synth") / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=4, rollouts_per_task=4)).trajectories)
    run_credit(lake, estimator="prefix-mc", mask="rise", name="pmc")
    return lake


def _tiny_model(tok: Any) -> Any:
    return tiny_llama(tok)


# transformers warns (FutureWarning) about its own deprecated `gradient_checkpointing` argument
# inside TrainingArguments; not ours to fix.
@pytest.mark.long
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("template", ["gemma-like", "chatml"])
def test_trl_export_runs_through_sfttrainer(
    synth_lake: tl.Lake, tmp_path: Path, template: str
) -> None:
    """`trl` rows load with `datasets` and go through SFTTrainer's tokenization, collation and one
    optimizer step.

    SFTTrainer applies the chat template to `messages` with `tools`, and ignores the
    `message_weights`/`trajectory_id` side columns (kept in its dataset, never collated). Its
    loss is per token on everything (default) or on the `{% generation %}` spans
    (`assistant_only_loss=True`, gemma-like template only): it cannot weight turns. To train with
    the weights, use `trajlake.weighted_sft.WeightedSFTTrainer` (tests/test_weighted_sft.py).
    """
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    export_sft(synth_lake, str(tmp_path / "trl"), format="trl", credit="pmc")
    tiny_chat_tokenizer(tmp_path / "tok", template=template)  # type: ignore[arg-type]
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    files = str(tmp_path / "trl" / "train-00000.jsonl")
    ds = datasets.load_dataset("json", data_files=files, split="train")
    assert ds.column_names == ["messages", "tools", "message_weights", "trajectory_id"]
    assistant_only = template == "gemma-like"
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        assistant_only_loss=assistant_only,
        max_length=None,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = trl.SFTTrainer(
        model=_tiny_model(tok), args=args, train_dataset=ds, processing_class=tok
    )
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape == batch["labels"].shape and batch["input_ids"].shape[0] == 2
    trained = batch["labels"] != -100
    attended = batch["attention_mask"].bool()
    assert trained.any() and (trained <= attended).all()
    if assistant_only:
        assert (trained.sum(1) < attended.sum(1)).all()  # prompts and tool results not trained
        # TRL's mask is the template's `{% generation %}` span: the same tokens as ours.
        first = trainer.train_dataset[0]
        weights = [1.0 if m["role"] == "assistant" else None for m in first["messages"]]
        conv = ChatConversation("x", "", first["messages"], first["tools"], weights)
        (ours,) = tokenize_conversations(tok, [conv])
        assert first["input_ids"] == ours["input_ids"]
        assert [int(x != -100) for x in first["labels"]] == [
            int(w > 0) for w in ours["loss_weight"]
        ]
    result = trainer.train()
    assert result.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))


@pytest.mark.long
def test_tokenized_parquet_trains_with_weighted_loss(synth_lake: tl.Lake, tmp_path: Path) -> None:
    """The Parquet columns go straight into a causal LM: loss = Σ w·nll / Σ w (shifted tokens)."""
    tok = tiny_chat_tokenizer(template="chatml")
    out = tmp_path / "tok"
    export_sft(synth_lake, str(out), format="tokenized", tokenizer=tok, credit="pmc")
    rows = pq.read_table(out / "train-00000.parquet").slice(0, 2).to_pylist()
    assert len(rows) == 2
    width = max(len(r["input_ids"]) for r in rows)

    def pad(key: str, value: Any, dtype: Any) -> Any:
        return torch.tensor([r[key] + [value] * (width - len(r[key])) for r in rows], dtype=dtype)

    input_ids = pad("input_ids", tok.pad_token_id, torch.long)
    attention = pad("attention_mask", 0, torch.long)
    labels = pad("labels", -100, torch.long)
    weight = pad("loss_weight", 0.0, torch.float32)
    assert ((labels != -100) == (weight > 0)).all()
    model = _tiny_model(tok)
    logits = model(input_ids=input_ids, attention_mask=attention).logits
    # position t predicts token t+1: shift, as HF's own loss does with `labels`
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]),
        labels[:, 1:].reshape(-1),
        ignore_index=-100,
        reduction="none",
    ).view(len(rows), width - 1)
    w = weight[:, 1:]
    loss = (w * nll).sum() / w.sum()
    loss.backward()
    assert torch.isfinite(loss) and w.sum() > 0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    # with every weight 1, the weighted loss is HF's own mean loss on `labels`
    hf = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    ones = (labels[:, 1:] != -100).float()
    assert torch.allclose((ones * nll).sum() / ones.sum(), hf, atol=1e-5)
