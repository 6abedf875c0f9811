"""Claude Code adapter: session transcripts and subagent files checked against their records."""

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
from trajlake.ingest.claude_code import ClaudeCodeAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "claude_code"
SHORT = DATA / "marot_spotter" / "short.jsonl"
TOOL_HEAVY = DATA / "marot_spotter" / "tool_heavy.jsonl"
SUBAGENTS = DATA / "marot_spotter" / "258c7280-ae70-4798-800f-63464d01a85d" / "subagents"
EDGE = DATA / "daaain_claude-code-log" / "edge_cases.jsonl"
REPRESENTATIVE = DATA / "daaain_claude-code-log" / "representative_messages.jsonl"
TRANSCRIPTS = SHARED_CORPUS / "05_coding_cli_sessions/claude_code_jsonl/marot_spotter/test"
BIG = TRANSCRIPTS / "fixtures/transcripts/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
needs_corpus = pytest.mark.skipif(not BIG.exists(), reason="shared corpus not available")


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(ClaudeCodeAdapter().read(source, stream))


def _record(path: Path) -> CanonicalTrajectory:
    items = _read(path)
    assert isinstance(items[-1], ParsedTrajectory), items
    return normalize(items[-1].record)


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_text().splitlines():
        value = json.loads(raw)
        if isinstance(value, dict) and isinstance(value.get("message"), dict):
            out.append(value)
    return out


