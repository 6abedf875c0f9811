"""Codex adapter: the corpus rollouts checked against their own lines.

The rollouts have no licence, so they are read from the shared corpus and never copied here.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._adapter import stable_id
from trajlake.ingest._models import normalize_model
from trajlake.ingest._sources import read_head
from trajlake.ingest.codex import CodexAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
FIXTURE = SHARED_CORPUS / (
    "05_coding_cli_sessions/codex_rollout_jsonl/madshn_localpush/src-tauri/tests/fixtures/codex/"
    "2026-02-23"
)
ROLLOUTS = sorted((FIXTURE / "raw" / "sessions").glob("rollout-*.jsonl"))
COMPACTED = (
    FIXTURE
    / "raw"
    / "sessions"
    / ("rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl")
)
pytestmark = pytest.mark.skipif(not ROLLOUTS, reason="shared corpus not available")
CALLS = ("function_call", "custom_tool_call", "web_search_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(CodexAdapter().read(source, stream))


def _record(path: Path) -> CanonicalTrajectory:
    (item,) = _read(path)
    assert isinstance(item, ParsedTrajectory), item
    return normalize(item.record)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _items(lines: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [
        line["payload"]
        for line in lines
        if line["type"] == "response_item" and line["payload"].get("type") in kinds
    ]


def _model_calls(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`last_token_usage` of each model call: counts repeat, a new total is a new call."""
    calls, total = [], None
    for line in lines:
        payload = line["payload"]
        if line["type"] == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info") or {}
            if info and info["total_token_usage"] != total:
                total = info["total_token_usage"]
                calls.append(info["last_token_usage"])
    return calls


def test_rollouts_match_their_lines() -> None:
    for path in ROLLOUTS:
        lines = _lines(path)
        record = _record(path)
        meta = lines[0]["payload"]
        assert record.trajectory_id == stable_id("codex", meta["id"])
        assert (record.harness, record.harness_version) == ("codex", meta["cli_version"])
        models = Counter(ln["payload"]["model"] for ln in lines if ln["type"] == "turn_context")
        assert record.policy_model == normalize_model(models.most_common(1)[0][0])
        # Tool calls: every call item, in order, arguments kept verbatim (not JSON here).
        calls = _items(lines, *CALLS)
        got = [c for m in record.messages for c in m.tool_calls or []]
        assert len(got) == record.n_tool_calls == len(calls)
        assert [c.id for c in got] == [c.get("call_id", c.get("id")) for c in calls]
        assert [c.arguments for c in got if c.type == "function"] == [
            c["arguments"] for c in calls if c["type"] == "function_call"
        ]
        # Outputs pair with their calls by call_id.
        outputs = _items(lines, *OUTPUTS)
        tools = [m for m in record.messages if m.role == "tool"]
        assert [m.tool_call_id for m in tools] == [o["call_id"] for o in outputs]
        assert {m.tool_call_id for m in tools} <= {c.id for c in got}
        assert all(m.name == {c.id: c.name for c in got}[m.tool_call_id] for m in tools)
        # Final totals are the last cumulative count.
        last = next(
            ln["payload"]["info"]["total_token_usage"]
            for ln in reversed(lines)
            if ln["payload"].get("type") == "token_count" and ln["payload"]["info"]
        )
        assert (record.prompt_tokens, record.completion_tokens, record.total_tokens) == (
            last["input_tokens"], last["output_tokens"], last["total_tokens"],
        )  # fmt: skip
        assert record.attrs is not None
        assert record.attrs["cached_input_tokens"] == last["cached_input_tokens"]
        # One assistant message per model call, each with that call's usage.
        per_call = _model_calls(lines)
        replies = [m for m in record.messages if m.role == "assistant" and not m.is_copied_context]
        assert len(replies) == len(per_call)
        assert [m.prompt_tokens for m in replies] == [u["input_tokens"] for u in per_call]
        assert [m.reasoning_tokens for m in replies] == [
            u["reasoning_output_tokens"] for u in per_call
        ]
        assert sum(m.completion_tokens or 0 for m in replies) == last["output_tokens"]


