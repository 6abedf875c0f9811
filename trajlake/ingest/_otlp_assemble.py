"""GenAI spans → trajectories: one per conversation (or trace), calls rows per chat span.

Every chat span repeats the history it was sent. Its input is laid out in threads exactly as the
recording proxy lays out a call's (`trajlake.wire.threads`: same role, text, tool calls and call
id in order): a span whose input starts with a thread extends it by the new input and its output,
any other starts a thread of its own ("t1", …), its copied history flagged. Tool spans then add
the results the history lacks (matched by call id, else by tool name), agent spans name the
harness. Usage, models and times come from the spans.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajlake.ingest._adapter import stable_id
from trajlake.ingest._otlp_conventions import GenAISpan
from trajlake.wire.threads import Placement, Threads
from trajlake.wire.values import drop_none

FORMAT = "otlp"


@dataclass
class Group:
    """The spans of one trajectory: a conversation across traces, or one trace."""

    key: str
    spans: list[GenAISpan] = field(default_factory=list)

    @property
    def trajectory_id(self) -> str:
        return stable_id(FORMAT, self.key)


def group_spans(spans: Iterable[GenAISpan]) -> list[Group]:
    """Spans grouped by conversation id (any span of a trace naming one claims the trace), else
    by trace; groups without a chat, tool or agent span are left out."""
    by_trace: dict[str, list[GenAISpan]] = {}
    for s in spans:
        by_trace.setdefault(s.span.trace_id, []).append(s)
    groups: dict[str, Group] = {}
    for trace_id, members in by_trace.items():
        conversation = next((s.conversation_id for s in members if s.conversation_id), None)
        key = f"conversation\x1f{conversation}" if conversation else f"trace\x1f{trace_id}"
        groups.setdefault(key, Group(key)).spans.extend(members)
    return [g for g in groups.values() if any(s.kind != "other" for s in g.spans)]


def _time(ns: int | None) -> dt.datetime | None:
    return None if ns is None else dt.datetime.fromtimestamp(ns / 1e9, dt.UTC)


def _place(threads: Threads, info: GenAISpan) -> Placement:
    """Lay the span's new input and its output into `threads` (usage on the last output)."""
    return threads.place(
        info.input or [],
        info.output or [],
        input_fields={"timestamp": _time(info.span.start_ns)},
        output_fields={"timestamp": _time(info.span.end_ns), "model": info.response_model},
        last_output_fields={
            "prompt_tokens": info.input_tokens,
            "completion_tokens": info.output_tokens,
            "cached_tokens": info.cached_tokens,
            "reasoning_tokens": info.reasoning_tokens,
        },
        call_id=call_id_of(info),
    )


def _matched_call(
    messages: list[dict[str, Any]], main: list[int], info: GenAISpan, used: set[str]
) -> tuple[int, str] | None:
    """The main-thread assistant call a tool span ran: by call id, else the first call of that
    tool not matched to a span yet; (message index, call id)."""
    for i in main:
        for call in messages[i].get("tool_calls") or ():
            call_id = call.get("id")
            if info.tool_call_id is not None:
                if call_id == info.tool_call_id:
                    return i, call_id
            elif call.get("name") == info.tool_name and call_id not in used:
                return i, call_id
    return None


def _add_tool_span(messages: list[dict[str, Any]], info: GenAISpan, used: set[str]) -> bool:
    """Add what a tool span says that the main thread lacks; True when it added messages."""
    main = [i for i, m in enumerate(messages) if m["thread"] == "main"]
    answered = {messages[i].get("tool_call_id"): i for i in main if messages[i]["role"] == "tool"}
    matched = _matched_call(messages, main, info, used)
    call_id = matched[1] if matched is not None else info.tool_call_id
    if call_id is not None:
        used.add(call_id)
    if call_id is not None and call_id in answered:
        if info.span.is_error:
            messages[answered[call_id]]["is_error"] = True
        return False
    started, ended = _time(info.span.start_ns), _time(info.span.end_ns)
    result = drop_none(
        {
            "role": "tool",
            "name": info.tool_name,
            "content": info.tool_result,
            "is_error": True if info.span.is_error else None,
            "timestamp": ended,
            "thread": "main",
            "attrs": {"tool_span_id": info.span.span_id},
        }
    )
    if matched is not None:  # the call is in the history, its result is not: after it
        result["tool_call_id"] = call_id
        at = matched[0] + 1
        while at < len(messages) and messages[at]["role"] == "tool":
            at += 1
        messages.insert(at, result)
        return True
    # Neither the call nor its result is in the history: both, at the span's time.
    made_id = call_id or f"otlp-{info.span.span_id}"
    call = {"id": made_id, "name": info.tool_name or "tool", "arguments": info.tool_arguments}
    asked = {"role": "assistant", "content": None, "tool_calls": [call], "timestamp": started}
    at = len(messages)
    if started is not None:
        at = next(
            (i for i, m in enumerate(messages) if m.get("timestamp") and m["timestamp"] > started),
            len(messages),
        )
    messages[at:at] = [{**drop_none(asked), "thread": "main"}, {**result, "tool_call_id": made_id}]
    return True


