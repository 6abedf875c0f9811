"""mini-swe-agent `.traj.json` files: the `mini-swe-agent-1` object and the older bare message list.

mini-swe-agent has no structured tool calls: the action is the single fenced bash block of an
assistant message (```` ```bash ```` in v1, ```` ```mswea_bash_command ```` in the old list) and
its result is the next `user` message (`<returncode>N</returncode><output>…</output>`). As for
SWE-agent text-parsed runs, roles stay as the model saw them: the assistant gets a `bash`
ToolCall (`{"command": …}`, id `mini-swe-agent-call-<n>`) and the result message keeps role
`user` but carries the `tool_call_id`, tool name and `exit_code`. Zero or several fenced blocks
are a format error: no tool call, and the harness's error message is not paired.

v1 per-call data comes from `extra.response` (the raw litellm response): model, usage (prompt,
completion, cached and reasoning tokens), finish reason, reasoning text and the `created` time.
The trajectory's `started_at`/`ended_at` are its first and last message times (`created`, or a
message's own `extra.timestamp`); an instance id shaped `owner__repo-N` gives `task_source`
'swe-bench'; `policy_model` is normalised (see `_models`).
`info.exit_status` is an exception name: `Submitted` → completed, `LimitsExceeded` and context
overflows → truncated, timeouts → timeout, other exceptions → error. The old list format has no
`info`: the submission is the output of the final submit command, when there is one.
`mini-swe-agent-1.1` (mini-swe-agent 2.x, native tool calls) is not read by this adapter.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterator
from typing import IO, Any, ClassVar

from pydantic import ValidationError

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    bounded,
    loads,
    stable_id,
)
from trajlake.ingest._keys import KeyStructure
from trajlake.ingest._models import finish_model_fields, task_source_of
from trajlake.ingest._sources import SourceFile
from trajlake.ingest._swe_agent_parts import number_messages
from trajlake.ingest.swe_agent import run_id_from_path
from trajlake.schema import CanonicalTrajectory, Message, Status, ToolCall
from trajlake.wire.values import as_int as _int
from trajlake.wire.values import parse_time

_HARNESS = "mini-swe-agent"
_FORMAT_V1 = "mini-swe-agent-1"
_ACTION = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.S)
_RETURNCODE = re.compile(r"\s*<returncode>\s*(-?\d+)\s*</returncode>")
_SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_EXIT_STATUS: dict[str, Status] = {
    "Submitted": "completed",
    "LimitsExceeded": "truncated",
    "ContextWindowExceededError": "truncated",
    "TimeExceeded": "timeout",
    "TimeoutError": "timeout",
    "TimeoutExpired": "timeout",
    "ExecutionTimeoutError": "timeout",
}


def exit_status_to_status(text: str | None) -> Status | None:
    """The trajectory status of a mini-swe-agent exit status (an exception class name)."""
    if not text:
        return None
    if text in _EXIT_STATUS:
        return _EXIT_STATUS[text]
    # Any other exception name (RetryError, FormatError, …) ended the run abnormally.
    return "error" if re.fullmatch(r"[A-Z]\w*(Error|Exception|Exceeded)\w*", text) else None


def _obj(value: Any) -> dict[str, Any]:
    """The value if it is a JSON object, else an empty one (for optional sections)."""
    return value if isinstance(value, dict) else {}


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _apply_response(message: Message, response: Any) -> None:
    """Per-call fields of a v1 assistant message from its raw litellm response."""
    if not isinstance(response, dict):
        return
    usage = _obj(response.get("usage"))
    choice = (response.get("choices") or [None])[0]
    choice = choice if isinstance(choice, dict) else {}
    message.model = response.get("model") or None
    message.finish_reason = choice.get("finish_reason") or None
    message.prompt_tokens = _int(usage.get("prompt_tokens"))
    message.completion_tokens = _int(usage.get("completion_tokens"))
    message.cached_tokens = _int(_dig(usage, "prompt_tokens_details", "cached_tokens"))
    message.reasoning_tokens = _int(_dig(usage, "completion_tokens_details", "reasoning_tokens"))
    reply = _obj(choice.get("message"))
    reasoning = reply.get("reasoning") or reply.get("reasoning_content")
    message.reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
    created = response.get("created")
    if (
        message.timestamp is None
        and isinstance(created, (int, float))
        and not isinstance(created, bool)
    ):
        message.timestamp = dt.datetime.fromtimestamp(created, tz=dt.UTC)
    attrs = {k: response[k] for k in ("id", "provider") if response.get(k)}
    if usage.get("cost") is not None:
        attrs["cost_usd"] = usage["cost"]
    if attrs:
        message.attrs = {**(message.attrs or {}), "response": attrs}


def _result_fields(message: Message, content: str) -> None:
    """exit_code of a `<returncode>` result; a killed command is an error."""
    match = _RETURNCODE.match(content)
    if match:
        message.exit_code = int(match.group(1))
    elif "timed out and has been killed" in content:
        message.is_error = True


def _messages(entries: list[Any]) -> list[Message]:
    messages: list[Message] = []
    pending: ToolCall | None = None
    calls = 0
    for entry in entries:
        if not isinstance(entry, dict):
            raise _Invalid("message is not an object", "messages")
        content = entry.get("content")
        if isinstance(content, list):  # content parts (rare): keep the text
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        extra = _obj(entry.get("extra"))
        other = {k: v for k, v in entry.items() if k not in ("role", "content", "extra")}
        other.update({k: v for k, v in extra.items() if k != "response"})
        message = Message.model_validate(
            {"trajectory_id": "", "idx": 0, "role": entry.get("role"), "content": content,
             "attrs": other or None}
        )  # fmt: skip
        # A per-message `extra.timestamp` (unix seconds or ISO), where a version writes one,
        # beats the response's `created` (when the call started, not when it answered).
        message.timestamp = parse_time(extra.get("timestamp"))
        if message.role == "assistant":
            _apply_response(message, extra.get("response"))
            actions = _ACTION.findall(content or "")
            pending = None
            if len(actions) == 1:
                calls += 1
                arguments = json.dumps({"command": actions[0]}, ensure_ascii=False)
                pending = ToolCall.model_validate(
                    {"id": f"mini-swe-agent-call-{calls}", "name": "bash", "arguments": arguments}
                )
                message.tool_calls = [pending]
        elif message.role == "user" and pending is not None:
            message.tool_call_id, message.name = pending.id, pending.name
            _result_fields(message, content or "")
            pending = None
        messages.append(message)
    return number_messages(messages)


def _submission_of_list(messages: list[Message]) -> str | None:
    """The old format's submission: output of a final command that printed the submit marker."""
    if len(messages) < 2 or messages[-1].role != "user" or not messages[-1].tool_call_id:
        return None
    calls = messages[-2].tool_calls or []
    call = calls[0] if calls else None
    if call is None or not any(m in (call.arguments or "") for m in _SUBMIT_MARKERS):
        return None
    return messages[-1].content or None


