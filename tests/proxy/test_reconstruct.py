"""Rollout reconstruction from recorded calls: threads, rewritten history, failures, the lake."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.responses import Response, ResponseInputParam
from pydantic import TypeAdapter

import trajlake as tl
from trajlake.proxy import (
    CallInput,
    RecordedCall,
    RolloutMeta,
    parse_request,
    parse_response,
    reconstruct,
)
from trajlake.records import rows_for_table
from trajlake.schema import Call, CanonicalTrajectory

DIALECTS = ["chat", "responses", "anthropic"]
ENDPOINT = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
}
T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)

# Abstract turns, rendered into each dialect: (role, text, calls) or ("tool", call_id, text).
S = ("system", "You are an agent.", [])
U = ("user", "Read a.txt", [])
A1 = ("assistant", "I will list files.", [("c1", "bash", {"cmd": "ls"})])
T1 = ("tool", "c1", "a.txt")
A2 = ("assistant", None, [("c2", "bash", {"cmd": "cat a.txt"})])
T2 = ("tool", "c2", "hello")
A3 = ("assistant", "Done: hello", [])
SUMMARY = ("user", "Summary so far: a.txt says hello. Finish up.", [])
U4 = ("user", "Thanks.", [])
A4 = ("assistant", "Bye.", [])


def _chat_message(turn: tuple[Any, ...]) -> dict[str, Any]:
    if turn[0] == "tool":
        return {"role": "tool", "tool_call_id": turn[1], "content": turn[2]}
    role, text, calls = turn
    out: dict[str, Any] = {"role": role, "content": text}
    if calls:
        out["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    return out


def _responses_items(turn: tuple[Any, ...]) -> list[dict[str, Any]]:
    if turn[0] == "tool":
        return [{"type": "function_call_output", "call_id": turn[1], "output": turn[2]}]
    role, text, calls = turn
    items: list[dict[str, Any]] = []
    if text is not None and role == "assistant":
        content = [{"type": "output_text", "text": text, "annotations": []}]
        items.append(
            {"type": "message", "id": f"msg_{text[:3]}", "role": role, "status": "completed"}
            | {"content": content}
        )
    elif text is not None:
        items.append({"type": "message", "role": role, "content": text})
    for i, n, a in calls:
        items.append(
            {"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": n}
            | {"arguments": json.dumps(a), "status": "completed"}
        )
    return items


def _anthropic_blocks(turn: tuple[Any, ...]) -> list[dict[str, Any]]:
    if turn[0] == "tool":
        return [{"type": "tool_result", "tool_use_id": turn[1], "content": turn[2]}]
    _, text, calls = turn
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return blocks


def _consume(value: Any) -> None:
    """Read every nested iterable: the SDK param types validate them lazily."""
    if isinstance(value, dict):
        for v in value.values():
            _consume(v)
    elif not isinstance(value, (str, bytes, int, float, bool)) and value is not None:
        for v in value:
            _consume(v)


def _valid(kind: Any, value: Any) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(kind)  # alive while its lazy iterators are read
    _consume(adapter.validate_python(value))


def request(dialect: str, history: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The request body a harness of `dialect` sends for `history` (checked by the SDK types)."""
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    system, rest = history[0][1], history[1:]
    if dialect == "chat":
        messages = [_chat_message(t) for t in history]
        _valid(list[ChatCompletionMessageParam], messages)
        return {"model": "m", "messages": messages, "tools": tools, "stream": False}
    if dialect == "responses":
        items = [item for t in rest for item in _responses_items(t)]
        _valid(ResponseInputParam, items)
        return {"model": "m", "instructions": system, "input": items, "tools": tools}
    messages: list[dict[str, Any]] = []
    for t in rest:
        role = "assistant" if t[0] == "assistant" else "user"
        blocks = _anthropic_blocks(t) if t[0] != "user" else [{"type": "text", "text": t[1]}]
        if messages and messages[-1]["role"] == role == "user":
            messages[-1]["content"] += blocks  # tool results of one turn share a user message
        else:
            messages.append({"role": role, "content": blocks})
    _valid(list[MessageParam], messages)
    body = {"model": "m", "system": system, "messages": messages, "max_tokens": 100}
    return body | {"tools": [{"name": "bash", "input_schema": {"type": "object"}}]}


