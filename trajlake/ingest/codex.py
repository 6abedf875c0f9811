"""OpenAI Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl`).

Every line is `{timestamp, type, payload}`. Messages come from the `response_item` stream only
(the `event_msg` stream repeats them for the UI):

- `message`: user → user, assistant → assistant, developer → system (the original role is kept
  in `attrs.role`). `session_meta.base_instructions` (the `instructions` of every request) is
  the first system message.
- Everything one model call outputs — `reasoning` (summary text, and raw `content` text when
  present; encrypted reasoning is only flagged `attrs.encrypted_reasoning`), assistant
  `message` items (joined), `function_call` / `custom_tool_call` / `web_search_call` (hosted
  searches run inside the call) — is one assistant message, closed by the next input (user or
  developer message, tool output) or `token_count`. A call with no text gets an assistant
  message with no content. Arguments are kept as the model wrote them (not always JSON:
  `apply_patch` input is a patch, and redacted corpora replace them).
- `*_output`: tool messages, paired by `call_id`; the exit code is read from the output when it
  states one.
- `compacted` (or `event_msg: context_compacted`): a new thread `compacted-<n>` starts with the
  replacement history, flagged `is_copied_context`; what follows continues in that thread.

Token usage exists only in the cumulative `token_count` events. The last `total_token_usage`
gives the trajectory totals (cached and reasoning totals in attrs); each new `last_token_usage`
(one per model call) is put on the assistant message of that call when exactly one was written
since the previous count (always, in the corpus), else the messages keep no usage. Timestamps
are UTC (`...Z`). Rollouts carry no outcome; `task_complete.last_agent_message` is the final
output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import IO, Any, ClassVar

from pydantic import ValidationError

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    bounded,
    iter_json_lines,
    stable_id,
)
from trajlake.ingest._codex_parts import Rollout
from trajlake.ingest._jsonl_adapter import first_line
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory
from trajlake.wire.values import parse_time

_ENVELOPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_META_FIELDS = ("id", "cwd", "originator", "source", "model_provider", "git", "instructions")
_CONTEXT_FIELDS = ("approval_policy", "effort", "personality")


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _Reader:
    """Reads one rollout: the line loop around `Rollout`, plus run-level fields."""

    def __init__(self) -> None:
        self.state = Rollout()
        self.stamps: list[Any] = []
        self.sha = hashlib.sha256()
        self.status: str | None = None
        self.exit_reason: str | None = None
        self.context: dict[str, Any] = {}

    def line(self, envelope: dict[str, Any]) -> None:
        kind, payload = envelope["type"], envelope["payload"]
        stamp = parse_time(envelope.get("timestamp"))
        if stamp is not None:
            self.stamps.append(stamp)
        state = self.state
        if kind == "response_item":
            state.item(payload, stamp)
        elif kind == "event_msg":
            self.event(payload, stamp)
        elif kind == "turn_context":
            state.context = payload
            state.turn_id = payload.get("turn_id") or state.turn_id
            if isinstance(payload.get("model"), str):
                state.models[payload["model"]] += 1
            self.context = self.context or payload
        elif kind == "compacted":
            state.compacted(payload, stamp)
        elif kind == "session_meta" and not state.meta:
            state.meta = payload
            instructions = _dict(payload.get("base_instructions")).get("text")
            if isinstance(instructions, str) and instructions:
                attrs = {"from": "base_instructions"}
                message = {"role": "system", "content": instructions, "attrs": attrs}
                state.messages.insert(0, {**message, "thread": "main", "timestamp": stamp})
        else:
            state.other[kind] += 1

    def event(self, payload: dict[str, Any], stamp: Any) -> None:
        kind = payload.get("type")
        state = self.state
        if kind == "token_count":
            state.token_count(_dict(payload.get("info")))
        elif kind == "context_compacted":
            state.context_compacted()
        elif kind == "task_started":
            state.turn_id = payload.get("turn_id") or state.turn_id
            self.status, self.exit_reason = None, None
        elif kind == "task_complete":
            message = payload.get("last_agent_message")
            state.final_output = message if isinstance(message, str) else state.final_output
            self.status, self.exit_reason = "completed", "task_complete"
        elif kind == "turn_aborted":
            # The user stopped the turn before the agent finished.
            self.status, self.exit_reason = "truncated", f"turn_aborted: {payload.get('reason')}"
        elif kind in ("error", "stream_error"):
            self.status, self.exit_reason = "error", str(payload.get("message"))
        else:
            state.other[f"event_msg:{kind}"] += 1

    def trajectory(self) -> dict[str, Any]:
        state = self.state
        state.close()
        meta, total = state.meta, state.total or {}
        attrs: dict[str, Any] = {
            ("session_id" if k == "id" else k): meta[k] for k in _META_FIELDS if k in meta
        }
        attrs.update({k: self.context[k] for k in _CONTEXT_FIELDS if k in self.context})
        sandbox = _dict(self.context.get("sandbox_policy")).get("type")
        attrs["sandbox"] = sandbox
        attrs["models"] = dict(state.models)
        attrs["compactions"] = state.compactions
        attrs["ignored"] = dict(state.other)
        for key in ("cached_input_tokens", "reasoning_output_tokens"):
            attrs[key] = total.get(key)
        session = meta.get("id")
        attrs["rollout_key"] = session  # Harbor's ATIF of this rollout has it as `session_id`
        return {
            "trajectory_id": stable_id("codex", session or self.sha.hexdigest()),
            "harness": "codex",
            "harness_version": meta.get("cli_version"),
            "policy_model": state.models.most_common(1)[0][0] if state.models else None,
            "started_at": parse_time(meta.get("timestamp")) or min(self.stamps, default=None),
            "ended_at": max(self.stamps, default=None),
            "status": self.status,
            "exit_reason": self.exit_reason,
            "final_output": state.final_output,
            "prompt_tokens": total.get("input_tokens"),
            "completion_tokens": total.get("output_tokens"),
            "total_tokens": total.get("total_tokens"),
            "messages": state.messages,
            "attrs": {k: v for k, v in attrs.items() if v not in (None, {}, [])},
        }


class CodexAdapter:
    """Reads Codex CLI rollout JSONL: one rollout (session) per file."""

    name: ClassVar[str] = "codex"
    description: ClassVar[str] = "rollout-*.jsonl — OpenAI Codex CLI sessions (Responses items)"

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure when the first line is a `session_meta` envelope; likely for other envelopes."""
        first = first_line(head)
        if not first.parsed:
            # A first line longer than the head (big base instructions): its leading keys.
            text = first.text
            meta = text.startswith(b'{"timestamp":') and b'"type":"session_meta"' in text[:80]
            return 0.9 if meta else 0.0
        obj = first.value
        if not isinstance(obj, dict) or not isinstance(obj.get("payload"), dict):
            return 0.0
        if obj.get("type") == "session_meta" and "cli_version" in obj["payload"]:
            return 1.0
        return 0.9 if obj.get("type") in _ENVELOPES and "timestamp" in obj else 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """The file's bad lines (as BadRecords), then its one trajectory."""
        reader = _Reader()
        for line, offset, raw, value in iter_json_lines(stream):
            reader.sha.update(raw + b"\n")
            if isinstance(value, BadRecord):
                yield value
                continue
            if not isinstance(value, dict) or not isinstance(value.get("type"), str):
                kept, size = bounded(raw)
                error = "not a rollout line {timestamp, type, payload}"
                yield BadRecord(error, line, offset, "type", kept, size)
                continue
            if not isinstance(value.get("payload"), dict):
                kept, size = bounded(raw)
                error = "rollout line without a `payload` object"
                yield BadRecord(error, line, offset, "payload", kept, size)
                continue
            reader.line(value)
        if not reader.state.meta and not reader.state.messages:
            yield BadRecord("no session_meta and no response items: not a Codex rollout")
            return
        try:
            record = CanonicalTrajectory.model_validate(reader.trajectory())
            yield ParsedTrajectory(finish_model_fields(record))
        except ValidationError as e:
            yield bad_from_validation(e)