def _check_session(path: Path, record: CanonicalTrajectory, thread: str = "main") -> None:
    """Messages of one thread against the file's records (all on the main line here)."""
    records = _lines(path)
    assistant = [r for r in records if r["type"] == "assistant"]
    last_usage: dict[str, dict[str, int]] = {}
    for r in assistant:  # usage repeats on every line of a message: its last line counts
        last_usage[r["message"]["id"]] = r["message"]["usage"]
    messages = [m for m in record.messages if m.thread == thread]
    replies = [m for m in messages if m.role == "assistant"]
    assert len(replies) == len(last_usage)
    assert [m.attrs["message_id"] for m in replies if m.attrs] == list(last_usage)
    uses = [b for r in assistant for b in r["message"]["content"] if b["type"] == "tool_use"]
    calls = [c for m in replies for c in m.tool_calls or []]
    assert [(c.id, c.name) for c in calls] == [(b["id"], b["name"]) for b in uses]
    assert [json.loads(c.arguments or "") for c in calls] == [b["input"] for b in uses]
    results = [
        b
        for r in records
        if r["type"] == "user" and isinstance(r["message"]["content"], list)
        for b in r["message"]["content"]
        if b["type"] == "tool_result"
    ]
    tools = [m for m in messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == [b["tool_use_id"] for b in results]
    assert {m.tool_call_id for m in tools} <= {c.id for c in calls}
    assert [m.is_error for m in tools] == [b.get("is_error") for b in results]
    whole = [
        u["input_tokens"] + u.get("cache_creation_input_tokens", 0)
        + u.get("cache_read_input_tokens", 0)
        for u in last_usage.values()
    ]  # fmt: skip
    assert sum(m.prompt_tokens or 0 for m in replies) == sum(whole)
    output = sum(u["output_tokens"] for u in last_usage.values())
    assert sum(m.completion_tokens or 0 for m in replies) == output


def test_parallel_tool_calls_are_one_message_with_both_results() -> None:
    record = _record(SHORT)
    _check_session(SHORT, record)
    assert [m.role for m in record.messages] == ["user", "assistant", "tool", "tool", "user"]
    reply = record.messages[1]
    said = "Let me check the project structure and try running the server to see the error."
    assert reply.content == said
    assert reply.reasoning is not None and reply.reasoning.startswith("The user is having trouble")
    assert [c.name for c in reply.tool_calls or []] == ["Bash", "Glob"]
    # The Bash result hangs off the first line of the message, not the chain's leaf.
    assert [m.name for m in record.messages[2:4]] == ["Bash", "Glob"]
    assert all(m.is_error for m in record.messages[2:4])
    assert (reply.prompt_tokens, reply.cached_tokens) == (3 + 13835 + 11515, 11515)
    # policy_model is in normal form (`_models`); the message keeps the name the API gave.
    assert (reply.model, record.policy_model, record.harness) == (
        "claude-opus-4-6", "anthropic/claude-opus-4-6", "claude-code",
    )  # fmt: skip
    assert record.attrs is not None and record.attrs["raw_policy_model"] == "claude-opus-4-6"
    assert record.harness_version == "2.1.38"
    assert record.trajectory_id == stable_id("claude-code", "55604662-cf2a-4331-851a-ec234028f8ca")
    assert record.task_id is None and record.status is None
    assert record.attrs is not None
    assert record.attrs["record_types"] == {
        "file-history-snapshot": 1, "progress:hook_progress": 3, "user": 4, "assistant": 5,
        "system:local_command": 2,
    }  # fmt: skip


def test_tool_heavy_session_matches_its_records() -> None:
    record = _record(TOOL_HEAVY)
    _check_session(TOOL_HEAVY, record)
    meta = [m for m in record.messages if m.attrs and m.attrs.get("is_meta")]
    sources = [r for r in _lines(TOOL_HEAVY) if r.get("isMeta") and r["type"] == "user"]
    assert len(meta) == len(sources) and all(m.role == "user" for m in meta)


def test_hand_made_session_without_parents_stays_linear() -> None:
    # Every record of this fixture is a root (parentUuid null): read in file order.
    record = _record(REPRESENTATIVE)
    _check_session(REPRESENTATIVE, record)
    assert record.attrs is not None and record.attrs["off_chain_messages"] == 0
    assert len(record.attrs["summaries"]) == 1


def test_malformed_lines_are_bad_records_and_the_session_survives() -> None:
    items = _read(EDGE)
    bad = [i for i in items if isinstance(i, BadRecord)]
    # A bare string, an int, a list, a record without type, and three broken messages.
    assert [(b.line, b.field) for b in bad] == [
        (10, "message.content"), (11, "message"), (13, None), (14, "type"), (15, None),
        (16, None), (18, "message.content.0"),
    ]  # fmt: skip
    assert "got str" in bad[2].error and "no `type`" in bad[3].error
    record = items[-1]
    assert isinstance(record, ParsedTrajectory)
    roles = Counter(m.role for m in record.record.messages)
    assert roles == {"user": 6, "assistant": 4, "tool": 1}


def test_subagent_file_alone_is_a_subagent_trajectory() -> None:
    path = SUBAGENTS / "agent-a881341.jsonl"
    record = _record(path)
    _check_session(path, record)
    session = _lines(path)[0]["sessionId"]
    assert record.is_subagent
    assert record.parent_trajectory_id == stable_id("claude-code", session)
    assert record.trajectory_id == stable_id("claude-code", session, "a881341")
    assert record.attrs is not None and record.attrs["thread_kind"] == "subagent"
    compaction = _record(SUBAGENTS / "agent-acompact-fffbd0.jsonl")
    # Two injected reminders were copied from the session; the summary request and the
    # summary are the compaction's own.
    assert [(m.role, m.is_copied_context) for m in compaction.messages] == [
        ("user", True), ("user", True), ("user", False), ("assistant", False),
    ]  # fmt: skip
    assert compaction.attrs is not None and compaction.attrs["thread_kind"] == "compaction"


def test_subagent_files_are_companions_of_their_session() -> None:
    adapter = ClaudeCodeAdapter()
    sub = SourceFile(str(SUBAGENTS / "agent-a881341.jsonl"), 1)
    session = str(SUBAGENTS.parent.parent / "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
    assert adapter.companion_of(sub, frozenset({sub.uri, session})) == session
    assert adapter.companion_of(sub, frozenset({sub.uri})) is None
    assert adapter.companion_of(SourceFile(str(SHORT), 1), frozenset({str(SHORT)})) is None


@needs_corpus
def test_session_with_subagents_and_compaction() -> None:
    record = _record(BIG)
    _check_session(BIG, record)
    threads = Counter(m.thread for m in record.messages)
    assert set(threads) == {"main", "agent-aac57f5", "agent-acompact-946d2b"}
    for thread in ("agent-aac57f5", "agent-acompact-946d2b"):
        path = BIG.with_suffix("") / "subagents" / f"{thread}.jsonl"
        _check_session(path, record, thread)
        alone = _record(path)
        assert [m.role for m in alone.messages] == [
            m.role for m in record.messages if m.thread == thread
        ]
    task = next(m for m in record.messages if m.thread == "agent-aac57f5")
    assert task.attrs is not None
    assert task.attrs["parent_tool_call_id"] == "toolu_01Hf8v1Za7y4af8VUwSR4CXU"
    calls = {c.id: c.name for m in record.messages for c in m.tool_calls or []}
    assert calls["toolu_01Hf8v1Za7y4af8VUwSR4CXU"] == "Task"
    summary = [m for m in record.messages if m.attrs and m.attrs.get("is_compact_summary")]
    assert len(summary) == 1 and summary[0].thread == "main" and summary[0].role == "user"
    assert record.attrs is not None
    assert record.attrs["compactions"] == [{"trigger": "manual", "preTokens": 142431}]
    models = Counter(m.model for m in record.messages if m.role == "assistant")
    assert record.attrs["raw_policy_model"] in models and record.attrs["models"] == dict(models)
    assert record.policy_model == normalize_model(record.attrs["raw_policy_model"])


@needs_corpus
def test_lake_ingest_skips_companions_and_is_idempotent(lake: tl.Lake) -> None:
    subs = sorted(str(p) for p in (BIG.with_suffix("") / "subagents").glob("*.jsonl"))
    report = lake.ingest([str(BIG), *subs], redact=False)
    assert (report.added, report.files_companion, report.quarantined) == (1, 2, 0)
    rows = lake.sql("SELECT thread, role, count(*) FROM messages GROUP BY 1, 2").rows()
    expected = Counter((m.thread, m.role) for m in _record(BIG).messages)
    assert {(t, r): n for t, r, n in rows} == dict(expected)
    assert lake.ingest(str(BIG), redact=False).added == 0


def test_lake_ingest_auto_detects_the_folder(lake: tl.Lake) -> None:
    report = lake.ingest(DATA, redact=False)
    assert report.formats == {"claude-code": 6}
    assert report.quarantined == 7  # edge_cases.jsonl's malformed lines
    subagents = lake.sql("SELECT count(*) FROM trajectories WHERE is_subagent").rows()[0][0]
    assert subagents == 2
    calls = lake.sql("SELECT count(*) FROM tool_calls").rows()[0][0]
    total = sum(
        len(m.tool_calls or []) for path in DATA.rglob("*.jsonl") for m in _record(path).messages
    )
    assert calls == total
    lines = lake.sql("SELECT line FROM quarantine ORDER BY line").rows()
    assert [row[0] for row in lines] == [10, 11, 13, 14, 15, 16, 18]


def test_sniff_claims_only_claude_code_files() -> None:
    adapter = ClaudeCodeAdapter()

    def score(path: Path) -> float:
        source = SourceFile(str(path), os.path.getsize(path))
        return adapter.sniff(source, read_head(source))

    for path in DATA.rglob("*.jsonl"):
        assert score(path) >= 0.9, path
    for path in DATA.rglob("*"):
        if path.is_file() and path.suffix != ".jsonl":
            assert score(path) == 0.0, path
    others = [
        p
        for p in SHARED_CORPUS.glob("*/**/*")
        if p.is_file() and "claude_code_jsonl" not in p.parts and p.stat().st_size < 5_000_000
    ]
    assert [p for p in others if score(p) > 0.0] == []
