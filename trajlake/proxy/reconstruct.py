"""A rollout's recorded calls → one canonical trajectory (messages in threads) and `calls` rows.

A call extends a thread when its input starts with that thread's messages so far; otherwise
(compaction, a rewritten history, a subagent) it starts a new thread, its copied context flagged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from trajlake.proxy.dialects import CallInput, CallOutput, Dialect
from trajlake.records import normalize
from trajlake.schema import Call, CanonicalTrajectory, Status
from trajlake.wire.threads import Placement, Threads, message_key
from trajlake.wire.values import as_bool, as_number, drop_none, map_status

__all__ = ["HARNESS", "SOURCE_FORMAT", "RecordedCall", "RolloutMeta", "reconstruct"]

HARNESS = "trajlake-proxy"
"""Harness name of a reconstructed rollout whose harness was not told."""
SOURCE_FORMAT = "proxy"
"""`source_format` of trajectories the proxy recorded."""

_STATUSES: frozenset[str] = frozenset(get_args(Status))


@dataclass(frozen=True)
class RecordedCall:
    """One model call as the proxy saw it.

    Attributes:
        call_id: Unique call id.
        rollout_id: Rollout the call belongs to.
        seq: Order of the call within the rollout.
        dialect: Wire dialect.
        endpoint: Path called, e.g. `/v1/chat/completions`.
        input: The parsed request (None when it could not be parsed).
        output: The parsed response (None when the call failed).
        response: The response body as stored (a stream reassembled), or None.
        stream: The call was streamed.
        status_code: HTTP status of the upstream response.
        error: Error text of a failed call.
        started_at: Request time (UTC).
        latency_ms: Time to the complete response.
    """

    call_id: str
    rollout_id: str
    seq: int
    dialect: Dialect
    endpoint: str
    input: CallInput | None
    output: CallOutput | None
    response: Any
    stream: bool
    status_code: int | None
    error: str | None
    started_at: dt.datetime
    latency_ms: float | None


@dataclass
class RolloutMeta:
    """What is known of a rollout besides its calls.

    Attributes:
        rollout_id: The trajectory id.
        task_id: Task / instance id.
        generation: Agent generation that produced it.
        run_id: Run / experiment id.
        harness: Harness name (default `trajlake-proxy`).
        outcome: `{"resolved"?, "reward"?, "rewards"?, "details"?}` as posted.
        status: completed / truncated / error / timeout, or `aborted` (stored as error).
        exit_reason: Stored as `exit_reason` (default: the status as given).
        closed: Why the proxy finished the rollout itself, if it did (`attrs.proxy.closed`).
    """

    rollout_id: str
    task_id: str | None = None
    generation: int | None = None
    run_id: str | None = None
    harness: str | None = None
    outcome: dict[str, Any] | None = None
    status: str | None = None
    exit_reason: str | None = None
    closed: str | None = None


@dataclass
class _RolloutThreads(Threads):
    """The rollout's threads, and where each began (`attrs.proxy.thread_starts`)."""

    starts: list[dict[str, Any]] = field(default_factory=list)


def _place(
    threads: _RolloutThreads, call: RecordedCall, inp: CallInput, out: CallOutput
) -> Placement:
    """Lay the call's new input and its output into `threads`, noting a thread it opens."""
    placed = threads.place(
        inp.messages,
        out.messages,
        input_fields={"timestamp": call.started_at},
        output_fields=_produced(call, out) | {"timestamp": _ended(call)},
        last_output_fields=_usage(out),
        call_id=call.call_id,
    )
    if placed.opened:
        start = {"thread": placed.thread, "seq": call.seq, "copied_messages": placed.copied}
        threads.starts.append(start)
    return placed


def reconstruct(
    meta: RolloutMeta, calls: Sequence[RecordedCall]
) -> tuple[CanonicalTrajectory, list[dict[str, Any]]]:
    """Rebuild a rollout from its calls: the trajectory with its messages, and `calls` rows.

    Calls are taken in `seq` order. A call whose input starts with a thread's messages so far
    (compared on role, content, tool calls and tool_call_id) extends it by its new input and
    its output; any other call starts a thread ("main", then "t1", "t2", …) whose messages
    already seen in an earlier thread are `is_copied_context`. Failed calls (no output) add
    no messages but keep their row. Usage is summed over calls; the outcome's source is
    "proxy"; `attrs.proxy` records the threads and whether the history was rewritten.

    Args:
        meta: Rollout id, task, generation, run, harness, outcome and status.
        calls: The rollout's recorded calls, in any order.

    Returns:
        The canonical trajectory (normalised: turns, rollups, content hash) and one
        `schema.Call` row dict per call.
    """
    ordered = sorted(calls, key=lambda c: (c.seq, c.started_at))
    threads = _RolloutThreads()
    by_response: dict[str, list[dict[str, Any]]] = {}
    rows = []
    for call in ordered:
        thread: str | None = None
        prefix: int | None = None
        inp = _with_stored_history(call.input, by_response)
        new_input = inp.messages if inp is not None else None
        if inp is not None and call.output is not None:
            placed = _place(threads, call, inp, call.output)
            thread, prefix = placed.thread, placed.prefix
            if call.output.response_id:
                by_response[call.output.response_id] = [*inp.messages, *call.output.messages]
        elif inp is not None:  # failed: say what it would have extended, add nothing
            found = threads.match([message_key(m) for m in inp.messages])
            if found is not None:
                thread, prefix = found
        if new_input is not None and prefix is not None:
            new_input = new_input[prefix:]
        rows.append(_call_row(meta.rollout_id, call, thread, prefix, new_input))
    record = _trajectory(meta, ordered, threads)
    return normalize(CanonicalTrajectory.model_validate(record)), rows


