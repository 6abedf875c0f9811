"""τ²-bench messages: the half-duplex message list and full-duplex ticks as canonical messages.

τ²-bench tool calls are `{id, name, arguments: <object>, requestor}`; tool results are
`{role: "tool", id, content, error, requestor}`, possibly grouped in a `MultiToolMessage`
(`tool_messages`). Audio content (base64, `is_audio`) is kept by hash, never inline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trajlake.wire.chat import name_tool_results
from trajlake.wire.parts import base64_part
from trajlake.wire.values import as_int, as_number, drop_none, json_text, mapping, parse_time

_PARTIES = (("agent", "assistant"), ("user", "user"))
"""Tick key prefix → role: `agent_chunk`, `agent_tool_calls`, `agent_tool_results`, …"""


def _tool_call(call: Any) -> dict[str, Any]:
    call = mapping(call)
    return drop_none(
        {
            "id": call.get("id") or None,  # τ²-bench defaults the id to ""
            "name": call.get("name"),
            "arguments": json_text(call.get("arguments")),
            "type": "function",
        }
    )


def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    prompt_details = mapping(usage.get("prompt_tokens_details"))
    completion_details = mapping(usage.get("completion_tokens_details"))
    return {
        "prompt_tokens": as_int(usage.get("prompt_tokens")),
        "completion_tokens": as_int(usage.get("completion_tokens")),
        "cached_tokens": as_int(prompt_details.get("cached_tokens")),
        "reasoning_tokens": as_int(completion_details.get("reasoning_tokens")),
    }


def _content(message: Mapping[str, Any]) -> dict[str, Any]:
    """Text content, or an audio part by hash when the content is base64 audio."""
    content = message.get("content")
    parts = []
    if message.get("is_audio") and isinstance(content, str) and content:
        parts.append(base64_part("audio", content, None))
        content = None
    if isinstance(message.get("audio_path"), str):
        parts.append({"type": "audio", "uri": message["audio_path"]})
    return {"content": content if isinstance(content, str) else None, "parts": parts or None}


def _tool_result(message: Mapping[str, Any]) -> dict[str, Any]:
    error = message.get("error")
    attrs = {"requestor": message.get("requestor"), "turn_idx": message.get("turn_idx")}
    return drop_none(
        {
            "role": "tool",
            "content": message.get("content"),
            "tool_call_id": message.get("id") or None,
            "is_error": error if isinstance(error, bool) else None,
            "timestamp": parse_time(message.get("timestamp")),
            "attrs": drop_none(attrs) or None,
        }
    )


def _message(message: Any) -> list[dict[str, Any]]:
    """One τ²-bench message as canonical message dicts (a MultiToolMessage gives several)."""
    if not isinstance(message, Mapping):
        return [{"role": None, "attrs": {"value": message}}]
    role = message.get("role")
    if role == "tool" and isinstance(message.get("tool_messages"), list):
        return [_tool_result(mapping(m)) for m in message["tool_messages"]]
    if role == "tool":
        return [_tool_result(message)]
    calls = [_tool_call(c) for c in message.get("tool_calls") or ()]
    attrs = {
        "turn_idx": message.get("turn_idx"),
        "cost": as_number(message.get("cost")),
        "generation_time_seconds": message.get("generation_time_seconds"),
    }
    return [
        drop_none(
            {
                "role": role,
                **_content(message),
                "tool_calls": calls or None,
                "timestamp": parse_time(message.get("timestamp")),
                **_usage(mapping(message.get("usage"))),
                "attrs": drop_none(attrs) or None,
            }
        )
    ]


def messages_from_list(messages: list[Any]) -> list[dict[str, Any]]:
    """The `messages` of a simulation, in order, tool results named after their calls."""
    out = [m for message in messages for m in _message(message)]
    name_tool_results(out)
    return out


@dataclass
class _Utterance:
    """Consecutive speaking ticks of one party."""

    role: str
    first_tick: int
    timestamp: Any
    last_tick: int = 0
    n_ticks: int = 0
    texts: list[str] = field(default_factory=list)
    inserts: list[str] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        attrs = {
            "tick_start": self.first_tick,
            "tick_end": self.last_tick,
            "n_ticks": self.n_ticks,
            "speech_inserts": self.inserts or None,
        }
        return drop_none(
            {
                "role": self.role,
                # The transcript, when the run kept it; None when it was stripped (not "").
                "content": "".join(self.texts) if self.texts else None,
                "timestamp": parse_time(self.timestamp),
                "attrs": drop_none(attrs),
            }
        )


def _speaks(chunk: Mapping[str, Any]) -> bool:
    text = chunk.get("content")
    return bool(chunk.get("contains_speech")) or (isinstance(text, str) and bool(text.strip()))


def _inserts(chunk: Mapping[str, Any]) -> list[str]:
    """Vocal tics and off-mic phrases the simulator inserted into this chunk's audio."""
    found = []
    for key in ("speech_effects", "source_effects"):
        insert = mapping(mapping(chunk.get(key)).get("speech_insert"))
        if isinstance(insert.get("text"), str):
            found.append(insert["text"])
    return found


def _extend(open_: _Utterance, chunk: Mapping[str, Any], tick_id: int) -> None:
    text = chunk.get("content")
    if isinstance(text, str) and text and not chunk.get("is_audio"):
        open_.texts.append(text)
    for insert in _inserts(chunk):
        # An insert lasts several ticks and is repeated on each: keep it once per occurrence.
        if not open_.inserts or open_.inserts[-1] != insert:
            open_.inserts.append(insert)
    open_.last_tick = tick_id
    open_.n_ticks += 1


def _rank(party: str, kind: int) -> int:
    """Order within one tick: agent speech, calls, results, then the user's."""
    return (0 if party == "agent" else 3) + kind


def messages_from_ticks(ticks: list[Any]) -> list[dict[str, Any]]:
    """Full-duplex ticks folded into utterances and tool messages, ordered by start tick."""
    # (start tick, rank, message): within a tick the agent's speech, calls and results come
    # before the user's, whatever order the utterances ended in.
    events: list[tuple[int, int, dict[str, Any]]] = []
    open_: dict[str, _Utterance | None] = {"agent": None, "user": None}

    def close(party: str) -> None:
        utterance = open_[party]
        if utterance is not None:
            events.append((utterance.first_tick, _rank(party, 0), utterance.message()))
            open_[party] = None

    for position, raw in enumerate(ticks):
        tick = mapping(raw)
        tick_id = as_int(tick.get("tick_id"))
        tick_id = position if tick_id is None else tick_id
        for party, role in _PARTIES:
            chunk = mapping(tick.get(f"{party}_chunk"))
            if chunk and _speaks(chunk):
                if open_[party] is None:
                    stamp = chunk.get("timestamp") or tick.get("timestamp")
                    open_[party] = _Utterance(role, tick_id, stamp)
                utterance = open_[party]
                assert utterance is not None
                _extend(utterance, chunk, tick_id)
            else:
                close(party)
            calls = [_tool_call(c) for c in tick.get(f"{party}_tool_calls") or ()]
            if calls:
                stamp = parse_time(tick.get("timestamp"))
                call_message = {"role": role, "tool_calls": calls, "timestamp": stamp}
                events.append((tick_id, _rank(party, 1), drop_none(call_message)))
            for result in tick.get(f"{party}_tool_results") or ():
                events.append((tick_id, _rank(party, 2), _tool_result(mapping(result))))
    for party in open_:
        close(party)
    messages = [m for _, _, m in sorted(events, key=lambda e: (e[0], e[1]))]  # stable sort
    name_tool_results(messages)
    return messages
