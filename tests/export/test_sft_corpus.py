"""Every SFT format on real ingested trajectories (τ-bench, SWE-agent) and on the synthetic
environment, each row checked against the rules of the trainer that reads it.

Real data: `../shared/corpus` (skipped when absent), exported without a credit run (weights 1.0).
Synthetic: `trajlake.synth` with a prefix-mc/rise credit run, so weights are a mix of 0 and 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import trajlake as tl
from tests.conftest import SHARED_CORPUS
from trajlake.credit import run_credit
from trajlake.export.sft import export_sft
from trajlake.export.tokenize import verify_sample
from trajlake.synth import SynthConfig, generate
from trajlake.testing_tokenizer import ChatConversation, tiny_chat_tokenizer

TAU = SHARED_CORPUS / "06_eval_frameworks" / "tau_bench"
SWE = SHARED_CORPUS / "01_sweagent_traj"
FORMATS = ["openai", "trl", "sharegpt", "axolotl"]


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for shard in sorted(folder.glob("train-*.jsonl"))
        for line in shard.read_text().splitlines()
    ]


@pytest.fixture(scope="module", params=["corpus", "synth"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(source, {format: folder}, credit run or None) for one lake, every format exported."""
    root = tmp_path_factory.mktemp(request.param)
    lake = tl.open_lake(root / "lake", create=True)
    credit = None
    if request.param == "corpus":
        if not (TAU.exists() and SWE.exists()):
            pytest.skip("no shared corpus")
        lake.ingest([str(TAU), str(SWE)], workers=1)
    else:
        lake.write(generate(SynthConfig(seed=5, n_tasks=10, rollouts_per_task=4)).trajectories)
        credit = run_credit(lake, estimator="prefix-mc", mask="rise", name="pmc").run_name
    folders = {}
    for fmt in FORMATS:
        export_sft(lake, str(root / fmt), format=fmt, credit=credit)
        folders[fmt] = root / fmt
    return request.param, folders, credit, lake


def test_openai_rows_follow_the_fine_tuning_chat_format(exported: Any) -> None:
    _, folders, credit, _ = exported
    rows = _rows(folders["openai"])
    assert rows
    weights: set[int] = set()
    calls = 0
    for row in rows:
        assert set(row) <= {"messages", "tools", "parallel_tool_calls"}
        for tool in row["tools"]:
            assert tool["type"] == "function" and isinstance(tool["function"]["name"], str)
            assert isinstance(tool["function"].get("parameters", {}), dict)
        open_calls: set[str] = set()
        assert any(m["role"] == "assistant" for m in row["messages"])
        for m in row["messages"]:
            role = m["role"]
            assert role in ("system", "user", "assistant", "tool")
            assert m["content"] is None or isinstance(m["content"], str)
            if role == "assistant":
                assert set(m) <= {"role", "content", "tool_calls", "weight", "name", "refusal"}
                assert m["weight"] in (0, 1) and type(m["weight"]) is int
                weights.add(m["weight"])
                assert m["content"] or m.get("tool_calls")
                for tc in m.get("tool_calls") or []:
                    assert set(tc) == {"id", "type", "function"} and tc["type"] == "function"
                    assert isinstance(tc["function"]["name"], str) and tc["function"]["name"]
                    assert isinstance(tc["function"]["arguments"], str)
                    assert isinstance(json.loads(tc["function"]["arguments"]), dict)
                    open_calls.add(tc["id"])
                    calls += 1
            elif role == "tool":
                assert set(m) == {"role", "content", "tool_call_id"}
                assert m["tool_call_id"] in open_calls  # answers a call made before it
            else:
                assert set(m) <= {"role", "content", "name"} and "weight" not in m
    assert calls > 0
    assert weights == ({0, 1} if credit else {1})


