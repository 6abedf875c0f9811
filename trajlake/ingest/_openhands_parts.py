"""OpenHands events → message dicts: the part shared by every OpenHands layout.

An OpenHands history is a list of events, each an action (`action` + `args`) or an observation
(`observation` + `content` + `extras`, pointing back at its action through `cause`). Decisions:

- An agent action becomes an assistant message with one tool call. Its text is the model's own
  message content (`tool_call_metadata.model_response`), else the action's `thought`: OpenHands
  sends the thought back to the model as assistant content, so it is content, not reasoning.
  `reasoning_content` of the model response (thinking models) is the reasoning.
- Actions from one model response (same response id) are one assistant message with several calls.
- An observation answering an action is a `tool` message (call id from its own
  `tool_call_metadata`, else from its `cause` action); an `error` observation is `is_error`. An
  observation that answers no action (e.g. a rejected malformed call) is a `user` message, as
  OpenHands shows it to the model.
- UI/state events (`change_agent_state`, `agent_state_changed`, `null`, `recall`, condensation)
  are not messages; they are counted in the trajectory's attrs. `recall` is skipped too: its
  workspace context is rendered into the prompt by templates the events do not carry.
- Timestamps are zone-less ISO strings written by OpenHands in UTC; they are read as UTC.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trajlake.wire.parts import image_part
from trajlake.wire.values import as_int as _int
from trajlake.wire.values import parse_time

SKIPPED_ACTIONS = frozenset(
    {"change_agent_state", "recall", "condensation", "condensation_request", "null"}
)
SKIPPED_OBSERVATIONS = frozenset({"agent_state_changed", "recall", "null", "condense"})
# Keys of an event envelope; in the old (resolver) serialisation everything else is an arg.
_ENVELOPE = frozenset(
    {"id", "timestamp", "source", "message", "action", "observation", "cause", "content"}
    | {"tool_call_metadata", "llm_metrics", "timeout", "success", "hidden", "extras", "args"}
)
_ATTR_TEXT_LIMIT = 200


def small_scalars(values: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar fields of a vendor dict worth keeping in attrs (long text is left out)."""
    kept: dict[str, Any] = {}
    for key, value in values.items():
        short_text = isinstance(value, str) and len(value) <= _ATTR_TEXT_LIMIT
        if short_text or value is None or isinstance(value, bool | int | float):
            kept[key] = value
    return kept


def normalize_event(event: dict[str, Any]) -> dict[str, Any]:
    """The modern event shape; the resolver's old serialisation carries args inline."""
    if "args" in event or "extras" in event:
        return event
    if "action" in event:
        # An action's `content` is an argument (a message's text); an observation's is its own.
        keys = _ENVELOPE - {"content"}
        args = {k: v for k, v in event.items() if k not in keys}
        return {**{k: v for k, v in event.items() if k in keys}, "args": args}
    if "observation" in event:
        extras = {k: v for k, v in event.items() if k not in _ENVELOPE}
        return {**{k: v for k, v in event.items() if k in _ENVELOPE}, "extras": extras}
    return event


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


