"""What one span says in each GenAI tracing convention: its kind, messages, model, usage, tool.

Three layouts are read, whichever a span carries:
- OpenTelemetry GenAI, current: `gen_ai.input.messages` / `gen_ai.output.messages` (JSON with
  `parts`), `gen_ai.system_instructions`, `gen_ai.operation.name`, `gen_ai.tool.*`;
- OpenTelemetry GenAI, older: `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` attributes, or the
  events `gen_ai.{system,user,assistant,tool}.message` and `gen_ai.choice`;
- OpenInference: `llm.input_messages.N.message.*`, `llm.output_messages…`, and
  `openinference.span.kind`.
Messages come out as canonical dicts (role, content, tool_calls, tool_call_id, reasoning).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trajlake.ingest._otlp_spans import Problem, Span

SpanKind = Literal["chat", "tool", "agent", "other"]
_CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
_OLD_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_REQUEST_PARAMS = "gen_ai.request."


@dataclass
class GenAISpan:
    """The GenAI reading of one span (None where the span does not say)."""

    span: Span
    kind: SpanKind
    convention: str | None = None
    request_model: str | None = None
    response_model: str | None = None
    input: list[dict[str, Any]] | None = None
    output: list[dict[str, Any]] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reasons: list[str] | None = None
    response_id: str | None = None
    request_params: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    agent_name: str | None = None
    conversation_id: str | None = None
    provider: str | None = None
    problems: list[Problem] = field(default_factory=list)


def read_span(span: Span) -> GenAISpan:
    """The GenAI reading of a span; wrongly typed attributes are problems, left unread."""
    a = span.attributes
    info = GenAISpan(span, _kind(span))
    reader = _Reader(span, info.problems)
    info.conversation_id = reader.text("gen_ai.conversation.id") or reader.text("session.id")
    info.provider = reader.text("gen_ai.provider.name") or reader.text("gen_ai.system")
    info.provider = info.provider or reader.text("llm.provider") or reader.text("llm.system")
    if info.kind == "chat":
        _read_chat(span, info, reader)
    elif info.kind == "tool":
        info.tool_name = reader.text("gen_ai.tool.name") or reader.text("tool.name") or None
        info.tool_call_id = reader.text("gen_ai.tool.call.id") or reader.text("tool_call.id")
        info.tool_arguments = reader.json_text("gen_ai.tool.call.arguments")
        info.tool_arguments = info.tool_arguments or reader.json_text("tool.parameters")
        info.tool_arguments = info.tool_arguments or reader.json_text("input.value")
        info.tool_result = reader.json_text("gen_ai.tool.call.result")
        info.tool_result = info.tool_result or reader.json_text("output.value")
        info.convention = "openinference" if "openinference.span.kind" in a else "gen_ai"
        if info.tool_name is None:
            info.tool_name = span.name.removeprefix("execute_tool ").strip() or "tool"
    elif info.kind == "agent":
        info.agent_name = reader.text("gen_ai.agent.name") or reader.text("agent.name")
        if info.agent_name is None:
            info.agent_name = span.name.removeprefix("invoke_agent ").strip() or None
    return info


def _kind(span: Span) -> SpanKind:
    a = span.attributes
    operation = a.get("gen_ai.operation.name")
    oi_kind = a.get("openinference.span.kind")
    oi_kind = oi_kind.upper() if isinstance(oi_kind, str) else None
    if operation == "execute_tool" or oi_kind == "TOOL":
        return "tool"
    if operation in _AGENT_OPERATIONS or oi_kind == "AGENT":
        return "agent"
    if operation in _CHAT_OPERATIONS or oi_kind == "LLM":
        return "chat"
    if any(
        k.startswith(("gen_ai.prompt.", "gen_ai.completion.", "llm.input_messages.")) for k in a
    ):
        return "chat"
    if "gen_ai.input.messages" in a or any(
        e.name in _OLD_EVENTS or e.name == "gen_ai.choice" for e in span.events
    ):
        return "chat"
    return "other"


class _Reader:
    """Typed attribute reads: a value of the wrong type is a problem, read as None."""

    def __init__(self, span: Span, problems: list[Problem]) -> None:
        self.span, self.problems = span, problems

    def _bad(self, key: str, expected: str, value: Any) -> None:
        where = f"{self.span.where}.attributes.{key}"
        error = f"attribute {key!r}: expected {expected}, got {type(value).__name__}"
        self.problems.append(Problem(where, error, value, self.span.trace_id, self.span.span_id))

    def text(self, key: str) -> str | None:
        value = self.span.attributes.get(key)
        if value is None or isinstance(value, str):
            return value or None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # an id sent as a number
        self._bad(key, "a string", value)
        return None

    def integer(self, key: str) -> int | None:
        value = self.span.attributes.get(key)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        self._bad(key, "an integer", value)
        return None

    def json_text(self, key: str) -> str | None:
        """A value kept as text: strings as they are, structured values as JSON."""
        value = self.span.attributes.get(key)
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, ensure_ascii=False)

    def structured(self, key: str) -> Any:
        """A JSON attribute: sent as a JSON string or as structured OTLP values."""
        value = self.span.attributes.get(key)
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:
            self._bad(key, "JSON text", value)
            return None


def _read_chat(span: Span, info: GenAISpan, reader: _Reader) -> None:
    a = span.attributes
    info.request_model = reader.text("gen_ai.request.model") or reader.text("llm.model_name")
    info.response_model = reader.text("gen_ai.response.model") or info.request_model
    info.response_id = reader.text("gen_ai.response.id")
    info.input_tokens = reader.integer("gen_ai.usage.input_tokens")
    if info.input_tokens is None:
        info.input_tokens = reader.integer("gen_ai.usage.prompt_tokens")
    if info.input_tokens is None:
        info.input_tokens = reader.integer("llm.token_count.prompt")
    info.output_tokens = reader.integer("gen_ai.usage.output_tokens")
    if info.output_tokens is None:
        info.output_tokens = reader.integer("gen_ai.usage.completion_tokens")
    if info.output_tokens is None:
        info.output_tokens = reader.integer("llm.token_count.completion")
    info.cached_tokens = reader.integer("gen_ai.usage.cache_read.input_tokens")
    if info.cached_tokens is None:
        info.cached_tokens = reader.integer("llm.token_count.prompt_details.cache_read")
    info.reasoning_tokens = reader.integer("llm.token_count.completion_details.reasoning")
    reasons = a.get("gen_ai.response.finish_reasons")
    info.finish_reasons = [str(r) for r in reasons] if isinstance(reasons, list) else None
    params = {k[len(_REQUEST_PARAMS) :]: v for k, v in a.items() if k.startswith(_REQUEST_PARAMS)}
    params.pop("model", None)
    invocation = reader.structured("llm.invocation_parameters")
    if isinstance(invocation, Mapping):
        params.update(invocation)
    info.request_params = params or None
    if "gen_ai.input.messages" in a or "gen_ai.output.messages" in a:
        info.convention = "gen_ai"
        _current_layout(info, reader)
    elif any(
        k.startswith("llm.input_messages.") or k.startswith("llm.output_messages.") for k in a
    ):
        info.convention = "openinference"
        info.input = _openinference_messages(a, "llm.input_messages.")
        info.output = _openinference_messages(a, "llm.output_messages.")
        info.tools = _openinference_tools(a, reader)
    elif any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in a):
        info.convention = "gen_ai_attributes"
        info.input = _indexed_messages(a, "gen_ai.prompt.")
        info.output = _indexed_messages(a, "gen_ai.completion.", default_role="assistant")
    else:
        info.convention = "gen_ai_events"
        _event_layout(span, info)
    if info.finish_reasons is None and info.output:
        found = [m["finish_reason"] for m in info.output if m.get("finish_reason")]
        info.finish_reasons = found or None


# -- current layout: JSON messages with parts --------------------------------------------------


def _current_layout(info: GenAISpan, reader: _Reader) -> None:
    system = reader.structured("gen_ai.system_instructions")
    messages = reader.structured("gen_ai.input.messages")
    output = reader.structured("gen_ai.output.messages")
    info.input = []
    if isinstance(system, list) and system:
        text = _joined([p.get("content") for p in system if isinstance(p, Mapping)])
        info.input.append({"role": "system", "content": text})
    for m in messages if isinstance(messages, list) else ():
        if isinstance(m, Mapping):
            info.input.extend(_parts_message(m))
    if isinstance(output, list):
        info.output = [x for m in output if isinstance(m, Mapping) for x in _parts_message(m)]
    tools = reader.structured("gen_ai.tool.definitions")
    if isinstance(tools, list):
        info.tools = [t for t in tools if isinstance(t, dict)] or None


def _parts_message(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One `{role, parts}` message as canonical messages (one per tool response part)."""
    role = m.get("role") if m.get("role") in {"system", "user", "assistant", "tool"} else "user"
    texts: list[Any] = []
    reasoning: list[Any] = []
    calls: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for part in m.get("parts") or ():
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("content"))
        elif kind == "reasoning":
            reasoning.append(part.get("content"))
        elif kind == "tool_call":
            calls.append(_call(part.get("id"), part.get("name"), part.get("arguments")))
        elif kind == "tool_call_response":
            result = part.get("response", part.get("result"))
            text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            responses.append({"role": "tool", "tool_call_id": part.get("id"), "content": text})
        elif kind is not None:
            texts.append(f"[{kind}]")  # a blob, file or URI part: named, never inlined
    if responses:
        return responses
    message: dict[str, Any] = {"role": role, "content": _joined(texts)}
    if reasoning:
        message["reasoning"] = _joined(reasoning)
    if calls:
        message["tool_calls"] = calls
    return [message | _text_fields(m, "finish_reason", "name")]


