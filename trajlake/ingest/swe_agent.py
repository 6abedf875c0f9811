"""SWE-agent `.traj` files (0.x and 1.x): one JSON object per task attempt, read from `history`.

`history` is the chat as the model saw it, so it is the message source; `trajectory` steps only
add what history lacks (execution time and state per step, and trailing steps that some 1.x
versions never appended to history). Decisions:

- Text-parsed configurations (0.x, and 1.x `default`/`xml`/EnIGMA) embed the action in the
  assistant text and return the observation as a `user` message. Roles stay as the model saw
  them (the observation remains `user`, so chat templates render what was trained on), but the
  assistant gets a `ToolCall` built from its `action` (name = first word of the command,
  arguments = `{"command": action}`, id = deterministic `swe-agent-call-<n>`), and the next
  user message carries that `tool_call_id` and tool name, so calls and results pair up in SQL.
- 1.x function calling keeps its OpenAI-shaped `tool_calls` and `role:"tool"` results.
- Demonstrations (`is_demo: true`) are copied context (`is_copied_context=True`).
- Harness exit pseudo-actions (`exit_cost`, `exit_format`, …) are not tool calls.
- `info.exit_status`: `submitted` → completed; `submitted (<reason>)` (an autosubmission after a
  limit or error) and bare `exit_*` map by the reason: cost/context → truncated, timeouts →
  timeout, forfeit/exit command → completed, other exits → error; the raw text is `exit_reason`.
- `info.model_stats` holds run totals only. Replays and demonstrations report zero tokens and
  zero cost for calls that never reached a model: all-zero usage is unknown (null), not 0.
- Inline base64 images (multimodal runs) become `data-sha256:<hash>` references.
- `run_id` is the submission folder in the SWE-bench experiments layout
  (`<submission>/trajs/<id>.traj`) or the run folder of the 1.x batch layout
  (`<run>/<id>/<id>.traj`); otherwise null.
"""

from __future__ import annotations

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
from trajlake.ingest._swe_agent_parts import (
    content_and_parts,
    number_messages,
    obj,
    openai_tool_call,
)
from trajlake.schema import CanonicalTrajectory, Message, Status, ToolCall

_HARNESS = "swe-agent"
_KNOWN_ENTRY_KEYS = frozenset(
    {"role", "content", "thought", "action", "tool_calls", "tool_call_ids", "is_demo"}
    | {"agent", "message_type", "thinking_blocks"}
)
_MAIN_AGENTS = frozenset({"primary", "main"})
_EXIT_STATUS: dict[str, Status] = {
    "submitted": "completed",
    "exit_command": "completed",
    "exit_forfeit": "completed",
    "exit_cost": "truncated",
    "exit_context": "truncated",
    "exit_command_timeout": "timeout",
    "exit_total_execution_time": "timeout",
}


def exit_status_to_status(text: str | None) -> Status | None:
    """The trajectory status of a SWE-agent exit status (see the module docstring)."""
    if not text:
        return None
    reason = text.strip()
    match = re.fullmatch(r"submitted\s*\((.+)\)", reason)
    if match:
        reason = match.group(1).strip()
    if reason in _EXIT_STATUS:
        return _EXIT_STATUS[reason]
    if reason.startswith("exit_") or reason == "early_exit":
        return "error"
    return None


def run_id_from_path(uri: str, task_id: str | None) -> str | None:
    """The run folder of `<run>/trajs/<file>` or `<run>/[trajs/]<task_id>/<file>`, else None."""
    dirs = [p for p in uri.replace("\\", "/").split("/") if p][:-1]
    if dirs and task_id and dirs[-1] == task_id:
        dirs = dirs[:-1]  # batch layout: one folder per instance
    elif not dirs or dirs[-1] != "trajs":
        return None
    if dirs and dirs[-1] == "trajs":
        dirs = dirs[:-1]
    if not dirs or ":" in dirs[-1]:  # nothing above, or a URL scheme
        return None
    return dirs[-1]


def _action_call(action: Any, number: int) -> ToolCall | None:
    """The call a text-parsed action stands for; none for empty actions and exit pseudo-actions."""
    if not isinstance(action, str) or not action.strip():
        return None
    command = action.strip("\n")
    name = command.split()[0]
    if name.startswith("exit_") or name in ("skip", "early_exit"):
        return None
    arguments = json.dumps({"command": command}, ensure_ascii=False)
    return ToolCall.model_validate(
        {"id": f"swe-agent-call-{number}", "name": name, "arguments": arguments}
    )


def _thinking(blocks: Any) -> str | None:
    if not isinstance(blocks, list):
        return None
    texts = [str(b.get("thinking")) for b in blocks if isinstance(b, dict) and b.get("thinking")]
    return "\n\n".join(texts) or None


