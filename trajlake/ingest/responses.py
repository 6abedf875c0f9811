"""Responses-API rollouts as JSONL: `{responses_create_params, response, reward, ...}` per line.

This is NeMo Gym's `example_rollouts.jsonl` layout (and any dump of Responses-API request +
response pairs). Messages are the request's `input` items followed by the response's `output`
items: `message`, `reasoning`, `function_call` (and other `*_call` items) and
`function_call_output`. Consecutive reasoning, text and calls of one model turn become one
assistant message. Outputs recorded as cumulative transitions (`contains_transitions`, a list
of item lists) are read from the last, complete transition.

Outcome: `reward` is the scalar reward; `resolved` (reward == 1) is set only when every reward in
the file is 0 or 1 (a binary environment), found by a first pass over the file; shaped rewards
(blackjack's -1/1, sokoban's 10/-2, a 0–2 multi-reward) carry no pass/fail verdict, and labelling
only their wins would bias any selection on `resolved`. A stream that cannot be rewound is
judged record by record (reward 0 or 1 → resolved). Other numeric environment keys
(set_overlap, f2p_passed, reward_components.* …) go to `rewards`; booleans, ids, counts and
timings go to `attrs`. `response.usage` covers the whole rollout: it is put on the assistant
message when there is exactly one, else kept as trajectory totals. The environment is the
folder (`resources_servers/<env>/data/…`) and becomes `task_source`; a rollout without a
`task_id` of its own gets `<env>/<_ng_task_index>`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import IO, Any, ClassVar

from trajlake.ingest._adapter import stable_id
from trajlake.ingest._jsonl_adapter import Builder, JsonLinesAdapter
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory
from trajlake.wire.responses import ResponsesMessageBuilder
from trajlake.wire.values import as_number, drop_none, first_str, mapping, parse_time

_NOT_REWARDS = ("_index", "_idx", "_time_s", "_bytes", "_total", "exit_code", "_count")
_REWARD_GROUPS = ("reward", "score", "metric")
_PARAMS = ("temperature", "top_p", "max_output_tokens", "tool_choice", "parallel_tool_calls")


class ResponsesAdapter(JsonLinesAdapter):
    """Reads one Responses-API rollout per JSONL line (NeMo Gym layout)."""

    name: ClassVar[str] = "responses"
    description: ClassVar[str] = (
        "*.jsonl — Responses-API rollouts {responses_create_params, response, reward} per line "
        "(NeMo Gym example_rollouts.jsonl)"
    )

    def sniff_value(self, value: Any) -> float:
        """Sure when the first line holds a Responses request and response."""
        if not isinstance(value, dict) or not isinstance(value.get("response"), dict):
            return 0.0
        response = value["response"]
        if "responses_create_params" in value and "output" in response:
            return 1.0
        return 0.9 if response.get("object") == "response" and "output" in response else 0.0

    def sniff_prefix(self, text: bytes, complete: bool) -> float:
        """A first line longer than the sniffed head: judge by its first key."""
        return 0.9 if text.startswith(b'{"responses_create_params"') and not complete else 0.0

    def builder(self, source: SourceFile, stream: IO[bytes]) -> Builder:
        """Lines map with the file's environment and whether all its rewards are binary."""
        env = _environment(source.uri)
        binary = _binary_rewards(stream)
        return functools.partial(_record, env=env, binary=binary)

    def finish(self, record: CanonicalTrajectory) -> CanonicalTrajectory:
        """The model fields derived from the messages (`finish_model_fields`)."""
        return finish_model_fields(record)


def _binary_rewards(stream: IO[bytes]) -> bool | None:
    """Whether every `reward` in the file is 0 or 1 (None: the stream cannot be rewound)."""
    if not stream.seekable():
        return None
    start = stream.tell()
    binary = True
    for raw in stream:
        try:
            value = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):
            continue  # reported by the real pass
        reward = value.get("reward") if isinstance(value, dict) else None
        if reward is not None and as_number(reward) not in (0.0, 1.0):
            binary = False
            break
    stream.seek(start)
    return binary


def _environment(uri: str) -> str | None:
    """`resources_servers/<env>/…` → env; else the folder above a `data/` folder."""
    parts = uri.replace("\\", "/").split("/")[:-1]
    if "resources_servers" in parts[:-1]:
        return parts[parts.index("resources_servers") + 1]
    if len(parts) >= 2 and parts[-1] == "data":
        return parts[-2]
    return None


def _output_items(response: Mapping[str, Any], inputs: list[Any]) -> list[Any]:
    output = response.get("output") or []
    if not isinstance(output, list):
        raise ValueError("field 'response.output': expected a list of items")
    if output and all(isinstance(t, list) for t in output):
        # Cumulative transitions: the last one holds the whole episode (input included).
        last: list[Any] = output[-1]
        return last[len(inputs) :] if last[: len(inputs)] == inputs else last
    return output


