"""Tokenized SFT export: assistant masks without `{% generation %}`, fast path vs reference."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from trajlake.errors import ChatTemplateError, MaskVerificationError, TrajlakeError
from trajlake.export._chat_render import (
    assistant_spans,
    fast_spans,
    render_conversation,
    render_text,
)
from trajlake.export.tokenize import (
    TokenizedStats,
    chat_template_hash,
    tokenize_conversations,
    verify_sample,
)
from trajlake.testing_tokenizer import ChatConversation, sample_conversations, tiny_chat_tokenizer

TEMPLATES = ["chatml", "llama3-like"]


@pytest.fixture(scope="module", params=TEMPLATES)
def tok(request: pytest.FixtureRequest) -> Any:
    return tiny_chat_tokenizer(template=request.param)


@pytest.fixture(scope="module")
def convs() -> list[ChatConversation]:
    return list(sample_conversations(32, seed=7))


def _with(conv: ChatConversation, **changes: Any) -> ChatConversation:
    return dataclasses.replace(conv, **changes)


def _prefix_token_oracle(tok: Any, conv: ChatConversation) -> list[float]:
    """Token-level incremental prefix rendering: tokenize every prefix, diff the token ids."""
    full = tok(render_text(tok, conv.messages, conv.tools), add_special_tokens=False)["input_ids"]
    loss = [0.0] * len(full)
    for i, (m, w) in enumerate(zip(conv.messages, conv.weights, strict=True)):
        if m["role"] != "assistant":
            continue
        before = tok(
            render_text(tok, conv.messages[:i], conv.tools, add_generation_prompt=True),
            add_special_tokens=False,
        )["input_ids"]
        upto = tok(render_text(tok, conv.messages[: i + 1], conv.tools), add_special_tokens=False)[
            "input_ids"
        ]
        assert full[: len(upto)] == upto and upto[: len(before)] == before
        end = len(upto)
        while end > len(before) and tok.decode(upto[end - 1 : end]).strip() == "":
            end -= 1  # whitespace after the end-of-turn marker is not the assistant's
        for t in range(len(before), end):
            loss[t] = float(w or 0.0)
    return loss


@pytest.mark.long
def test_fast_path_equals_reference_on_sample_conversations(
    tok: Any, convs: list[ChatConversation]
) -> None:
    for conv in convs:
        text_f, spans_f, method = assistant_spans(tok, conv.messages, conv.tools)
        text_r, spans_r, _ = assistant_spans(tok, conv.messages, conv.tools, method="reference")
        assert method == "fast", conv.trajectory_id
        assert (text_f, spans_f) == (text_r, spans_r)
        fast = render_conversation(tok, conv.messages, conv.weights, conv.tools, method="fast")
        ref = render_conversation(tok, conv.messages, conv.weights, conv.tools, method="reference")
        assert fast == ref
        assert fast[1] == _prefix_token_oracle(tok, conv)


def test_tool_only_and_mixed_weights_match_reference(
    tok: Any, convs: list[ChatConversation]
) -> None:
    for n, conv in enumerate(convs[:12]):
        messages = [dict(m) for m in conv.messages]
        weights: list[float | None] = []
        k = 0
        for m in messages:
            if m["role"] == "assistant":
                if (n + k) % 3 == 0:
                    m["content"] = ""  # tool call only: the span is the tool-call rendering
                weights.append([1.0, 0.0, 0.25, 2.0][(n + k) % 4])
                k += 1
            else:
                weights.append(None)
        c = _with(conv, messages=messages, weights=weights)
        fast = render_conversation(tok, c.messages, c.weights, c.tools, method="fast")
        assert fast == render_conversation(tok, c.messages, c.weights, c.tools, method="reference")
        assert fast[1] == _prefix_token_oracle(tok, c)
        assert set(fast[1]) <= {0.0, 1.0, 0.25, 2.0}


def test_weights_map_to_exactly_the_assistant_tokens(tok: Any) -> None:
    conv = next(sample_conversations(1, seed=3))
    messages = conv.messages[:6]  # system, user, assistant, tool, assistant, tool
    weights: list[float | None] = [None, None, 1.0, None, 0.5, None]
    ids, loss = render_conversation(tok, messages, weights, conv.tools)
    text, spans, _ = assistant_spans(tok, messages, conv.tools)
    for i, w in ((2, 1.0), (4, 0.5)):
        seg = [t for t, x in zip(ids, loss, strict=True) if x == w]
        rendered = text[spans[i][0] : spans[i][1]]  # type: ignore[index]
        assert tok.decode(seg) == rendered
        assert rendered.startswith(messages[i]["content"].strip())
        assert rendered.endswith("<|im_end|>" if "im_end" in text else "<|eot_id|>")
        assert messages[i]["tool_calls"][0]["function"]["arguments"] in rendered
    # role headers, prompts and tool results carry no weight
    assert loss[0] == 0.0 and set(loss) == {0.0, 0.5, 1.0}
    weights[4] = 0.0
    _, loss0 = render_conversation(tok, messages, weights, conv.tools)
    assert set(loss0) == {0.0, 1.0}


def test_rows_labels_and_self_check(tok: Any, convs: list[ChatConversation]) -> None:
    stats = TokenizedStats()
    rows = list(tokenize_conversations(tok, convs[:10], stats=stats))
    assert stats.samples == len(rows) == 10 and stats.reference_fallbacks == 0
    assert stats.tokens == sum(len(r["input_ids"]) for r in rows)
    for row, conv in zip(rows, convs[:10], strict=True):
        assert row["trajectory_id"] == conv.trajectory_id and row["sample_index"] == 0
        for i, lab, w in zip(row["input_ids"], row["labels"], row["loss_weight"], strict=True):
            assert lab == (-100 if w == 0.0 else i)
        assert row["attention_mask"] == [1] * len(row["input_ids"])
        verify_sample(tok, row, conv)
    assert stats.trained_tokens == sum(sum(w != 0 for w in r["loss_weight"]) for r in rows)


def test_verify_sample_catches_bad_masks(tok: Any, convs: list[ChatConversation]) -> None:
    conv = convs[0]
    row = next(tokenize_conversations(tok, [conv]))
    n = len(row["input_ids"])
    all_one = {**row, "loss_weight": [1.0] * n, "labels": list(row["input_ids"])}
    with pytest.raises(MaskVerificationError, match="all-one"):
        verify_sample(tok, all_one, conv)
    all_zero = {**row, "loss_weight": [0.0] * n, "labels": [-100] * n}
    with pytest.raises(MaskVerificationError, match="all-zero"):
        verify_sample(tok, all_zero, conv)
    shifted_w = [0.0, *row["loss_weight"][:-1]]
    shifted = {
        **row,
        "loss_weight": shifted_w,
        "labels": [i if w else -100 for i, w in zip(row["input_ids"], shifted_w, strict=True)],
    }
    with pytest.raises(MaskVerificationError, match="decode to"):
        verify_sample(tok, shifted, conv)
    bad_labels = {**row, "labels": list(row["input_ids"])}
    with pytest.raises(MaskVerificationError, match="label at token"):
        verify_sample(tok, bad_labels, conv)
    assert issubclass(MaskVerificationError, TrajlakeError)
    # an untrained conversation really is all-zero: the check accepts it, export drops it
    untrained = _with(conv, weights=[0.0 if w is not None else None for w in conv.weights])
    stats = TokenizedStats()
    assert list(tokenize_conversations(tok, [untrained], stats=stats)) == []
    assert stats.dropped_samples == 1
    verify_sample(tok, all_zero, untrained)


def test_template_that_does_not_survive_sentinels_falls_back() -> None:
    # Llama-style `| trim`: content with surrounding whitespace renders differently once wrapped
    tok = tiny_chat_tokenizer(template="llama3-like")
    conv = next(sample_conversations(1, seed=11))
    messages = [
        {**m, "content": f"  {m['content']}\n"} if m["role"] == "assistant" else m
        for m in conv.messages
    ]
    c = _with(conv, messages=messages)
    assert fast_spans(tok, c.messages, c.tools) is None
    with pytest.raises(ChatTemplateError):
        render_conversation(tok, c.messages, c.weights, c.tools, method="fast")
    stats = TokenizedStats()
    (row,) = tokenize_conversations(tok, [c], stats=stats)
    assert stats.reference_fallbacks == 1
    ref = render_conversation(tok, c.messages, c.weights, c.tools, method="reference")
    assert (row["input_ids"], row["loss_weight"]) == ref
    assert row["loss_weight"] == _prefix_token_oracle(tok, c)
    verify_sample(tok, row, c)


def test_data_containing_template_markers_falls_back(convs: list[ChatConversation]) -> None:
    tok = tiny_chat_tokenizer(template="chatml")
    conv = convs[1]
    messages = [dict(m) for m in conv.messages]
    messages[2]["content"] += " (the marker <|im_start|>assistant\n appears in the text)"
    c = _with(conv, messages=messages)
    assert fast_spans(tok, c.messages, c.tools) is None
    with pytest.raises(ChatTemplateError, match="could not verify"):
        render_conversation(tok, c.messages, c.weights, c.tools, method="fast")
    # prefix rendering never searches for markers, so the reference still places every turn
    ids, loss = render_conversation(tok, c.messages, c.weights, c.tools)
    assert (ids, loss) == render_conversation(
        tok, c.messages, c.weights, c.tools, method="reference"
    )


def test_non_prefix_stable_template_raises() -> None:
    tok = tiny_chat_tokenizer(template="chatml")
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% if loop.last %} (last){% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "sure"},
    ]
    with pytest.raises(ChatTemplateError, match="prefix-stable"):
        render_conversation(tok, messages, [None, 1.0, None, 1.0], method="reference")


def test_split_long_conversations_at_turn_boundaries(
    tok: Any, convs: list[ChatConversation]
) -> None:
    conv = max(convs, key=lambda c: len(c.messages))
    full = next(tokenize_conversations(tok, [conv]))
    n_full = len(full["input_ids"])
    budget = n_full // 3
    stats = TokenizedStats()
    rows = list(tokenize_conversations(tok, [conv], max_tokens=budget, stats=stats))
    assert len(rows) >= 3 and stats.split_conversations == 1
    assert [r["sample_index"] for r in rows] == list(range(len(rows)))
    system_ids = tok(render_text(tok, conv.messages[:2], conv.tools), add_special_tokens=False)[
        "input_ids"
    ]
    trained_turns = 0
    for row in rows:
        assert len(row["input_ids"]) <= budget
        assert row["input_ids"][: len(system_ids)] == system_ids  # context repeated
        verify_sample(tok, row, conv)  # whole assistant spans only, in order
        trained_turns += len(_weighted_runs(row["loss_weight"]))
    n_assistant = sum(m["role"] == "assistant" for m in conv.messages)
    assert trained_turns + stats.truncated_turns == n_assistant
    # a budget below one turn + context drops turns and reports them
    tiny = TokenizedStats()
    rows = list(tokenize_conversations(tok, [conv], max_tokens=len(system_ids) + 5, stats=tiny))
    assert rows == [] and tiny.truncated_turns == n_assistant


def _weighted_runs(loss: list[float]) -> list[int]:
    starts = [t for t, w in enumerate(loss) if w and (t == 0 or not loss[t - 1])]
    return starts


def test_load_through_auto_tokenizer(tmp_path: Path, convs: list[ChatConversation]) -> None:
    from transformers import AutoTokenizer

    built = tiny_chat_tokenizer(tmp_path / "tok", template="chatml")
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert chat_template_hash(loaded) == chat_template_hash(built)
    assert chat_template_hash(loaded) == hashlib.sha256(built.chat_template.encode()).hexdigest()
    rows = list(tokenize_conversations(str(tmp_path / "tok"), convs[:3]))
    direct = list(tokenize_conversations(built, convs[:3]))
    assert rows == direct
    for row, conv in zip(rows, convs[:3], strict=True):
        verify_sample(str(tmp_path / "tok"), row, conv)


def test_tiny_tokenizer_is_deterministic(tmp_path: Path) -> None:
    a = tiny_chat_tokenizer(tmp_path / "a", template="llama3-like")
    b = tiny_chat_tokenizer(tmp_path / "b", template="llama3-like")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (
        tmp_path / "b" / "tokenizer.json"
    ).read_bytes()
    assert a.get_vocab() == b.get_vocab()


def test_tokenizer_without_template_is_an_error(convs: list[ChatConversation]) -> None:
    tok = tiny_chat_tokenizer(template="chatml")
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        list(tokenize_conversations(tok, convs[:1]))
    with pytest.raises(ValueError, match="max_tokens"):
        list(tokenize_conversations(tiny_chat_tokenizer(), convs[:1], max_tokens=0))
