"""Inspect AI sample pieces: attachments, messages, per-call usage, scores and status.

Score values map to numbers as C (correct) = 1.0, I (incorrect) = 0.0, P (partial) = 0.5 and
N (no answer) = 0.0, booleans to 1.0/0.0; dict values give one named reward per numeric key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from trajlake.wire.parts import content_fields
from trajlake.wire.values import as_number, drop_none, json_text, mapping, parse_time

ATTACHMENT = "attachment://"
LETTER_SCORES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
_BINARY_LETTERS = frozenset({"C", "I"})
_TIME_LIMITS = frozenset({"time", "working"})


def resolve(value: Any, attachments: Mapping[str, Any]) -> Any:
    """`value` with every `attachment://<hash>` string replaced by the attachment it names."""
    if isinstance(value, str):
        if value.startswith(ATTACHMENT):
            return attachments.get(value[len(ATTACHMENT) :], value)
        return value
    if isinstance(value, list):
        return [resolve(v, attachments) for v in value]
    if isinstance(value, Mapping):
        return {k: resolve(v, attachments) for k, v in value.items()}
    return value


def _tool_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        return {"name": None}
    return drop_none(
        {
            "id": call.get("id"),
            "name": call.get("function"),
            "arguments": json_text(call.get("arguments")),
            "type": call.get("type"),
        }
    )


def inspect_message(message: Any) -> dict[str, Any]:
    """One Inspect ChatMessage as a canonical message dict (no ids, no usage yet)."""
    if not isinstance(message, Mapping):
        return {"role": None, "attrs": {"value": message}}
    role = message.get("role")
    content, parts, reasoning = content_fields(message.get("content"))
    if isinstance(message.get("reasoning"), str):  # older logs kept it beside the content
        reasoning = message["reasoning"]
    error = message.get("error")
    calls = [_tool_call(c) for c in message.get("tool_calls") or ()]
    parse_errors = [
        c.get("parse_error") for c in message.get("tool_calls") or () if isinstance(c, Mapping)
    ]
    attrs = drop_none(
        {
            "id": message.get("id"),
            "source": message.get("source"),
            "error": error,
            "metadata": message.get("metadata") or None,
            "parse_errors": parse_errors if any(parse_errors) else None,
        }
    )
    return drop_none(
        {
            "role": role,
            "content": content,
            "parts": parts,
            "reasoning": reasoning,
            "tool_calls": calls or None,
            "tool_call_id": message.get("tool_call_id"),
            "name": message.get("function") if role == "tool" else None,
            "is_error": (error is not None) if role == "tool" else None,
            "model": message.get("model") if role == "assistant" else None,
            "attrs": attrs or None,
        }
    )


def _choice_message(event: Mapping[str, Any]) -> Mapping[str, Any]:
    output = mapping(event.get("output"))
    choices = output.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], Mapping) else {}
    message = first.get("message")
    return message if isinstance(message, Mapping) else {}


def _key(message: Mapping[str, Any]) -> str:
    """What a model call said (text and calls): matches a message to the event that made it."""
    text = content_fields(message.get("content"))[0] or ""
    calls = [
        (c.get("function"), json.dumps(c.get("arguments"), sort_keys=True))
        for c in message.get("tool_calls") or ()
        if isinstance(c, Mapping)
    ]
    return json.dumps([text.strip(), calls])


def _usage_fields(event: Mapping[str, Any]) -> dict[str, Any]:
    output = mapping(event.get("output"))
    usage = mapping(output.get("usage"))
    choices = output.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], Mapping) else {}
    return drop_none(
        {
            # Inspect's input_tokens is the provider's prompt count (with cache reads for
            # OpenAI, without them for Anthropic); cache reads are kept apart as cached_tokens.
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "reasoning_tokens": usage.get("reasoning_tokens"),
            "cached_tokens": usage.get("input_tokens_cache_read"),
            "finish_reason": first.get("stop_reason"),
            "model": output.get("model"),
            "timestamp": parse_time(event.get("completed") or event.get("timestamp")),
        }
    )


def _find(calls: list[Mapping[str, Any]], used: set[int], start: int, key: str) -> int | None:
    for i in range(start, len(calls)):
        if i not in used and _key(_choice_message(calls[i])) == key:
            return i
    return None


def attach_usage(
    originals: list[Any], messages: list[dict[str, Any]], events: Iterable[Any]
) -> int:
    """Put each model event's usage on the assistant message it produced; returns matches.

    Messages are matched by id (newer logs), else by what they say, in order. Model calls
    that produced no message of the conversation (scorers' grader calls) stay unmatched.
    """
    calls = [
        e
        for e in events
        if isinstance(e, Mapping) and e.get("event") == "model" and e.get("output")
    ]
    by_id = {_choice_message(e).get("id"): i for i, e in enumerate(calls)}
    by_id.pop(None, None)
    used: set[int] = set()
    position = 0
    for original, message in zip(originals, messages, strict=True):
        if message.get("role") != "assistant" or not isinstance(original, Mapping):
            continue
        index = by_id.get(original.get("id")) if original.get("id") else None
        if index is None:
            index = _find(calls, used, position, _key(original))
            if index is None:
                continue
            position = index + 1
        used.add(index)
        fields = _usage_fields(calls[index])
        if message.get("model"):
            fields.pop("model", None)
        message.update(fields)
    return len(used)


def score_number(value: Any) -> float | None:
    """A scalar score as a number (letters C/I/P/N, booleans, numbers, numeric text)."""
    if isinstance(value, str):
        letter = LETTER_SCORES.get(value.strip())
        if letter is not None:
            return letter
        try:
            return as_number(float(value))
        except ValueError:
            return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return as_number(value)


def _is_binary(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip() in _BINARY_LETTERS
    return isinstance(value, bool) or score_number(value) in (0.0, 1.0)


def outcome(scores: Any) -> dict[str, Any]:
    """rewards, and resolved/reward when exactly one scorer gives a C/I or 0/1 verdict."""
    if not isinstance(scores, Mapping) or not scores:
        return {}
    rewards: dict[str, float] = {}
    scalars: dict[str, Any] = {}
    for name, score in scores.items():
        value = score.get("value") if isinstance(score, Mapping) else None
        if isinstance(value, Mapping):
            named = {f"{name}.{k}": score_number(v) for k, v in value.items()}
            rewards.update({k: v for k, v in named.items() if v is not None})
        elif score_number(value) is not None:
            rewards[name] = score_number(value)  # type: ignore[assignment]
            scalars[name] = value
    verdicts = [n for n, v in scalars.items() if _is_binary(v)]
    if len(verdicts) == 1:
        name = verdicts[0]
        return {
            "resolved": rewards[name] == 1.0,
            "reward": rewards[name],
            "rewards": rewards,
            "outcome_source": f"inspect:{name}",
        }
    if len(scores) == 1 and scalars:
        name = next(iter(scalars))
        return {"reward": rewards[name], "rewards": rewards, "outcome_source": f"inspect:{name}"}
    if not rewards:
        return {}
    return {"rewards": rewards, "outcome_source": "inspect:" + ",".join(sorted(scores))}


def status(log_status: Any, sample: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(status, exit_reason) from the sample's error or limit, else the log's status."""
    error = sample.get("error")
    if error:
        text = error.get("message") if isinstance(error, Mapping) else str(error)
        return "error", text or "error"
    limit = sample.get("limit")
    if isinstance(limit, Mapping) and limit.get("type"):
        kind = str(limit["type"])
        return ("timeout" if kind in _TIME_LIMITS else "truncated"), f"{kind} limit"
    if log_status == "success" or sample.get("scores"):
        # A sample is written to the log when it finished, whatever the log's final status.
        return "completed", log_status if isinstance(log_status, str) else None
    if log_status in ("error", "cancelled"):
        return "error", log_status
    return None, log_status if isinstance(log_status, str) else None
