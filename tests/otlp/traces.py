"""GenAI traces made with the real OpenTelemetry SDK, one generator per tracing convention.

Each generator sets span attributes and events the way instrumentations of that convention do:
- `current_genai`: OpenTelemetry GenAI semantic conventions (gen-ai-spans, gen-ai-agent-spans):
  `invoke_agent` → `chat` / `execute_tool` spans, `gen_ai.input.messages` /
  `gen_ai.output.messages` as JSON with `parts`, `gen_ai.system_instructions`,
  `gen_ai.tool.call.{id,arguments,result}`, `gen_ai.usage.{input,output}_tokens`.
- `older_attributes`: the indexed attribute layout (`gen_ai.prompt.N.*`, `gen_ai.completion.N.*`,
  `gen_ai.usage.prompt_tokens`) that OpenLLMetry-style instrumentations write.
- `older_events`: GenAI events on the span (`gen_ai.system.message`, `gen_ai.user.message`,
  `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`; semconv ≤ 1.36).
- `openinference`: OpenInference (`openinference.span.kind` AGENT/LLM/TOOL,
  `llm.input_messages.N.message.*`, `llm.output_messages…`, `llm.token_count.*`, `session.id`).
Spans get explicit times (one second apart), so their order is what the test says.
`export_json` turns finished spans into the canonical OTLP/JSON mapping (hex ids).

`python -m tests.otlp.traces --write tests/data/otlp` writes the readable fixture files (one
per convention, and JSON lines as the Collector's file exporter writes them); a test checks
that the committed files are what this module generates now.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Status, StatusCode, Tracer, set_span_in_context

T0 = 1_767_000_000_000_000_000  # ns
SECOND = 1_000_000_000


class SeededIds(IdGenerator):
    """Deterministic trace and span ids (fixtures that do not change when regenerated)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


def record(
    generate: Callable[[Tracer], None], seed: int = 1, service: str = "demo-agent"
) -> list[ReadableSpan]:
    """Run a generator against a real TracerProvider; the finished spans."""
    exporter = InMemorySpanExporter()
    # `Resource.create` adds a random service.instance.id and the SDK version: not for files
    # that must read the same when regenerated.
    resource = Resource(
        {
            "service.name": service,
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "opentelemetry",
        }
    )
    provider = TracerProvider(resource=resource, id_generator=SeededIds(seed))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    generate(provider.get_tracer("trajlake-tests"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _hex_ids(value: Any) -> Any:
    """protobuf's JSON printer writes bytes as base64; OTLP/JSON wants trace/span ids in hex."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId") and v
            else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def export_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The spans as one ExportTraceServiceRequest in the OTLP/JSON mapping."""
    return _hex_ids(json_format.MessageToDict(encode_spans(spans)))


def _span(
    tracer: Tracer,
    name: str,
    start: int,
    end: int,
    attrs: dict[str, Any],
    parent: Any = None,
    events: Sequence[tuple[str, dict[str, Any]]] = (),
    error: str | None = None,
) -> Any:
    span = tracer.start_span(
        name,
        context=set_span_in_context(parent) if parent else None,
        start_time=T0 + start * SECOND,
        attributes=attrs,
    )
    for i, (event, fields) in enumerate(events):
        span.add_event(event, fields, timestamp=T0 + start * SECOND + i)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=T0 + end * SECOND)
    return span


def _agent(tracer: Tracer, attrs: dict[str, Any], start: int, end: int, name: str) -> Any:
    return tracer.start_span(name, start_time=T0 + start * SECOND, attributes=attrs)


def current_genai(tracer: Tracer, conversation: str = "conv-1") -> None:
    """A weather agent: chat → execute_tool → chat, in the current GenAI layout."""
    agent = _agent(
        tracer,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather-bot",
            "gen_ai.conversation.id": conversation,
        },
        0,
        10,
        "invoke_agent weather-bot",
    )
    system = [{"type": "text", "content": "You answer weather questions."}]
    user = {"role": "user", "parts": [{"type": "text", "content": "What is the weather in Paris?"}]}
    call = {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "get_weather",
                "arguments": {"city": "Paris"},
            }
        ],
    }
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.conversation.id": conversation,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.system_instructions": json.dumps(system),
    }
    _span(
        tracer,
        "chat gpt-4o-mini",
        1,
        2,
        {
            **common,
            "gen_ai.input.messages": json.dumps([user]),
            "gen_ai.output.messages": json.dumps([{**call, "finish_reason": "tool_call"}]),
            "gen_ai.usage.input_tokens": 20,
            "gen_ai.usage.output_tokens": 10,
            "gen_ai.response.finish_reasons": ["tool_call"],
            "gen_ai.response.id": "resp-1",
        },
        agent,
    )
    _span(
        tracer,
        "execute_tool get_weather",
        3,
        4,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            "gen_ai.tool.call.result": "rainy, 12 C",
        },
        agent,
    )
    result = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "response": "rainy, 12 C"}],
    }
    answer = {
        "role": "assistant",
        "parts": [{"type": "text", "content": "It is rainy in Paris, 12 C."}],
        "finish_reason": "stop",
    }
    _span(
        tracer,
        "chat gpt-4o-mini",
        5,
        6,
        {
            **common,
            "gen_ai.input.messages": json.dumps([user, call, result]),
            "gen_ai.output.messages": json.dumps([answer]),
            "gen_ai.usage.input_tokens": 45,
            "gen_ai.usage.output_tokens": 12,
        },
        agent,
    )
    agent.end(end_time=T0 + 10 * SECOND)