def response(dialect: str, turn: tuple[Any, ...], n: int) -> dict[str, Any]:
    if dialect == "chat":
        calls = bool(turn[2])
        body = {
            "id": f"r{n}",
            "object": "chat.completion",
            "created": 1,
            "model": "m-1",
            "choices": [
                {"index": 0, "message": _chat_message(turn)}
                | {"finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {"prompt_tokens": 10 * n, "completion_tokens": n, "total_tokens": 11 * n},
        }
        ChatCompletion.model_validate(body)
        return body
    if dialect == "responses":
        usage = {"input_tokens": 10 * n, "output_tokens": n, "total_tokens": 11 * n}
        usage |= {"input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}}
        usage |= {"output_tokens_details": {"reasoning_tokens": 0}}
        body = {"id": f"r{n}", "object": "response", "created_at": 1.0, "model": "m-1"}
        body |= {"status": "completed", "parallel_tool_calls": True, "tool_choice": "auto"}
        body |= {"tools": [], "output": _responses_items(turn), "usage": usage}
        Response.model_validate(body)
        return body
    body = {
        "id": f"r{n}",
        "type": "message",
        "role": "assistant",
        "model": "m-1",
        "content": _anthropic_blocks(turn),
        "stop_reason": "tool_use" if turn[2] else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10 * n, "output_tokens": n},
    }
    AnthropicMessage.model_validate(body)
    return body


def recorded(
    dialect: Any, seq: int, history: list[tuple[Any, ...]], turn: tuple[Any, ...] | None
) -> RecordedCall:
    """A call of `history` answered by `turn`, or failed with a 500 when `turn` is None."""
    body = response(dialect, turn, seq + 1) if turn is not None else {"error": {"message": "busy"}}
    return RecordedCall(
        call_id=f"call-{seq}",
        rollout_id="r-1",
        seq=seq,
        dialect=dialect,
        endpoint=ENDPOINT[dialect],
        input=parse_request(dialect, request(dialect, history)),
        output=parse_response(dialect, body) if turn is not None else None,
        response=body,
        stream=False,
        status_code=200 if turn is not None else 500,
        error=None if turn is not None else "upstream answered 500",
        started_at=T0 + dt.timedelta(seconds=10 * seq),
        latency_ms=250.0,
    )


def view(trajectory: CanonicalTrajectory, thread: str = "main") -> list[tuple[Any, ...]]:
    """Messages of a thread as abstract turns."""
    out: list[tuple[Any, ...]] = []
    for m in trajectory.messages:
        if m.thread != thread:
            continue
        if m.role == "tool":
            out.append(("tool", m.tool_call_id, m.content))
            continue
        calls = [(c.id, c.name, json.loads(c.arguments or "null")) for c in m.tool_calls or ()]
        out.append((m.role, m.content, calls))
    return out


def three_calls(dialect: Any) -> list[RecordedCall]:
    return [
        recorded(dialect, 0, [S, U], A1),
        recorded(dialect, 1, [S, U, A1, T1], A2),
        recorded(dialect, 2, [S, U, A1, T1, A2, T2], A3),
    ]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_three_call_tool_rollout_is_one_thread(dialect: Any) -> None:
    calls = three_calls(dialect)
    traj, rows = reconstruct(RolloutMeta("r-1", task_id="task-1"), calls[::-1])
    assert view(traj) == [S, U, A1, T1, A2, T2, A3]
    assert {m.thread for m in traj.messages} == {"main"}
    assert [m.idx for m in traj.messages] == list(range(7))
    assert not any(m.is_copied_context for m in traj.messages)
    assistants = [m for m in traj.messages if m.role == "assistant"]
    assert [m.attrs and m.attrs["call_id"] for m in assistants] == ["call-0", "call-1", "call-2"]
    assert [m.prompt_tokens for m in assistants] == [10, 20, 30]
    assert all(m.model == "m-1" for m in assistants)
    assert assistants[-1].timestamp == T0 + dt.timedelta(seconds=20, milliseconds=250)
    assert (traj.trajectory_id, traj.task_id, traj.harness) == ("r-1", "task-1", "trajlake-proxy")
    assert (traj.source_format, traj.policy_model, traj.n_turns) == ("proxy", "m-1", 3)
    assert (traj.prompt_tokens, traj.completion_tokens, traj.total_tokens) == (60, 6, 66)
    assert traj.started_at == T0 and traj.tools is not None
    assert traj.attrs is not None and traj.attrs["proxy"]["threads"] == 1
    assert traj.attrs["proxy"]["history_rewritten"] is False
    CanonicalTrajectory.model_validate(traj.model_dump())
    records = [Call.model_validate(r) for r in rows]
    assert [r.seq for r in records] == [0, 1, 2]
    assert [r.history_prefix for r in records] == [0, 3, 5]
    assert [len(r.new_input or []) for r in records] == [2, 1, 1]
    assert {r.thread for r in records} == {"main"} and {r.dialect for r in records} == {dialect}
    assert records[0].request_params is not None and records[0].request_params["model"] == "m"
    assert records[2].response == calls[2].response and records[2].completion_tokens == 3


@pytest.mark.parametrize("dialect", DIALECTS)
def test_rewritten_history_starts_thread_t1_with_copied_context(dialect: Any) -> None:
    calls = three_calls(dialect)[:2]
    calls.append(recorded(dialect, 2, [S, SUMMARY], A3))  # compaction: not an extension
    calls.append(recorded(dialect, 3, [S, SUMMARY, A3, U4], A4))
    traj, rows = reconstruct(RolloutMeta("r-1"), calls)
    assert view(traj) == [S, U, A1, T1, A2]
    assert view(traj, "t1") == [S, SUMMARY, A3, U4, A4]
    copied = [m.is_copied_context for m in traj.messages if m.thread == "t1"]
    assert copied == [True, False, False, False, False]
    assert traj.attrs is not None
    assert traj.attrs["proxy"]["threads"] == 2 and traj.attrs["proxy"]["history_rewritten"]
    assert traj.attrs["proxy"]["thread_starts"][1] == {
        "thread": "t1",
        "seq": 2,
        "copied_messages": 1,
    }
    assert [(r["thread"], r["history_prefix"]) for r in rows] == [
        ("main", 0),
        ("main", 3),
        ("t1", 0),
        ("t1", 3),
    ]
    assert traj.n_turns == 2  # main thread only; all assistant messages count for tool calls
    assert traj.n_messages == 10


@pytest.mark.parametrize("dialect", DIALECTS)
def test_failed_call_adds_no_messages_but_a_calls_row(dialect: Any) -> None:
    calls = three_calls(dialect)
    failed = recorded(dialect, 1, [S, U, A1, T1], None)
    retried = [calls[0], failed] + [
        RecordedCall(**{**c.__dict__, "seq": c.seq + 1, "call_id": f"call-{c.seq + 1}"})
        for c in calls[1:]
    ]
    traj, rows = reconstruct(RolloutMeta("r-1", status="error"), retried)
    assert view(traj) == [S, U, A1, T1, A2, T2, A3]
    bad = Call.model_validate(rows[1])
    assert (bad.status_code, bad.error, bad.response) == (
        500,
        "upstream answered 500",
        failed.response,
    )
    assert (bad.thread, bad.history_prefix, bad.prompt_tokens) == ("main", 3, None)
    assert [r["history_prefix"] for r in rows] == [0, 3, 3, 5]
    assert traj.attrs is not None and traj.attrs["proxy"]["failed_calls"] == 1
    assert traj.status == "error"


def test_unparsed_request_is_kept_as_a_row_only() -> None:
    call = RecordedCall(
        call_id="x",
        rollout_id="r-1",
        seq=0,
        dialect="chat",
        endpoint="/v1/chat/completions",
        input=None,
        output=None,
        response=None,
        stream=True,
        status_code=None,
        error="client disconnected",
        started_at=T0,
        latency_ms=None,
    )
    traj, rows = reconstruct(RolloutMeta("r-1"), [call])
    assert traj.messages == [] and traj.ended_at == T0
    assert Call.model_validate(rows[0]).error == "client disconnected"


def test_outcome_status_and_meta() -> None:
    outcome = {"resolved": "pass", "reward": 1, "rewards": {"tests": 0.5}, "details": {"log": "ok"}}
    meta = RolloutMeta("r-9", "task", 3, "run-1", "codex", outcome, "aborted")
    traj, _ = reconstruct(meta, three_calls("chat"))
    assert (traj.resolved, traj.reward, traj.rewards) == (True, 1.0, {"tests": 0.5})
    assert (traj.outcome_source, traj.status, traj.exit_reason) == ("proxy", "error", "aborted")
    assert (traj.generation, traj.run_id, traj.harness) == (3, "run-1", "codex")
    assert traj.attrs is not None and traj.attrs["proxy"]["outcome_details"] == {"log": "ok"}
    plain, _ = reconstruct(RolloutMeta("r-8"), three_calls("chat"))
    assert (plain.resolved, plain.outcome_source, plain.status) == (None, None, None)


def test_input_dataclass_is_what_parse_request_returns() -> None:
    parsed = parse_request("chat", request("chat", [S, U]))
    assert isinstance(parsed, CallInput) and parsed.messages[0]["role"] == "system"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reconstructed_rollout_is_written_and_read_back(dialect: Any, tmp_path: Path) -> None:
    calls = [*three_calls(dialect)[:2], recorded(dialect, 2, [S, SUMMARY], A3)]
    meta = RolloutMeta("r-1", task_id="t", outcome={"resolved": True}, status="completed")
    traj, rows = reconstruct(meta, calls)
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write([traj])
    lake.commit({"calls": rows_for_table("calls", rows)}, operation="proxy")
    threads = lake.sql(
        "SELECT thread, count(*), sum(CAST(is_copied_context AS INT)) FROM messages "
        "GROUP BY thread ORDER BY thread"
    ).rows()
    assert threads == [("main", 5, 0), ("t1", 3, 1)]
    (row,) = lake.sql(
        "SELECT resolved, outcome_source, json_extract_string(attrs, '$.proxy.history_rewritten') "
        "FROM trajectories"
    ).rows()
    assert row == (True, "proxy", "true")
    stored = lake.sql(
        "SELECT seq, thread, history_prefix, dialect, json_extract_string(response, '$.id') "
        "FROM calls ORDER BY seq"
    ).rows()
    assert stored == [
        (0, "main", 0, dialect, "r1"),
        (1, "main", 3, dialect, "r2"),
        (2, "t1", 0, dialect, "r3"),
    ]
    joined = lake.sql(
        "SELECT count(*) FROM messages m JOIN calls c "
        "ON json_extract_string(m.attrs, '$.call_id') = c.call_id WHERE m.role = 'assistant'"
    ).rows()
    assert joined == [(3,)]


def test_responses_chained_by_previous_response_id_extend_one_thread() -> None:
    """Codex-style calls send only new items with `previous_response_id` (and re-send the
    instructions): the rollout is still one thread with every message once."""
    full = three_calls("responses")
    calls = [full[0]]
    for seq, (new_items, previous) in enumerate([([T1], "r1"), ([T2], "r2")], start=1):
        body = request("responses", [S, *new_items]) | {"previous_response_id": previous}
        parsed = parse_request("responses", body)
        calls.append(
            RecordedCall(**{**full[seq].__dict__, "input": parsed})  # same answer, short input
        )
    traj, rows = reconstruct(RolloutMeta("r-1"), calls)
    assert view(traj) == [S, U, A1, T1, A2, T2, A3]
    assert {m.thread for m in traj.messages} == {"main"}
    assert traj.attrs is not None and traj.attrs["proxy"]["history_rewritten"] is False
    records = [Call.model_validate(r) for r in rows]
    assert [r.history_prefix for r in records] == [0, 3, 5]
    assert [len(r.new_input or []) for r in records] == [2, 1, 1]