class _Conversation:
    """Turns history entries into messages, pairing text-parsed actions with observations."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.main_agent: str | None = None
        self.names: dict[str, str] = {}  # call id → tool name
        self.pending: dict[str, ToolCall] = {}  # thread → text-parsed call awaiting its result
        self.calls = 0
        self.acting: list[tuple[Message, Any]] = []  # main-thread actions and their raw text

    def thread_of(self, agent: Any) -> str:
        """'main' for the first speaking agent; other agents (summarizers…) get their own."""
        if not isinstance(agent, str) or not agent:
            return "main"
        if self.main_agent is None:
            self.main_agent = agent
        return "main" if agent == self.main_agent or agent in _MAIN_AGENTS else agent

    def add(self, entry: dict[str, Any]) -> Message:
        role = entry.get("role")
        thread = self.thread_of(entry.get("agent"))
        content, parts = content_and_parts(entry.get("content"))
        attrs = {k: v for k, v in entry.items() if k not in _KNOWN_ENTRY_KEYS}
        for key in ("agent", "message_type", "is_demo"):
            if entry.get(key) is not None:
                attrs[key] = entry[key]
        message = Message.model_validate(
            {"trajectory_id": "", "thread": thread, "idx": 0, "role": role, "content": content,
             "parts": parts, "is_copied_context": bool(entry.get("is_demo")),
             "attrs": attrs or None}
        )  # fmt: skip
        if role == "assistant":
            self._assistant(message, entry, thread)
            if thread == "main" and not message.is_copied_context:
                self.acting.append((message, entry.get("action")))
        elif role == "tool":
            ids = entry.get("tool_call_ids") or []
            message.tool_call_id = entry.get("tool_call_id") or (ids[0] if ids else None)
            message.name = self.names.get(message.tool_call_id or "")
        elif role == "user" and thread in self.pending:
            call = self.pending.pop(thread)
            message.tool_call_id, message.name = call.id, call.name
        self.messages.append(message)
        return message

    def _assistant(self, message: Message, entry: dict[str, Any], thread: str) -> None:
        message.reasoning = _thinking(entry.get("thinking_blocks"))
        self.pending.pop(thread, None)
        native = entry.get("tool_calls")
        if isinstance(native, list) and native:
            message.tool_calls = [openai_tool_call(c) for c in native if isinstance(c, dict)]
        else:
            self.calls += 1
            call = _action_call(entry.get("action"), self.calls)
            if call is not None:
                message.tool_calls = [call]
                self.pending[thread] = call
        for call in message.tool_calls or ():
            if call.id:
                self.names[call.id] = call.name


def _state(value: Any) -> Any:
    """A step's state: a dict in 1.x, a JSON-encoded string in 0.x."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _merge_steps(conv: _Conversation, steps: list[dict[str, Any]]) -> None:
    """Attach step timing/state to the history's actions; append steps history never got."""
    actions = [_norm(a) for _, a in conv.acting]
    if actions != [_norm(s.get("action")) for s in steps[: len(actions)]]:
        return  # history and steps disagree (hand-edited demonstrations): leave history alone
    for (message, _), step in zip(conv.acting, steps, strict=False):
        extra: dict[str, Any] = {
            k: _state(step[k]) for k in ("execution_time", "state") if k in step
        }
        if extra:
            message.attrs = {**(message.attrs or {}), **extra}
    trailing = steps[len(actions) :]
    native = any(m.role == "tool" for m in conv.messages)
    for i, step in enumerate(trailing):
        entry = {"role": "assistant", "content": step.get("response"), "action": step.get("action")}
        message = conv.add(entry)
        message.attrs = {"from_trajectory_step": True}
        if step.get("execution_time") is not None:
            message.attrs["execution_time"] = step["execution_time"]
        # The last step's observation (the submitted diff) was never shown to the model.
        if i < len(trailing) - 1 and step.get("observation") is not None:
            result = conv.add({"role": "user", "content": step["observation"]})
            if native:  # function-calling runs return observations as tool messages
                result.role = "tool"


def _norm(action: Any) -> str | None:
    return action.strip() if isinstance(action, str) else None


def _messages(data: dict[str, Any]) -> list[Message]:
    conv = _Conversation()
    history = data.get("history")
    for entry in history if isinstance(history, list) else []:
        if not isinstance(entry, dict):
            raise _Invalid("history entry is not an object", "history")
        conv.add(entry)
    steps = data.get("trajectory")
    if isinstance(steps, list):
        _merge_steps(conv, [s for s in steps if isinstance(s, dict)])
    return number_messages(conv.messages)


class _Invalid(Exception):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _usage(stats: Any) -> tuple[float | None, int | None, int | None]:
    """(cost, prompt tokens, completion tokens) of `info.model_stats`; all-zero usage is unknown."""
    if not isinstance(stats, dict):
        return None, None, None
    sent, received = stats.get("tokens_sent"), stats.get("tokens_received")
    if not sent and not received:
        return None, None, None
    cost = stats.get("instance_cost")
    return (float(cost) if cost is not None else None), sent, received


def _model_name(config: dict[str, Any]) -> str | None:
    agent = obj(config.get("agent"))
    model = obj(agent.get("model"))
    name = model.get("name")
    return str(name) if name else None