def _text_fields(source: Mapping[str, Any], *names: str) -> dict[str, str]:
    """The named fields of `source` that hold text (others are not the convention's)."""
    return {name: source[name] for name in names if isinstance(source.get(name), str)}


def _joined(texts: list[Any]) -> str | None:
    kept = [
        t if isinstance(t, str) else json.dumps(t, ensure_ascii=False)
        for t in texts
        if t is not None
    ]
    return "\n".join(kept) if kept else None


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    if arguments is not None and not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": str(call_id) if call_id is not None else None,
        "name": str(name) if name else "tool",
        "arguments": arguments,
        "type": "function",
    }


# -- indexed attributes: gen_ai.prompt.N.* and llm.input_messages.N.message.* -------------------


def _indexed(attributes: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.N.rest` attributes as {N: {rest: value}}, in index order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            found.setdefault(int(index), {})[rest] = value
    return dict(sorted(found.items()))


def _indexed_messages(
    attributes: Mapping[str, Any], prefix: str, default_role: str = "user"
) -> list[dict[str, Any]]:
    messages = []
    for fields in _indexed(attributes, prefix).values():
        calls = [
            _call(c.get("id"), c.get("name"), c.get("arguments"))
            for c in _indexed(fields, "tool_calls.").values()
        ]
        messages.append(
            _message(fields.get("role") or default_role, fields.get("content"), calls, fields)
        )
    return messages


def _message(
    role: Any, content: Any, calls: list[dict[str, Any]], fields: Mapping[str, Any]
) -> dict[str, Any]:
    role = role if role in {"system", "user", "assistant", "tool"} else "user"
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    message: dict[str, Any] = {"role": role, "content": content}
    if calls:
        message["tool_calls"] = calls
    return message | _text_fields(fields, "tool_call_id", "finish_reason", "name")


def _openinference_messages(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    messages = []
    for fields in _indexed(attributes, prefix).values():
        inner = {k.removeprefix("message."): v for k, v in fields.items()}
        calls = [
            _call(
                c.get("tool_call.id"),
                c.get("tool_call.function.name"),
                c.get("tool_call.function.arguments"),
            )
            for c in _indexed(inner, "tool_calls.").values()
        ]
        content = inner.get("content")
        if content is None:  # multimodal: message.contents.K.message_content.text
            parts = _indexed(inner, "contents.").values()
            content = _joined([p.get("message_content.text") for p in parts])
        messages.append(_message(inner.get("role"), content, calls, inner))
    return messages


def _openinference_tools(
    attributes: Mapping[str, Any], reader: _Reader
) -> list[dict[str, Any]] | None:
    tools = []
    for index in _indexed(attributes, "llm.tools."):
        schema = reader.structured(f"llm.tools.{index}.tool.json_schema")
        if isinstance(schema, dict):
            tools.append(schema)
    return tools or None


# -- older events: gen_ai.*.message and gen_ai.choice -------------------------------------------


def _event_layout(span: Span, info: GenAISpan) -> None:
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for event in span.events:
        body = _event_body(event.attributes)
        if event.name in _OLD_EVENTS:
            role = body.get("role") or _OLD_EVENTS[event.name]
            fields = {"tool_call_id": body.get("id") if role == "tool" else None}
            inputs.append(_message(role, body.get("content"), _event_calls(body), fields))
        elif event.name == "gen_ai.choice":
            message = body.get("message")
            message = _loads(message) if isinstance(message, str) else message
            message = message if isinstance(message, Mapping) else {}
            reason = body.get("finish_reason")
            fields = {"finish_reason": reason if isinstance(reason, str) else None}
            role = message.get("role") or "assistant"
            outputs.append(_message(role, message.get("content"), _event_calls(message), fields))
    info.input, info.output = inputs, outputs


def _event_body(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """An event's fields: its attributes, or the JSON body some SDKs put in one attribute."""
    for key in ("gen_ai.event.content", "event.body", "body"):
        body = attributes.get(key)
        body = _loads(body) if isinstance(body, str) else body
        if isinstance(body, Mapping):
            return {**attributes, **body}
    return dict(attributes)


def _event_calls(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = body.get("tool_calls")
    calls = _loads(calls) if isinstance(calls, str) else calls
    out = []
    for c in calls if isinstance(calls, list) else ():
        if isinstance(c, Mapping):
            inner = c.get("function")
            function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else c
            out.append(_call(c.get("id"), function.get("name"), function.get("arguments")))
    return out


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