@dataclass
class EventSummary:
    """Messages of an event list and what else the events say about the run."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    tools: list[dict[str, Any]] | None = None
    system_args: dict[str, Any] = field(default_factory=dict)
    agent_state: str | None = None
    finish: dict[str, Any] | None = None
    model: str | None = None
    started: dt.datetime | None = None
    ended: dt.datetime | None = None
    events: int = 0


class EventConverter:
    """Turns events, in order, into message dicts (see the module docstring for the mapping).

    Args:
        token_usages: per-call usage of an eval record (`metrics.token_usages`) by response id;
            it wins over the usage inside the model response, which some providers leave empty.
        latencies: per-call latency in seconds by response id (`metrics.response_latencies`).
    """

    def __init__(
        self,
        token_usages: Mapping[str, dict[str, Any]] | None = None,
        latencies: Mapping[str, float] | None = None,
    ) -> None:
        self.out = EventSummary()
        self._usages = token_usages or {}
        self._latencies = latencies or {}
        self._by_response: dict[str, dict[str, Any]] = {}
        self._calls: dict[Any, tuple[str | None, str]] = {}
        self._pending: tuple[str | None, str] | None = None
        self._agent_acted = False

    def convert(self, events: Iterable[object]) -> EventSummary:
        """Process every event and return the summary."""
        for raw in events:
            self.out.events += 1
            if not isinstance(raw, dict):
                self.out.skipped["invalid"] += 1
                continue
            event = normalize_event(raw)
            stamp = parse_time(event.get("timestamp"))
            if stamp is not None:
                self.out.started = min(self.out.started or stamp, stamp)
                self.out.ended = max(self.out.ended or stamp, stamp)
            if isinstance(event.get("action"), str):
                self._action(event, stamp)
            elif isinstance(event.get("observation"), str):
                self._observation(event, stamp)
            else:
                self.out.skipped["unknown"] += 1
        return self.out

    def _action(self, event: dict[str, Any], stamp: dt.datetime | None) -> None:
        kind: str = event["action"]
        args = _dict(event.get("args"))
        if kind in SKIPPED_ACTIONS:
            self.out.skipped[f"action:{kind}"] += 1
            if kind == "change_agent_state" and isinstance(args.get("agent_state"), str):
                self.out.agent_state = args["agent_state"]
            return
        if kind == "system":
            self.out.system_args = {k: v for k, v in args.items() if k not in ("content", "tools")}
            if isinstance(args.get("tools"), list):
                self.out.tools = args["tools"]
            self._add("system", _text(args.get("content")), event, stamp, {"action": kind})
            return
        if kind == "message":
            self._message(event, args, stamp)
            return
        if event.get("source") in ("user", "environment"):
            self.out.skipped[f"action:{kind}"] += 1  # not the policy's doing
            return
        self._agent_action(kind, event, args, stamp)

    def _message(
        self, event: dict[str, Any], args: dict[str, Any], stamp: dt.datetime | None
    ) -> None:
        source = event.get("source")
        # The old serialisation has no `source`: before the agent acted, a message is the task.
        user = source == "user" or (source is None and not self._agent_acted)
        parts = [image_part(u) for u in args.get("image_urls") or () if isinstance(u, str)]
        parts += [
            {"type": "file", "uri": u} for u in args.get("file_urls") or () if isinstance(u, str)
        ]
        content = _text(args.get("content"))
        message = self._add("user" if user else "assistant", content, event, stamp, {})
        if parts:
            message["parts"] = ([{"type": "text", "text": content}] if content else []) + parts
        if not user:
            self._agent_acted = True
            self._model_fields(message, _dict(event.get("tool_call_metadata")))

    def _agent_action(
        self, kind: str, event: dict[str, Any], args: dict[str, Any], stamp: dt.datetime | None
    ) -> None:
        self._agent_acted = True
        meta = _dict(event.get("tool_call_metadata"))
        response = _dict(meta.get("model_response"))
        response_id = _text(response.get("id"))
        message = self._by_response.get(response_id) if response_id else None
        if message is None:
            choice = _dict((response.get("choices") or [{}])[0])
            said = _dict(choice.get("message"))
            content = _text(said.get("content")) if meta else None
            message = self._add(
                "assistant", content or _text(args.get("thought")), event, stamp, {}
            )
            message["reasoning"] = _text(said.get("reasoning_content"))
            message["finish_reason"] = _text(choice.get("finish_reason"))
            self._model_fields(message, meta)
            if response_id:
                self._by_response[response_id] = message
        call = self._tool_call(kind, meta, response, args)
        message.setdefault("tool_calls", []).append(call)
        message["attrs"].setdefault("actions", []).append(kind)
        self._calls[event.get("id")] = self._pending = (call["id"], call["name"])
        if kind == "finish":
            self.out.finish = args

    def _tool_call(
        self, kind: str, meta: dict[str, Any], response: dict[str, Any], args: dict[str, Any]
    ) -> dict[str, Any]:
        call_id = _text(meta.get("tool_call_id"))
        name = _text(meta.get("function_name")) or kind
        arguments: str | None = None
        call_type = "function" if meta else None
        for choice in response.get("choices") or ():
            for requested in _dict(_dict(choice).get("message")).get("tool_calls") or ():
                requested = _dict(requested)
                if call_id is not None and requested.get("id") == call_id:
                    function = _dict(requested.get("function"))
                    arguments = function.get("arguments")
                    if not isinstance(arguments, str):
                        arguments = json.dumps(arguments, ensure_ascii=False)
                    call_type = _text(requested.get("type")) or call_type
        if arguments is None:
            # No model response to quote (non-function-calling agents): the parsed action args.
            kept = {k: v for k, v in args.items() if k != "thought"}
            arguments = json.dumps(kept, ensure_ascii=False, default=str)
        return {"id": call_id, "name": name, "arguments": arguments, "type": call_type}

    def _observation(self, event: dict[str, Any], stamp: dt.datetime | None) -> None:
        kind: str = event["observation"]
        extras = _dict(event.get("extras"))
        if kind in SKIPPED_OBSERVATIONS:
            self.out.skipped[f"observation:{kind}"] += 1
            if kind == "agent_state_changed" and isinstance(extras.get("agent_state"), str):
                self.out.agent_state = extras["agent_state"]
            return
        meta = _dict(event.get("tool_call_metadata"))
        cause = event.get("cause")
        answered: tuple[str | None, str] | None = None
        if meta:
            answered = (_text(meta.get("tool_call_id")), _text(meta.get("function_name")) or kind)
        elif cause is not None:
            answered = self._calls.get(cause)
        elif "id" not in event:
            answered = self._pending  # old serialisation: the observation follows its action
        self._pending = None
        attrs: dict[str, Any] = {"observation": kind, "cause": cause}
        attrs.update({f"extras.{k}": v for k, v in small_scalars(extras).items()})
        role = "tool" if answered is not None else "user"
        message = self._add(role, _text(event.get("content")), event, stamp, attrs)
        if answered is not None:
            message["tool_call_id"], message["name"] = answered
        message["is_error"] = kind == "error"
        metadata = _dict(extras.get("metadata"))
        message["exit_code"] = _int(metadata.get("exit_code", extras.get("exit_code")))
        parts = [image_part(u) for u in extras.get("image_urls") or () if isinstance(u, str)]
        if isinstance(extras.get("screenshot"), str) and extras["screenshot"]:
            parts.append(image_part(extras["screenshot"]))
        if parts:
            text = message["content"]
            message["parts"] = ([{"type": "text", "text": text}] if text else []) + parts

    def _model_fields(self, message: dict[str, Any], meta: dict[str, Any]) -> None:
        response = _dict(meta.get("model_response"))
        response_id = _text(response.get("id"))
        message["model"] = _text(response.get("model"))
        self.out.model = self.out.model or message["model"]
        if response_id is None:
            return
        message["attrs"]["response_id"] = response_id
        if response_id in self._latencies:
            message["attrs"]["latency_s"] = self._latencies[response_id]
        logged = self._usages.get(response_id)
        if logged is not None:
            message["prompt_tokens"] = _int(logged.get("prompt_tokens"))
            message["completion_tokens"] = _int(logged.get("completion_tokens"))
            message["cached_tokens"] = _int(logged.get("cache_read_tokens"))
            message["attrs"]["cache_write_tokens"] = _int(logged.get("cache_write_tokens"))
            return
        usage = _dict(response.get("usage"))
        if not usage:
            return
        message["prompt_tokens"] = _int(usage.get("prompt_tokens"))
        message["completion_tokens"] = _int(usage.get("completion_tokens"))
        details = _dict(usage.get("completion_tokens_details"))
        message["reasoning_tokens"] = _int(details.get("reasoning_tokens"))
        cached = _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens"))
        message["cached_tokens"] = (
            cached if cached is not None else _int(usage.get("cache_read_input_tokens"))
        )
        if _int(usage.get("cache_creation_input_tokens")) is not None:
            message["attrs"]["cache_write_tokens"] = usage["cache_creation_input_tokens"]

    def _add(
        self,
        role: str,
        content: str | None,
        event: dict[str, Any],
        stamp: dt.datetime | None,
        attrs: dict[str, Any],
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": role,
            "content": content,
            "timestamp": stamp,
            "attrs": {"event_id": event.get("id"), **attrs},
        }
        self.out.messages.append(message)
        return message