def _run_attrs(data: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    info = obj(data.get("info"))
    attrs: dict[str, Any] = {}
    if data.get("environment") is not None:
        attrs["environment"] = data["environment"]
    agents = sorted(
        {e["agent"] for e in data.get("history") or [] if isinstance(e, dict) and e.get("agent")}
    )
    if agents:
        attrs["agents"] = agents
    skipped = {"submission", "exit_status", "model_stats", "swe_agent_version"}
    for key, value in info.items():
        if key not in skipped and not key.startswith("edited_files"):
            attrs[key] = value  # e.g. swe_agent_hash, swe_rex_version, review
    if isinstance(info.get("model_stats"), dict):
        attrs["model_stats"] = info["model_stats"]
    agent = obj(config.get("agent"))
    tools = obj(agent.get("tools"))
    parse = tools.get("parse_function")
    if isinstance(parse, dict) and parse.get("type"):
        attrs["parse_function"] = parse["type"]
    bundles = [b.get("path") for b in tools.get("bundles") or [] if isinstance(b, dict)]
    if bundles:
        attrs["tool_bundles"] = bundles
    problem = config.get("problem_statement")
    if isinstance(problem, dict) and problem.get("id"):
        attrs["problem_statement_id"] = problem["id"]
    env = obj(config.get("env"))
    for key, path in (("image", ("deployment", "image")), ("base_commit", ("repo", "base_commit"))):
        section = env.get(path[0])
        if isinstance(section, dict) and section.get(path[1]):
            attrs[key] = section[path[1]]
    return attrs


def build_record(source: SourceFile, data: dict[str, Any], raw: bytes) -> CanonicalTrajectory:
    """The canonical trajectory of one parsed `.traj` object."""
    name = source.name
    task_id = name[: -len(".traj")] if name.endswith(".traj") else name.rsplit(".", 1)[0]
    config = data.get("replay_config")
    if isinstance(config, str):  # some versions store the config as a JSON string
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    config = config if isinstance(config, dict) else {}
    info = obj(data.get("info"))
    exit_text = info.get("exit_status")
    cost, prompt, completion = _usage(info.get("model_stats"))
    submission = info.get("submission")
    version = info.get("swe_agent_version")
    record = CanonicalTrajectory.model_validate(
        dict(
            trajectory_id=stable_id(_HARNESS, task_id, hashlib.sha256(raw).hexdigest()),
            task_id=task_id,
            task_source=task_source_of(task_id),
            harness=_HARNESS,
            harness_version=str(version) if version else None,
            policy_model=_model_name(config),
            run_id=run_id_from_path(source.uri, task_id),
            status=exit_status_to_status(exit_text if isinstance(exit_text, str) else None),
            exit_reason=str(exit_text) if exit_text else None,
            final_output=submission if isinstance(submission, str) and submission else None,
            cost_usd=cost,
            prompt_tokens=prompt,
            completion_tokens=completion,
            attrs=_run_attrs(data, config) or None,
            messages=_messages(data),
        )
    )
    return finish_model_fields(record)


class SweAgentAdapter:
    """Reads SWE-agent `.traj` files, both generations, one trajectory per file."""

    name: ClassVar[str] = "swe-agent"
    description: ClassVar[str] = "*.traj — SWE-agent trajectories (0.x and 1.x)"

    def sniff(self, source: SourceFile, head: bytes, keys: KeyStructure | None = None) -> float:
        """Sure for a `.traj` JSON object with `history` or `trajectory` steps (judged by
        the streamed top-level `keys` when given: long values can push them past the head)."""
        if keys is not None:
            lists = {k for k, kind in keys.shape.kinds.items() if kind == "array"}
            named = source.name.endswith(".traj") and keys.container == "object"
            return 1.0 if named and lists & {"history", "trajectory"} else 0.0
        if not head.lstrip().startswith(b"{"):
            return 0.0
        steps = re.search(rb'"trajectory"\s*:\s*\[', head) is not None
        history = re.search(rb'"history"\s*:\s*\[', head) is not None
        if source.name.endswith(".traj"):
            return 1.0 if steps or history else 0.0
        # Another name: only when both SWE-agent keys and a step's fields are there.
        step_keys = all(k in head for k in (b'"action"', b'"observation"', b'"thought"'))
        return 0.9 if steps and step_keys and b'"info"' in head else 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory for the file; a file that does not parse is one BadRecord."""
        raw = stream.read()
        kept, size = bounded(raw)
        try:
            data = loads(raw)  # NaN/Infinity read as null (and noted)
        except (UnicodeDecodeError, ValueError) as e:
            yield BadRecord(f"not a JSON document: {e}", None, None, None, kept, size)
            return
        if not isinstance(data, dict) or not isinstance(
            data.get("history", data.get("trajectory")), list
        ):
            yield BadRecord(
                "expected a SWE-agent object with a 'history' or 'trajectory' list",
                None, None, None, kept, size,
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