def _call_row(
    trajectory_id: str, info: GenAISpan, seq: int, thread: str | None, prefix: int | None
) -> dict[str, Any]:
    span = info.span
    start, end = span.start_ns, span.end_ns
    new_input = (info.input or [])[prefix or 0 :] if info.input is not None else None
    response = drop_none(
        {"id": info.response_id, "model": info.response_model, "messages": info.output}
    )
    attrs = {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_id,
        "span_name": span.name,
        "convention": info.convention,
        "provider": info.provider,
        "response_model": info.response_model,
        "response_id": info.response_id,
        "finish_reasons": info.finish_reasons,
        "cached_tokens": info.cached_tokens,
        "reasoning_tokens": info.reasoning_tokens,
    }
    return {
        "call_id": call_id_of(info),
        "trajectory_id": trajectory_id,
        "thread": thread,
        "seq": seq,
        "dialect": "chat",
        "endpoint": span.name or None,
        "model": info.request_model,
        "request_params": info.request_params,
        "history_prefix": prefix,
        "new_input": new_input,
        "response": response or None,
        "error": (span.status_message or "error") if span.is_error else None,
        "started_at": _time(start),
        "latency_ms": (end - start) / 1e6 if start is not None and end is not None else None,
        "prompt_tokens": info.input_tokens,
        "completion_tokens": info.output_tokens,
        "attrs": drop_none(attrs) or None,
    }


def call_id_of(info: GenAISpan) -> str:
    """The `calls` id of a chat span: its trace and span ids (unique, the same on re-ingest)."""
    return f"otlp-{info.span.trace_id}-{info.span.span_id}"


def _sum(values: Sequence[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _start(info: GenAISpan) -> tuple[int, int]:
    return (info.span.start_ns or 0, info.span.end_ns or 0)


def assemble(group: Group) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The trajectory dict (messages included) and the `calls` rows of one group."""
    spans = sorted(group.spans, key=_start)
    trajectory_id = group.trajectory_id
    chats = [s for s in spans if s.kind == "chat"]
    tools = [s for s in spans if s.kind == "tool"]
    agents = [s for s in spans if s.kind == "agent"]
    threads = Threads()
    calls = []
    for seq, info in enumerate(chats):
        thread: str | None = None
        prefix: int | None = None
        if info.output and not info.span.is_error:
            placed = _place(threads, info)
            thread, prefix = placed.thread, placed.prefix
        calls.append(_call_row(trajectory_id, info, seq, thread, prefix))
    messages = threads.messages
    used: set[str] = set()
    added_tools = sum(_add_tool_span(messages, t, used) for t in tools)
    return _trajectory(group, spans, chats, tools, agents, threads, added_tools), calls


def _trajectory(
    group: Group,
    spans: list[GenAISpan],
    chats: list[GenAISpan],
    tools: list[GenAISpan],
    agents: list[GenAISpan],
    threads: Threads,
    added_tools: int,
) -> dict[str, Any]:
    models = Counter(s.response_model for s in chats if s.response_model)
    prompt = _sum([s.input_tokens for s in chats])
    completion = _sum([s.output_tokens for s in chats])
    roots = [s for s in spans if s.span.parent_id is None]
    failed = any(s.span.is_error for s in roots + agents)
    resource = spans[0].span.resource
    agent_names = list(dict.fromkeys(a.agent_name for a in agents if a.agent_name))
    service = resource.get("service.name")
    conversation = next((s.conversation_id for s in spans if s.conversation_id), None)
    otlp = {
        "trace_ids": sorted({s.span.trace_id for s in spans}),
        "conversation_id": conversation,
        "service_name": service,
        "agents": agent_names or None,
        "conventions": sorted({s.convention for s in chats + tools if s.convention}),
        "spans": len(spans),
        "chat_spans": len(chats),
        "tool_spans": len(tools),
        "tool_results_from_spans": added_tools or None,
        "agent_spans": len(agents),
        "other_spans": sum(1 for s in spans if s.kind == "other") or None,
        "threads": len(threads.keys) or None,
        "providers": sorted({s.provider for s in chats if s.provider}) or None,
    }
    ends = [s.span.end_ns for s in spans if s.span.end_ns]
    starts = [s.span.start_ns for s in spans if s.span.start_ns]
    tool_defs = next((s.tools for s in chats if s.tools), None)
    return drop_none(
        {
            "trajectory_id": group.trajectory_id,
            "harness": agent_names[0] if agent_names else service,
            "policy_model": models.most_common(1)[0][0] if models else None,
            "started_at": _time(min(starts)) if starts else None,
            "ended_at": _time(max(ends)) if ends else None,
            "status": "error" if failed else "completed",
            "exit_reason": next((s.span.status_message for s in roots if s.span.is_error), None),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": None if prompt is None else prompt + (completion or 0),
            "cached_tokens": _sum([s.cached_tokens for s in chats]),
            "reasoning_tokens": _sum([s.reasoning_tokens for s in chats]),
            "tools": tool_defs,
            "attrs": {"otlp": drop_none(otlp)},
            "messages": threads.messages,
        }
    )