def _messages(
    params: Mapping[str, Any], response: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[str], int]:
    """(messages, skipped item types, how many messages came from the request's input)."""
    inputs = params.get("input")
    inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
    builder = ResponsesMessageBuilder()
    instructions = params.get("instructions") or response.get("instructions")
    if isinstance(instructions, str) and instructions:
        builder.messages.append({"role": "system", "content": instructions})
    for item in inputs:
        builder.add(item, None)
    # A request boundary always ends a turn: output items never extend an input message.
    builder.flush()
    n_input = len(builder.messages)
    model = response.get("model") if isinstance(response.get("model"), str) else None
    for item in _output_items(response, inputs):
        builder.add(item, model)
    return builder.finish(), builder.skipped, n_input


def _status(top: Mapping[str, Any], response: Mapping[str, Any]) -> tuple[str | None, Any]:
    state = response.get("status")
    error = response.get("error")
    if error:
        text = error.get("message") if isinstance(error, Mapping) else str(error)
        return "error", text or state
    if state == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return "truncated", reason or state
    if state in ("failed", "cancelled"):
        return "error", state
    if top.get("truncated") is True:
        return "truncated", "truncated"
    if state == "completed" or top.get("terminated") is True:
        return "completed", state if isinstance(state, str) else "terminated"
    return None, state


def _split_env_keys(top: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Numeric environment scores → rewards; everything else (ids, timings, text) → attrs."""
    rewards: dict[str, float] = {}
    attrs: dict[str, Any] = {}
    for key, value in top.items():
        number = as_number(value)
        if key == "reward":
            continue
        if number is not None and not key.endswith(_NOT_REWARDS):
            rewards[key] = number
        elif isinstance(value, Mapping) and any(g in key for g in _REWARD_GROUPS):
            leaves = {f"{key}.{k}": as_number(v) for k, v in value.items()}
            rewards.update({k: v for k, v in leaves.items() if v is not None})
            attrs[key] = value
        elif value is not None:
            attrs[key] = value
    return rewards, attrs


def _usage(outputs: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    """Per-message usage when one assistant message made the call, else trajectory totals."""
    if not isinstance(usage, Mapping):
        return {}
    inp, out = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    counts = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "cached_tokens": inp.get("cached_tokens") if isinstance(inp, Mapping) else None,
        "reasoning_tokens": out.get("reasoning_tokens") if isinstance(out, Mapping) else None,
    }
    assistants = [m for m in outputs if m.get("role") == "assistant"]
    if len(assistants) == 1:
        assistants[0].update(drop_none(counts))
        return {}
    totals = {"prompt_tokens": counts["prompt_tokens"], "total_tokens": usage.get("total_tokens")}
    return drop_none(totals | {"completion_tokens": counts["completion_tokens"]})


def _indexed_task(env: str | None, index: Any) -> str | None:
    """A task named by its index in the environment's dataset (`_ng_task_index`)."""
    if not isinstance(index, int) or isinstance(index, bool):
        return None
    return f"{env}/{index}" if env else str(index)


def _record(obj: Any, env: str | None, binary: bool | None) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    response = obj.get("response")
    params = obj.get("responses_create_params") or {}
    if not isinstance(response, dict) or not isinstance(params, dict):
        raise ValueError("field 'response': expected a Responses-API response object")
    messages, skipped, n_input = _messages(params, response)
    top = {k: v for k, v in obj.items() if k not in ("responses_create_params", "response")}
    rewards, env_attrs = _split_env_keys(top)
    reward = as_number(obj.get("reward"))
    status, exit_reason = _status(top, response)
    agent = mapping(top.get("agent_ref"))
    verifier = top.get("verifier_metadata")
    task_id = first_str([top.get("task_id")]) or (
        first_str([verifier.get("task_id")]) if isinstance(verifier, Mapping) else None
    )
    index = top.get("_ng_task_index", top.get("task_idx"))
    tools = params.get("tools") or response.get("tools") or None
    response_id = response.get("id")
    ident = [response_id] if isinstance(response_id, str) and response_id else None
    attrs = {
        **env_attrs,
        "response_id": response_id,
        "previous_response_id": response.get("previous_response_id"),
        "env_id": response.get("env_id"),
        "group_id": response.get("group_id"),
        "usage": response.get("usage"),
        "params": drop_none({k: params.get(k) for k in _PARAMS}) or None,
        "skipped_items": skipped or None,
    }
    return drop_none(
        {
            "trajectory_id": stable_id(
                "responses", *(ident or [json.dumps(obj, sort_keys=True, ensure_ascii=False)])
            ),
            "task_id": task_id or _indexed_task(env, index),
            "task_source": env,
            "harness": first_str([agent.get("name")]),
            "policy_model": first_str([response.get("model"), params.get("model")]),
            "attempt": top.get("_ng_rollout_index"),
            "started_at": parse_time(response.get("created_at")),
            "ended_at": parse_time(response.get("completed_at")),
            "status": status,
            "exit_reason": exit_reason if isinstance(exit_reason, str) else None,
            "resolved": (reward == 1.0) if binary is not False and reward in (0.0, 1.0) else None,
            "reward": reward,
            "rewards": rewards or None,
            "outcome_source": "reward" if reward is not None else None,
            "final_output": first_str([top.get("model_patch")]),
            **_usage(messages[n_input:], response.get("usage")),
            "tools": tools,
            "attrs": drop_none(attrs),
            "messages": messages,
        }
    )