def test_sharegpt_rows_alternate_as_llamafactory_requires(exported: Any) -> None:
    """LLaMA-Factory's ShareGPT converter: optional leading system turn, then human/observation
    at even positions and gpt/function_call at odd ones, an even count (else the row is dropped).
    """
    _, folders, _, _ = exported
    # τ-bench ends on the user's "###STOP###", SWE-agent and synth rollouts on an observation,
    # and some rollouts have two assistant turns in a row: the row must still alternate.
    rows = _rows(folders["sharegpt"])
    odd, even = ("human", "observation"), ("gpt", "function_call")
    seen = set()
    broken = []
    for row in rows:
        turns = row["conversations"]
        assert len(row["weights"]) == len(turns)
        assert isinstance(json.loads(row["tools"]), list)
        if turns and turns[0]["from"] == "system":
            turns = turns[1:]
        tags = [t["from"] for t in turns]
        alternates = all(t in (odd, even)[i % 2] for i, t in enumerate(tags))
        if not turns or len(turns) % 2 or not alternates:
            broken.append((row["trajectory_id"], tags))
        for turn in turns:
            assert isinstance(turn["value"], str)
            seen.add(turn["from"])
            if turn["from"] == "function_call":
                call = json.loads(turn["value"])
                for c in call if isinstance(call, list) else [call]:
                    assert set(c) == {"name", "arguments"}
    assert {"function_call", "observation", "human"} <= seen
    assert not broken, f"{len(broken)} of {len(rows)} rows break the alternation: {broken[:2]}"


def test_axolotl_rows_carry_weight_and_train_per_message(exported: Any) -> None:
    _, folders, credit, _ = exported
    trained = set()
    for row in _rows(folders["axolotl"]):
        assert isinstance(row["tools"], list)
        for m in row["messages"]:
            assert m["role"] in ("system", "user", "assistant", "tool")
            assert isinstance(m["content"], str)
            assert m["train"] == (m["weight"] > 0)
            if m["role"] != "assistant":
                assert m["weight"] == 0.0 and m["train"] is False
            else:
                trained.add(m["train"])
    assert trained == ({True, False} if credit else {True})


def test_trl_rows_are_messages_tools_and_weights(exported: Any) -> None:
    _, folders, _, _ = exported
    for row in _rows(folders["trl"]):
        assert list(row) == ["messages", "tools", "message_weights", "trajectory_id"]
        assert len(row["message_weights"]) == len(row["messages"])
        for m, w in zip(row["messages"], row["message_weights"], strict=True):
            assert m["role"] == "assistant" or w == 0.0


def _conversation(row: dict[str, Any]) -> ChatConversation:
    """A trl row back to the conversation the tokenized export was made from."""
    messages = row["messages"]
    weights: list[float | None] = [
        w if m["role"] == "assistant" else None
        for m, w in zip(messages, row["message_weights"], strict=True)
    ]
    return ChatConversation(row["trajectory_id"], "", messages, row["tools"], weights)


@pytest.mark.long
@pytest.mark.parametrize("template", ["chatml", "llama3-like", "gemma-like"])
def test_tokenized_masks_decode_to_the_weighted_assistant_turns(
    exported: Any, template: str, tmp_path: Path
) -> None:
    source, folders, credit, lake = exported
    tok = tiny_chat_tokenizer(template=template)  # type: ignore[arg-type]
    where = None
    if source == "corpus":  # a slice of each source keeps this quick
        ids = [
            r["trajectory_id"]
            for r in lake.sql(
                "SELECT trajectory_id FROM trajectories QUALIFY row_number() OVER "
                "(PARTITION BY source_format ORDER BY trajectory_id) <= 8"
            )
        ]
        where = "trajectory_id IN (" + ",".join(f"'{i}'" for i in ids) + ")"
    out = tmp_path / "tok"
    export_sft(lake, str(out), format="tokenized", tokenizer=tok, credit=credit, where=where)
    convs = {r["trajectory_id"]: _conversation(r) for r in _rows(folders["trl"])}
    table = pq.read_table(out / "train-00000.parquet").to_pylist()
    assert table
    for row in table:
        verify_sample(tok, row, convs[row["trajectory_id"]])
        assert 0 < sum(1 for w in row["loss_weight"] if w) < len(row["input_ids"])