def _indexed(prefix: str, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Messages as indexed attributes: `prefix.N.field`, tool calls as `prefix.N.tool_calls.M.*`."""
    out: dict[str, Any] = {}
    for i, message in enumerate(messages):
        for key, value in message.items():
            if key != "tool_calls":
                out[f"{prefix}.{i}.{key}"] = value
                continue
            for j, call in enumerate(value):
                out |= {f"{prefix}.{i}.tool_calls.{j}.{k}": v for k, v in call.items()}
    return out


def older_attributes(tracer: Tracer) -> None:
    """Two chat calls with a tool span between, in the indexed gen_ai.prompt/completion layout."""
    root = _agent(tracer, {"traceloop.span.kind": "workflow"}, 0, 10, "support.workflow")
    base = {
        "gen_ai.system": "openai",
        "llm.request.type": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
    }
    history = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is order 42?"},
    ]
    lookup = {"id": "call_a", "name": "lookup_order", "arguments": '{"order": 42}'}
    asked = {"role": "assistant", "finish_reason": "tool_calls", "tool_calls": [lookup]}
    first = _indexed("gen_ai.prompt", history) | _indexed("gen_ai.completion", [asked])
    usage = {"gen_ai.usage.prompt_tokens": 30, "gen_ai.usage.completion_tokens": 8}
    _span(tracer, "openai.chat", 1, 2, {**base, **first, **usage}, root)
    _span(
        tracer,
        "execute_tool lookup_order",
        3,
        4,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.call.id": "call_a",
            "gen_ai.tool.call.result": "shipped",
        },
        root,
    )
    history += [
        {"role": "assistant", "tool_calls": [lookup]},
        {"role": "tool", "tool_call_id": "call_a", "content": "shipped"},
    ]
    answer = {"role": "assistant", "content": "Order 42 has shipped.", "finish_reason": "stop"}
    second = _indexed("gen_ai.prompt", history) | _indexed("gen_ai.completion", [answer])
    usage = {"gen_ai.usage.prompt_tokens": 50, "gen_ai.usage.completion_tokens": 6}
    _span(tracer, "openai.chat", 5, 6, {**base, **second, **usage}, root)
    root.end(end_time=T0 + 10 * SECOND)


def older_events(tracer: Tracer) -> None:
    """One chat span per call with the history as gen_ai.*.message events and a gen_ai.choice."""
    root = _agent(
        tracer,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "calc"},
        0,
        10,
        "invoke_agent calc",
    )
    base = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4.1",
    }
    system = (
        "gen_ai.system.message",
        {"gen_ai.system": "openai", "content": "Use the calculator."},
    )
    user = ("gen_ai.user.message", {"gen_ai.system": "openai", "content": "What is 6*7?"})
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "calc", "arguments": '{"expr": "6*7"}'},
        }
    ]
    choice1 = (
        "gen_ai.choice",
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": json.dumps({"role": "assistant", "tool_calls": calls}),
        },
    )
    _span(
        tracer,
        "chat gpt-4.1",
        1,
        2,
        {**base, "gen_ai.usage.input_tokens": 15, "gen_ai.usage.output_tokens": 5},
        root,
        [system, user, choice1],
    )
    assistant = ("gen_ai.assistant.message", {"tool_calls": json.dumps(calls)})
    tool = ("gen_ai.tool.message", {"id": "c1", "content": "42"})
    choice2 = (
        "gen_ai.choice",
        {
            "index": 0,
            "finish_reason": "stop",
            "message": json.dumps({"role": "assistant", "content": "6*7 = 42"}),
        },
    )
    _span(
        tracer,
        "chat gpt-4.1",
        3,
        4,
        {**base, "gen_ai.usage.input_tokens": 25, "gen_ai.usage.output_tokens": 4},
        root,
        [system, user, assistant, tool, choice2],
    )
    root.end(end_time=T0 + 10 * SECOND)


def openinference(tracer: Tracer, session: str = "sess-9") -> None:
    """An OpenInference agent: LLM (tool call) → TOOL (matched by name) → LLM."""
    agent = _agent(
        tracer,
        {"openinference.span.kind": "AGENT", "agent.name": "searcher", "session.id": session},
        0,
        10,
        "searcher",
    )

    def message(prefix: str, i: int, role: str, content: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {f"{prefix}.{i}.message.role": role}
        if content is not None:
            out[f"{prefix}.{i}.message.content"] = content
        return out

    call = {
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "tc-1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "search",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"q": "otel"}',
    }
    base = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "claude-sonnet-4",
        "session.id": session,
        "llm.invocation_parameters": json.dumps({"max_tokens": 256}),
    }
    _span(
        tracer,
        "ChatAnthropic",
        1,
        2,
        {
            **base,
            **message("llm.input_messages", 0, "user", "Find OpenTelemetry."),
            **message("llm.output_messages", 0, "assistant"),
            **call,
            "llm.token_count.prompt": 11,
            "llm.token_count.completion": 7,
        },
        agent,
    )
    _span(
        tracer,
        "search",
        3,
        4,
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "search",
            "input.value": '{"q": "otel"}',
            "output.value": "opentelemetry.io",
        },
        agent,
    )
    history = {
        k.replace("llm.output_messages.0", "llm.input_messages.1"): v for k, v in call.items()
    }
    _span(
        tracer,
        "ChatAnthropic",
        5,
        6,
        {
            **base,
            **message("llm.input_messages", 0, "user", "Find OpenTelemetry."),
            **message("llm.input_messages", 1, "assistant"),
            **history,
            **message("llm.input_messages", 2, "tool", "opentelemetry.io"),
            "llm.input_messages.2.message.tool_call_id": "tc-1",
            **message("llm.output_messages", 0, "assistant", "See opentelemetry.io."),
            "llm.token_count.prompt": 30,
            "llm.token_count.completion": 5,
        },
        agent,
    )
    agent.end(end_time=T0 + 10 * SECOND)


CONVENTIONS: dict[str, Callable[[Tracer], None]] = {
    "current": current_genai,
    "older-attributes": older_attributes,
    "older-events": older_events,
    "openinference": openinference,
}


def collector_lines() -> list[dict[str, Any]]:
    """Export requests as a batching exporter sends them and the Collector's file exporter
    writes them, one per line: a conversation over two traces (the first split over two
    requests) and an OpenInference session in a trace of its own."""
    first = record(lambda t: current_genai(t, "conv-7"), seed=1)
    second = record(lambda t: current_genai(t, "conv-7"), seed=2)
    other = record(lambda t: openinference(t, "sess-x"), seed=3)
    return [export_json(first[:2]), export_json(first[2:]), export_json(second), export_json(other)]


def fixture_files() -> dict[str, str]:
    """The files of `tests/data/otlp`: name → text (a pretty-printed request per convention,
    compact JSON lines for the Collector's file)."""
    files = {  # a seed each: traces without a conversation id are told apart by trace id
        f"{name}.json": json.dumps(export_json(record(generate, seed=seed)), indent=2) + "\n"
        for seed, (name, generate) in enumerate(CONVENTIONS.items(), start=11)
    }
    lines = (json.dumps(line, separators=(",", ":")) + "\n" for line in collector_lines())
    files["collector.jsonl"] = "".join(lines)
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the OTLP/JSON fixture files.")
    parser.add_argument("--write", type=Path, required=True, metavar="FOLDER")
    folder = parser.parse_args(argv).write
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in fixture_files().items():
        (folder / name).write_text(text, encoding="utf-8")
        print(folder / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