def test_roles_and_instructions() -> None:
    path = ROLLOUTS[-1]
    lines = _lines(path)
    record = _record(path)
    messages = _items(lines, "message")
    system = [m for m in record.messages if m.role == "system"]
    # base_instructions first, then every developer message (role kept in attrs).
    assert system[0].content == lines[0]["payload"]["base_instructions"]["text"]
    developer = [m["content"][0]["text"] for m in messages if m["role"] == "developer"]
    assert [m.content for m in system[1:]] == developer
    assert all(m.attrs and m.attrs["role"] == "developer" for m in system[1:])
    users = [m["content"][0]["text"] for m in messages if m["role"] == "user"]
    assert [m.content for m in record.messages if m.role == "user"] == users
    reasoning = [
        s["text"] for r in _items(lines, "reasoning") for s in r["summary"]
    ]  # every summary lands on an assistant message
    got = [m.reasoning for m in record.messages if m.reasoning]
    assert "\n\n".join(got) == "\n\n".join(reasoning)
    done = [ln["payload"] for ln in lines if ln["payload"].get("type") == "task_complete"]
    assert record.final_output == done[-1]["last_agent_message"]
    assert (record.status, record.exit_reason) == ("completed", "task_complete")
    assert record.started_at is not None and record.started_at.tzinfo is not None


def test_compaction_starts_a_thread_of_copied_history() -> None:
    lines = _lines(COMPACTED)
    record = _record(COMPACTED)
    (compacted,) = [ln["payload"] for ln in lines if ln["type"] == "compacted"]
    history = [i for i in compacted["replacement_history"] if i["type"] == "message"]
    thread = [m for m in record.messages if m.thread == "compacted-1"]
    copied = [m for m in thread if m.is_copied_context]
    assert len(copied) == len(history)
    assert thread[: len(copied)] == copied  # the rewritten history comes first
    texts = ["\n".join(c["text"] for c in i["content"] if "text" in c) for i in history]
    assert [m.content for m in copied] == texts
    assert not any(m.is_copied_context for m in record.messages if m.thread == "main")
    assert record.attrs is not None and record.attrs["compactions"] == 1
    # The turns after the compaction live in the new thread.
    at = next(i for i, ln in enumerate(lines) if ln["type"] == "compacted")
    later_calls = [ln for ln in lines[at:] if ln["payload"].get("type") in CALLS]
    assert sum(len(m.tool_calls or []) for m in thread) == len(later_calls)


def test_bad_lines_are_reported_and_the_rollout_kept(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    good = ROLLOUTS[-1].read_bytes().splitlines(keepends=True)
    path.write_bytes(good[0] + b'"text"\n' + b'{"type": "event_msg"}\n{oops\n' + b"".join(good[1:]))
    items = _read(path)
    assert [(i.line, i.field) for i in items if isinstance(i, BadRecord)] == [
        (2, "type"), (3, "payload"), (4, None),
    ]  # fmt: skip
    assert isinstance(items[-1], ParsedTrajectory)
    assert normalize(items[-1].record).n_tool_calls == _record(ROLLOUTS[-1]).n_tool_calls


def test_lake_ingest_and_sql(lake: tl.Lake) -> None:
    report = lake.ingest(FIXTURE, redact=False)
    assert (report.formats, report.added, report.quarantined) == ({"codex": 6}, 6, 0)
    assert len(report.files_skipped) == 4  # README, manifest and the expected/ outputs
    names = dict(lake.sql("SELECT tool_name, count(*) FROM tool_calls GROUP BY 1").rows())
    expected = Counter(
        c.get("name", "web_search") for p in ROLLOUTS for c in _items(_lines(p), *CALLS)
    )
    assert names == dict(expected)
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    assert set(roles) == {"system", "user", "assistant", "tool"}
    assert lake.ingest(FIXTURE, redact=False).added == 0


def test_sniff_claims_only_rollouts() -> None:
    adapter = CodexAdapter()

    def score(path: Path) -> float:
        source = SourceFile(str(path), os.path.getsize(path))
        return adapter.sniff(source, read_head(source))

    assert all(score(p) == 1.0 for p in ROLLOUTS)
    others = [
        p
        for p in SHARED_CORPUS.glob("*/**/*")
        if p.is_file() and "codex_rollout_jsonl" not in p.parts and p.stat().st_size < 5_000_000
    ]
    assert [p for p in others if score(p) > 0.0] == []
    assert score(FIXTURE / "manifest.json") == 0.0