class _Invalid(Exception):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _info_attrs(data: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for key in ("instance_id", "trajectory_format"):
        if data.get(key) is not None:
            attrs[key] = data[key]
    if isinstance(info.get("model_stats"), dict):
        attrs["model_stats"] = info["model_stats"]
    config = _obj(info.get("config"))
    for key in ("agent_type", "model_type", "environment_type"):
        if config.get(key):
            attrs[key] = config[key]
    # Model and environment settings are small and what runs are compared by; the agent
    # section is mostly prompt templates, which the messages already hold.
    for key in ("model", "environment"):
        if isinstance(config.get(key), dict):
            attrs[f"{key}_config"] = config[key]
    skipped = {"exit_status", "submission", "model_stats", "mini_version", "config"}
    attrs.update({k: v for k, v in info.items() if k not in skipped})
    return attrs


def build_record(source: SourceFile, data: Any, raw: bytes) -> CanonicalTrajectory:
    """The canonical trajectory of a parsed file (a v1 object or an old message list)."""
    is_list = isinstance(data, list)
    entries = data if is_list else data.get("messages")
    if not isinstance(entries, list):
        raise _Invalid("expected a 'messages' list", "messages")
    info = {} if is_list or not isinstance(data.get("info"), dict) else data["info"]
    name = source.name
    stem = name[: -len(".traj.json")] if name.endswith(".traj.json") else name.rsplit(".", 1)[0]
    instance = None if is_list else data.get("instance_id")
    task_id = str(instance) if instance else stem
    messages = _messages(entries)
    stats = _obj(info.get("model_stats"))
    cost = stats.get("instance_cost")
    per_call = any(m.prompt_tokens is not None for m in messages)
    exit_text = info.get("exit_status")
    submission = _submission_of_list(messages) if is_list else info.get("submission")
    version = info.get("mini_version")
    model_name = _dig(info, "config", "model", "model_name")
    stamps = [m.timestamp for m in messages if m.timestamp is not None]
    record = CanonicalTrajectory.model_validate(
        dict(
            trajectory_id=stable_id(_HARNESS, task_id, hashlib.sha256(raw).hexdigest()),
            task_id=task_id,
            task_source=task_source_of(task_id),
            harness=_HARNESS,
            harness_version=str(version) if version else None,
            policy_model=str(model_name) if model_name else None,
            started_at=min(stamps) if stamps else None,
            ended_at=max(stamps) if stamps else None,
            run_id=run_id_from_path(source.uri, task_id),
            status=exit_status_to_status(exit_text if isinstance(exit_text, str) else None),
            exit_reason=str(exit_text) if exit_text else None,
            final_output=submission if isinstance(submission, str) and submission else None,
            # Zero cost over real model calls is an unpriced model, but with no calls it is unknown.
            cost_usd=float(cost) if cost is not None and (cost or stats.get("api_calls")) else None,
            # Run totals only where there is no per-call usage (some forks write them).
            prompt_tokens=None if per_call else _int(stats.get("input_tokens")),
            completion_tokens=None if per_call else _int(stats.get("output_tokens")),
            attrs=_info_attrs({} if is_list else data, info) or None,
            messages=messages,
        )
    )
    return finish_model_fields(record)


def _sniff_keys(source: SourceFile, keys: KeyStructure) -> float:
    shape = keys.shape
    if keys.container == "array":
        named = source.name.endswith(".traj.json")
        return 0.9 if named and {"role", "content"} <= set(shape.keys) else 0.0
    tag = shape.values.get("trajectory_format")
    if isinstance(tag, str):
        return 1.0 if tag == _FORMAT_V1 else 0.0
    info = shape.children.get("info")
    version = info.values.get("mini_version") if info is not None else None
    if isinstance(version, str) and shape.kinds.get("messages") == "array":
        return 0.95 if version.startswith("1") else 0.0
    looks = "info" in shape.keys and shape.kinds.get("messages") == "array"
    return 0.6 if looks and source.name.endswith(".traj.json") else 0.0


class MiniSweAgentAdapter:
    """Reads mini-swe-agent trajectories (`mini-swe-agent-1` objects and old message lists)."""

    name: ClassVar[str] = "mini-swe-agent"
    description: ClassVar[str] = "*.traj.json — mini-swe-agent trajectories (v1 and old list)"

    def sniff(self, source: SourceFile, head: bytes, keys: KeyStructure | None = None) -> float:
        """Sure for the v1 format tag or `mini_version`; old lists by name and action fences.

        With the streamed `keys` (the tag is written last, after a patch and all messages,
        so often beyond the head): the top-level `trajectory_format` or `info.mini_version`.
        """
        if keys is not None:
            return _sniff_keys(source, keys)
        start = head.lstrip()[:1]
        tag = re.search(rb'"trajectory_format"\s*:\s*"([^"]*)"', head)
        if start == b"{":
            if tag is not None:
                return 1.0 if tag.group(1) == _FORMAT_V1.encode() else 0.0
            version = re.search(rb'"mini_version"\s*:\s*"(\d+)', head)
            if version is not None:
                return 0.95 if version.group(1) == b"1" else 0.0
            looks = b'"info"' in head and b'"messages"' in head
            return 0.6 if looks and source.name.endswith(".traj.json") else 0.0
        if start == b"[" and re.match(rb'\s*\[\s*\{\s*"role"\s*:', head):
            if source.name.endswith(".traj.json"):
                return 0.95
            return 0.8 if b"mswea_bash_command" in head and b"<returncode>" in head else 0.0
        return 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory for the file; a file that does not parse is one BadRecord."""
        raw = stream.read()
        kept, size = bounded(raw)
        try:
            data = loads(raw)  # NaN/Infinity read as null (and noted)
        except (UnicodeDecodeError, ValueError) as e:
            yield BadRecord(f"not a JSON document: {e}", None, None, None, kept, size)
            return
        fmt = data.get("trajectory_format") if isinstance(data, dict) else None
        if fmt not in (None, _FORMAT_V1) or not isinstance(data, (dict, list)):
            what = f"trajectory_format {fmt!r}" if fmt else f"a JSON {type(data).__name__}"
            yield BadRecord(
                f"unsupported mini-swe-agent file: {what} (expected {_FORMAT_V1!r} or a list)",
                None, None, "trajectory_format" if fmt else None, kept, size,
            )  # fmt: skip
            return
        try:
            record = build_record(source, data, raw)
        except ValidationError as e:
            yield bad_from_validation(e, raw=kept, raw_size=size)
            return
        except _Invalid as e:
            yield BadRecord(str(e), None, None, e.field, kept, size)
            return
        yield ParsedTrajectory(record)
