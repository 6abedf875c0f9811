"""Text-action agents (mini-swe-agent, SWE-agent text-parsed) export what they emitted by default;
`actions="tool-calls"` converts. Real files from `../shared/corpus` (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from tests.conftest import SHARED_CORPUS
from trajlake.export.sft import export_sft

MINI = SHARED_CORPUS / "02_mini_swe_agent" / "upstream_test_data"
SWE = SHARED_CORPUS / "01_sweagent_traj" / "tests" / "test_data" / "trajectories"
SWE_FC = (
    SHARED_CORPUS
    / "01_sweagent_traj"
    / "trajectories"
    / "demonstrations"
    / "function_calling_simple.traj"
)


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for shard in sorted(folder.glob("train-*.jsonl"))
        for line in shard.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def corpus_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    if not (MINI.exists() and SWE.exists() and SWE_FC.exists()):
        pytest.skip("no shared corpus")
    lake = tl.open_lake(tmp_path_factory.mktemp("actions") / "lake", create=True)
    lake.ingest([str(MINI), str(SWE), str(SWE_FC)], workers=1)
    return lake


def _source(lake: tl.Lake) -> dict[str, str]:
    rows = lake.sql("SELECT trajectory_id, source_uri FROM trajectories").rows()
    return {tid: uri for tid, uri in rows}


def _assistant_texts(path: str) -> list[str]:
    """The assistant messages of a corpus file, as the agent wrote them (no demonstrations)."""
    data = json.loads(Path(path.removeprefix("file://")).read_text())
    entries = data if isinstance(data, list) else data.get("history") or data.get("messages")
    return [
        e["content"]
        for e in entries
        if e.get("role") == "assistant" and not e.get("is_demo") and e.get("agent", "main") in (
            "main", "primary"
        )
    ]  # fmt: skip


def test_text_actions_export_exactly_the_agents_own_text(
    corpus_lake: tl.Lake, tmp_path: Path
) -> None:
    report = export_sft(corpus_lake, str(tmp_path / "trl"), format="trl")
    sources = _source(corpus_lake)
    text, native = 0, 0
    for row in _rows(tmp_path / "trl"):
        uri = sources[row["trajectory_id"]]
        messages = row["messages"]
        if any(m["role"] == "tool" for m in messages):  # function calling keeps its tool calls
            native += 1
            assert any(m.get("tool_calls") for m in messages)
            continue
        text += 1
        assistants = [m for m in messages if m["role"] == "assistant"]
        assert not any("tool_calls" in m for m in assistants), uri
        expected = _assistant_texts(uri)
        assert [m["content"] for m in assistants] == expected[: len(assistants)], uri
        assert any("```" in m["content"] for m in assistants)
        assert row["tools"] == []
    assert text >= 4 and native >= 1
    manifest = json.loads((tmp_path / "trl" / "manifest.json").read_text())
    assert manifest["actions"] == "native"
    assert report.splits["train"].text_action_trajectories == text


def test_tool_calls_option_converts_actions_and_observations(
    corpus_lake: tl.Lake, tmp_path: Path
) -> None:
    mini = "source_format = 'mini-swe-agent'"
    export_sft(corpus_lake, str(tmp_path / "oa"), format="openai", where=mini, actions="tool-calls")
    rows = _rows(tmp_path / "oa")
    assert len(rows) == 2
    for row in rows:
        calls = {c["id"] for m in row["messages"] for c in m.get("tool_calls") or []}
        results = [m for m in row["messages"] if m["role"] == "tool"]
        assert calls and results and {m["tool_call_id"] for m in results} <= calls
        for m in row["messages"]:
            for c in m.get("tool_calls") or []:
                assert c["function"]["name"] == "bash"
                assert json.loads(c["function"]["arguments"])["command"] in m["content"]
    manifest = json.loads((tmp_path / "oa" / "manifest.json").read_text())
    assert manifest["actions"] == "tool-calls"


def test_step_loss_mask_follows_the_weights(corpus_lake: tl.Lake, tmp_path: Path) -> None:
    export_sft(corpus_lake, str(tmp_path / "trl"), format="trl")
    for row in _rows(tmp_path / "trl"):
        masks = [m["step_loss_mask"] for m in row["messages"]]
        assert masks == [int(w > 0) for w in row["message_weights"]]
        assert 1 in masks and 0 in masks
    export_sft(corpus_lake, str(tmp_path / "oa"), format="openai")
    assert not any("step_loss_mask" in m for r in _rows(tmp_path / "oa") for m in r["messages"])
    export_sft(corpus_lake, str(tmp_path / "oa2"), format="openai", step_loss_mask=True)
    for row in _rows(tmp_path / "oa2"):
        for m in row["messages"]:
            assert m["step_loss_mask"] == (1 if m.get("weight") else 0)
    with pytest.raises(ValueError, match="step-loss-mask"):
        export_sft(corpus_lake, str(tmp_path / "t"), format="tokenized", tokenizer=object(),
                   step_loss_mask=True)  # fmt: skip