def _with_stored_history(
    inp: CallInput | None, by_response: Mapping[str, list[dict[str, Any]]]
) -> CallInput | None:
    """A Responses call chained with `previous_response_id` sends only its new items: its real
    input is the earlier call's input and output, then those items. Re-sent `instructions`
    (a leading system message equal to the conversation's first) are not repeated."""
    previous = inp.params.get("previous_response_id") if inp is not None else None
    if inp is None or not isinstance(previous, str) or previous not in by_response:
        return inp
    history = by_response[previous]
    new = inp.messages
    same = message_key(new[0]) == message_key(history[0]) if new and history else False
    if same and new[0].get("role") == "system":
        new = new[1:]
    return dataclasses.replace(inp, messages=[*history, *new])


def _ended(call: RecordedCall) -> dt.datetime:
    if call.latency_ms is None:
        return call.started_at
    return call.started_at + dt.timedelta(milliseconds=call.latency_ms)


def _produced(call: RecordedCall, out: CallOutput) -> dict[str, Any]:
    """Fields of each output message of a call."""
    return {
        "model": out.model or (call.input.model if call.input else None),
        "finish_reason": out.finish_reason,
    }


def _usage(out: CallOutput) -> dict[str, Any]:
    """Fields of a call's last output message only: its usage and tokens, counted once."""
    return {
        "prompt_tokens": out.prompt_tokens,
        "completion_tokens": out.completion_tokens,
        "cached_tokens": out.cached_tokens,
        "reasoning_tokens": out.reasoning_tokens,
        "token_ids": out.token_ids,
        "logprobs": out.logprobs,
    }


def _call_row(
    rollout_id: str,
    call: RecordedCall,
    thread: str | None,
    prefix: int | None,
    new_input: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    inp, out = call.input, call.output
    attrs = {
        "rollout_id": call.rollout_id if call.rollout_id != rollout_id else None,
        "response_id": out.response_id if out else None,
        "response_model": out.model if out else None,
        "finish_reason": out.finish_reason if out else None,
        "cached_tokens": out.cached_tokens if out else None,
        "reasoning_tokens": out.reasoning_tokens if out else None,
    }
    row = {
        "call_id": call.call_id,
        "trajectory_id": rollout_id,
        "thread": thread,
        "seq": call.seq,
        "dialect": call.dialect,
        "endpoint": call.endpoint,
        "model": inp.model if inp else None,
        "request_params": inp.params if inp else None,
        "history_prefix": prefix,
        "new_input": new_input,
        "response": call.response,
        "stream": call.stream,
        "status_code": call.status_code,
        "error": call.error,
        "started_at": call.started_at,
        "latency_ms": call.latency_ms,
        "prompt_tokens": out.prompt_tokens if out else None,
        "completion_tokens": out.completion_tokens if out else None,
        "token_ids": out.token_ids if out else None,
        "logprobs": out.logprobs if out else None,
        "attrs": drop_none(attrs) or None,
    }
    return Call.model_validate(row).model_dump()


def _status(text: str | None) -> Status | None:
    if text is None:
        return None
    if text in _STATUSES:
        return text  # type: ignore[return-value]
    return "error" if text == "aborted" else map_status(text)


def _outcome(outcome: Mapping[str, Any] | None) -> dict[str, Any]:
    outcome = outcome or {}
    raw_rewards = outcome.get("rewards")
    rewards = {
        str(k): float(v)
        for k, v in (raw_rewards.items() if isinstance(raw_rewards, Mapping) else ())
        if as_number(v) is not None
    }
    fields: dict[str, Any] = {
        "resolved": as_bool(outcome.get("resolved")),
        "reward": as_number(outcome.get("reward")),
        "rewards": rewards or None,
    }
    if any(v is not None for v in fields.values()):
        fields["outcome_source"] = "proxy"
    return drop_none(fields)


def _sum(values: Sequence[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _trajectory(
    meta: RolloutMeta, calls: Sequence[RecordedCall], threads: _RolloutThreads
) -> dict[str, Any]:
    outputs = [c.output for c in calls if c.output is not None]
    models = Counter(o.model for o in outputs if o.model)
    requested = [c.input.model for c in calls if c.input is not None and c.input.model]
    tools = next((c.input.tools for c in calls if c.input is not None and c.input.tools), None)
    prompt = _sum([o.prompt_tokens for o in outputs])
    completion = _sum([o.completion_tokens for o in outputs])
    proxy = {
        "threads": len(threads.keys),
        "history_rewritten": len(threads.keys) > 1,
        "thread_starts": threads.starts,
        "calls": len(calls),
        "failed_calls": sum(1 for c in calls if c.output is None),
        "dialects": sorted({c.dialect for c in calls}),
        "outcome_details": (meta.outcome or {}).get("details"),
        "closed": meta.closed,
    }
    return {
        "trajectory_id": meta.rollout_id,
        "task_id": meta.task_id,
        "harness": meta.harness or HARNESS,
        "policy_model": models.most_common(1)[0][0] if models else next(iter(requested), None),
        "generation": meta.generation,
        "run_id": meta.run_id,
        "started_at": min((c.started_at for c in calls), default=None),
        "ended_at": max((_ended(c) for c in calls), default=None),
        "status": _status(meta.status),
        "exit_reason": meta.exit_reason or meta.status,
        **_outcome(meta.outcome),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": None if prompt is None else prompt + (completion or 0),
        "cached_tokens": _sum([o.cached_tokens for o in outputs]),
        "reasoning_tokens": _sum([o.reasoning_tokens for o in outputs]),
        "tools": tools,
        "source_format": SOURCE_FORMAT,
        "attrs": {"proxy": drop_none(proxy)},
        "messages": threads.messages,
    }
