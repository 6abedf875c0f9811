"""Weighted training rows read back from the trl, axolotl and tokenized exports of one credit run
(float weights from the `advantage` mask), checked against the tokenized export and against the
conversations themselves (`verify_sample`); malformed rows are errors that name the row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.export.sft import export_sft
from trajlake.export.tokenize import IGNORE_INDEX, verify_sample
from trajlake.export.weighted_rows import row_kind, weighted_rows
from trajlake.synth import SynthConfig, generate
from trajlake.testing_tokenizer import ChatConversation, tiny_chat_tokenizer

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_chat_tokenizer(template="chatml")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, tok: Any) -> Path:
    root = tmp_path_factory.mktemp("weighted")
    lake = tl.open_lake(root / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=2, rollouts_per_task=2)).trajectories)
    run_credit(lake, estimator="prefix-mc", mask="advantage", name="adv")
    for fmt in ("trl", "axolotl"):
        export_sft(lake, str(root / fmt), format=fmt, credit="adv")
    export_sft(lake, str(root / "tokenized"), format="tokenized", tokenizer=tok, credit="adv")
    return root


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _batch(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {k: [r[k] for r in rows] for k in rows[0]}


def _rows(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [
        dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)
    ]


def _conversation(row: dict[str, Any]) -> ChatConversation:
    return ChatConversation(
        row["trajectory_id"], "", row["messages"], row["tools"], row["message_weights"]
    )


def _set(values: list[float], index: int, value: float) -> list[float]:
    return [value if i == index else v for i, v in enumerate(values)]


def _tokenized(exports: Path) -> dict[str, dict[str, Any]]:
    rows = pq.read_table(exports / "tokenized" / "train-00000.parquet").to_pylist()
    return {r["trajectory_id"]: r for r in rows}


def test_trl_rows_weight_each_assistant_turn_like_the_tokenized_export(
    exports: Path, tok: Any
) -> None:
    trl_rows = _jsonl(exports / "trl" / "train-00000.jsonl")
    weights = {w for r in trl_rows for w in r["message_weights"]}
    assert 0.0 in weights and 1.0 in weights and weights - {0.0, 1.0}  # float credit weights
    out = _rows(weighted_rows(_batch(trl_rows), tok))
    assert [r["trajectory_id"] for r in out] == [r["trajectory_id"] for r in trl_rows]
    reference = _tokenized(exports)
    for row, source in zip(out, trl_rows, strict=True):
        conv = _conversation(source)
        verify_sample(tok, row, conv)  # each weighted run decodes to its turn, with its weight
        expected = reference[row["trajectory_id"]]
        assert row["input_ids"] == expected["input_ids"]
        assert row["labels"] == expected["labels"]
        assert row["loss_weight"] == pytest.approx(expected["loss_weight"], abs=1e-6)


def test_axolotl_rows_give_the_trl_rows(exports: Path, tok: Any) -> None:
    axolotl = _jsonl(exports / "axolotl" / "train-00000.jsonl")
    trl_rows = _jsonl(exports / "trl" / "train-00000.jsonl")
    assert row_kind(list(axolotl[0]), axolotl[0]) == "axolotl"
    assert weighted_rows(_batch(axolotl), tok) == weighted_rows(_batch(trl_rows), tok)


def test_tokenized_rows_pass_through_and_labels_follow_the_weights(exports: Path) -> None:
    rows = list(_tokenized(exports).values())
    out = _rows(weighted_rows(_batch(rows)))
    for row, source in zip(out, rows, strict=True):
        assert row["input_ids"] == source["input_ids"] and row["labels"] == source["labels"]
    bare = [{"input_ids": r["input_ids"], "loss_weight": r["loss_weight"]} for r in rows]
    (first, *_) = _rows(weighted_rows(_batch(bare)))
    assert first["labels"] == rows[0]["labels"]  # derived: -100 exactly where the weight is 0
    assert first["attention_mask"] == [1] * len(rows[0]["input_ids"])


def test_long_conversations_split_at_turn_boundaries(exports: Path, tok: Any) -> None:
    trl_rows = _jsonl(exports / "trl" / "train-00000.jsonl")
    out = _rows(weighted_rows(_batch(trl_rows), tok, max_tokens=1024))
    assert len(out) > len(trl_rows)
    by_id = {r["trajectory_id"]: _conversation(r) for r in trl_rows}
    for row in out:
        assert len(row["input_ids"]) <= 1024
        verify_sample(tok, row, by_id[row["trajectory_id"]])


def _trl_row(exports: Path) -> dict[str, Any]:
    return _jsonl(exports / "trl" / "train-00000.jsonl")[0]


def _bad_rows(exports: Path) -> list[tuple[str, dict[str, Any], str]]:
    trl = _trl_row(exports)
    tokenized = next(iter(_tokenized(exports).values()))
    user = next(i for i, m in enumerate(trl["messages"]) if m["role"] == "user")
    trained = tokenized["loss_weight"].index(next(w for w in tokenized["loss_weight"] if w))
    return [
        (
            "negative",
            {**trl, "message_weights": [-1.0, *trl["message_weights"][1:]]},
            "message 0 has weight -1.0",
        ),
        (
            "user weight",
            {**trl, "message_weights": _set(trl["message_weights"], user, 0.5)},
            f"message {user} \\(user\\) has weight 0.5",
        ),
        ("count", {**trl, "message_weights": [0.0]}, "1 message_weights for"),
        (
            "labels",
            {**tokenized, "labels": [IGNORE_INDEX] * len(tokenized["input_ids"])},
            f"labels disagree with loss_weight at token {trained}",
        ),
        ("length", {**tokenized, "loss_weight": [1.0]}, "1 loss weights for"),
        ("unweighted", {"input_ids": [1, 2], "labels": [1, 2]}, "carry no loss weights"),
    ]


def test_bad_rows_are_errors_naming_the_row(exports: Path, tok: Any) -> None:
    for name, row, message in _bad_rows(exports):
        with pytest.raises(ValueError, match=message) as err:
            weighted_rows(_batch([row]), tok, first_index=7)
        if name != "unweighted":
            assert f"row 7 ({row['trajectory_id']}" in str(err.value), name


def test_a_tokenized_row_too_long_is_an_error_not_a_cut(exports: Path) -> None:
    row = next(iter(_tokenized(exports).values()))
    with pytest.raises(ValueError, match="longer than max_length 100"):
        weighted_rows(_batch([row]), max_tokens=100)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        weighted_rows(_batch([_trl_row(exports)]))
