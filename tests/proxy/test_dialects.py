"""Wire dialects: request/response parsing and SSE stream reassembly (SDK-checked fixtures)."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageParam, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from openai.types.responses import Response, ResponseInputParam, ResponseStreamEvent
from pydantic import TypeAdapter

from trajlake.proxy import ENDPOINTS, StreamAssembler, parse_request, parse_response
from trajlake.schema import Message

PNG = "data:image/png;base64,iVBORw0KGgo="
TEXT = "Listing — ünïcode ✓ 日本"  # multi-byte characters: splits fall inside them


def _consume(value: Any) -> Any:
    """Walk a validated value: the SDK param types validate nested iterables lazily."""
    if isinstance(value, Mapping):
        return {k: _consume(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return [_consume(v) for v in value]


def _valid_params(kind: Any, value: Any) -> Any:
    adapter: TypeAdapter[Any] = TypeAdapter(kind)  # alive while its lazy iterators are read
    _consume(adapter.validate_python(value))
    return value


def _canonical(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    for m in messages:
        Message.model_validate({"trajectory_id": "t", "idx": 0, **m})
    return [
        (
            m["role"],
            m.get("content"),
            [(c.get("id"), c["name"], json.loads(c["arguments"])) for c in m.get("tool_calls", [])],
            m.get("tool_call_id"),
            m.get("name"),
        )
        for m in messages
    ]


# Chat completions -----------------------------------------------------------------------


def chat_request() -> dict[str, Any]:
    messages = [
        {"role": "developer", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in"},
                {"type": "image_url", "image_url": {"url": PNG}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    body = {"model": "m1", "messages": messages, "tools": tools, "temperature": 0.2}
    _valid_params(list[ChatCompletionMessageParam], messages)
    return body


def chat_body(*, vllm: bool = False) -> dict[str, Any]:
    entries = [
        {"token": f"token_id:{i}", "logprob": -0.5 * i, "bytes": None, "top_logprobs": []}
        for i in (11, 12, 13)
    ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": TEXT,
            "reasoning_content": "think",
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "cat a.txt"}'},
                },
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "b"}'},
                },
            ],
        },
        "finish_reason": "tool_calls",
        "logprobs": {"content": entries},
    }
    if vllm:
        choice["token_ids"] = [11, 12, 13]
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m1-2025",
        "system_fingerprint": "fp_1",
        "choices": [choice],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 64},
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }
    ChatCompletion.model_validate(body)
    return body


def chat_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream a server sends for `body`: role, pieces of text, call fragments, usage."""
    choice = body["choices"][0]
    top = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")}
    top["object"] = "chat.completion.chunk"
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if "reasoning_content" in choice["message"]:
        deltas += [{"reasoning_content": p} for p in ("th", "ink")]
    text = choice["message"]["content"] or ""
    deltas += [{"content": text[i : i + 5]} for i in range(0, len(text), 5)]
    for index, call in enumerate(choice["message"]["tool_calls"]):
        head = {"index": index, "id": call["id"], "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": call["function"]["name"]}}]})
        args = call["function"]["arguments"]
        for i in range(0, len(args), 4):
            piece = {"index": index, "function": {"arguments": args[i : i + 4]}}
            deltas.append({"tool_calls": [piece]})
    chunks = []
    entries = choice["logprobs"]["content"]
    for i, delta in enumerate(deltas):
        out: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        if i < len(entries):
            out["logprobs"] = {"content": [entries[i]]}
            if "token_ids" in choice:
                out["token_ids"] = [choice["token_ids"][i]]
        chunks.append({**top, "choices": [out], "usage": None})
    last = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
    chunks.append({**top, "choices": [last], "usage": None})
    chunks.append({**top, "choices": [], "usage": body["usage"]})
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    return chunks


def test_chat_request_maps_roles_parts_tool_calls_and_results() -> None:
    parsed = parse_request("chat", chat_request())
    assert parsed.dialect == "chat" and parsed.model == "m1" and parsed.stream is False
    assert _canonical(parsed.messages) == [
        ("system", "Be terse.", [], None, None),
        ("user", "What is in\n[image]", [], None, None),
        ("assistant", None, [("call_1", "bash", {"cmd": "ls"})], None, None),
        ("tool", "a.txt", [], "call_1", "bash"),
    ]
    assert parsed.messages[1]["parts"][1]["uri"].startswith("data-sha256:")
    assert parsed.messages[2]["tool_calls"][0]["type"] == "function"
    assert parsed.params == {"model": "m1", "tools": parsed.tools, "temperature": 0.2}
    assert parsed.tools is not None and parsed.tools[0]["function"]["name"] == "bash"


def test_chat_response_usage_tokens_and_logprobs() -> None:
    out = parse_response("chat", chat_body())
    assert _canonical(out.messages) == [
        (
            "assistant",
            TEXT,
            [("call_2", "bash", {"cmd": "cat a.txt"}), ("call_3", "read", {"path": "b"})],
            None,
            None,
        )
    ]
    assert out.messages[0]["reasoning"] == "think"
    assert (out.finish_reason, out.model, out.response_id) == (
        "tool_calls",
        "m1-2025",
        "chatcmpl-1",
    )
    usage = (out.prompt_tokens, out.completion_tokens, out.cached_tokens, out.reasoning_tokens)
    assert usage == (100, 20, 64, 5)
    # `return_tokens_as_token_ids` spells ids in the logprob entries.
    assert out.token_ids == [11, 12, 13]
    assert out.logprobs == [-5.5, -6.0, -6.5]


def test_chat_response_vllm_token_ids_win() -> None:
    body = chat_body(vllm=True)
    body["choices"][0]["token_ids"] = [7, 8, 9]
    for entry in body["choices"][0]["logprobs"]["content"]:
        entry["token"] = "x"
    out = parse_response("chat", body)
    assert out.token_ids == [7, 8, 9] and out.logprobs == [-5.5, -6.0, -6.5]


# Responses ----------------------------------------------------------------------------------


def responses_request() -> dict[str, Any]:
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Fix it"},
                {"type": "input_image", "image_url": PNG, "detail": "auto"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}]},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"cmd": ["ls"]}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
    ]
    _valid_params(ResponseInputParam, items)
    return {
        "model": "gpt-x",
        "instructions": "You are a coding agent.",
        "input": items,
        "tools": [{"type": "function", "name": "shell", "parameters": {}, "strict": False}],
        "stream": True,
    }


def responses_body() -> dict[str, Any]:
    body = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000.0,
        "model": "gpt-x-2025",
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "output": [
            {
                "type": "reasoning",
                "id": "rs_2",
                "summary": [{"type": "summary_text", "text": "read it"}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": TEXT,
                        "annotations": [],
                        "logprobs": [
                            {"token": "a", "bytes": [97], "logprob": -0.25, "top_logprobs": []}
                        ],
                    }
                ],
            },
            {
                "type": "function_call",
                "id": "fc_2",
                "call_id": "call_2",
                "name": "shell",
                "arguments": '{"cmd": ["cat", "a.txt"]}',
                "status": "completed",
            },
        ],
        "usage": {
            "input_tokens": 300,
            "input_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 0},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 12},
            "total_tokens": 340,
        },
    }
    Response.model_validate(body)
    return body


def responses_events(body: dict[str, Any], *, completed: bool = True) -> list[dict[str, Any]]:
    created = {**copy.deepcopy(body), "status": "in_progress", "output": []}
    del created["usage"]
    events: list[dict[str, Any]] = [{"type": "response.created", "response": created}]
    for index, item in enumerate(body["output"]):
        start = {**copy.deepcopy(item), "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": start})
        if item["type"] == "function_call":
            args = item["arguments"]
            for i in range(0, len(args), 6):
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": args[i : i + 6],
                    }
                )
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for i in range(0, len(text), 5):
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": text[i : i + 5],
                        "logprobs": [],
                    }
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    if completed:
        events.append({"type": "response.completed", "response": body})
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for n, event in enumerate(events):
        event["sequence_number"] = n
        adapter.validate_python(event)
    return events


def test_responses_request_instructions_items_and_outputs() -> None:
    parsed = parse_request("responses", responses_request())
    assert parsed.stream is True and parsed.model == "gpt-x"
    assert _canonical(parsed.messages) == [
        ("system", "You are a coding agent.", [], None, None),
        ("user", "Fix it\n[image]", [], None, None),
        ("assistant", None, [("call_1", "shell", {"cmd": ["ls"]})], None, None),
        ("tool", "a.txt", [], "call_1", "shell"),
    ]
    assert parsed.messages[2]["reasoning"] == "plan"
    assert "input" not in parsed.params and "instructions" not in parsed.params
    assert parsed.params["tools"] == parsed.tools


def test_responses_response_one_turn_usage_and_logprobs() -> None:
    out = parse_response("responses", responses_body())
    assert _canonical(out.messages) == [
        ("assistant", TEXT, [("call_2", "shell", {"cmd": ["cat", "a.txt"]})], None, None)
    ]
    assert out.messages[0]["reasoning"] == "read it"
    assert (out.finish_reason, out.model, out.response_id) == ("completed", "gpt-x-2025", "resp_1")
    usage = (out.prompt_tokens, out.completion_tokens, out.cached_tokens, out.reasoning_tokens)
    assert usage == (300, 40, 200, 12)
    assert out.logprobs == [-0.25] and out.token_ids is None


def test_responses_incomplete_reason_is_the_finish_reason() -> None:
    body = responses_body()
    body["status"] = "incomplete"
    body["incomplete_details"] = {"reason": "max_output_tokens"}
    assert parse_response("responses", body).finish_reason == "max_output_tokens"


# Anthropic messages -------------------------------------------------------------------------


def anthropic_request() -> dict[str, Any]:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at"},
                {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Running ls."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "denied"}],
                    "is_error": True,
                },
                {"type": "text", "text": "try again"},
            ],
        },
    ]
    _valid_params(list[MessageParam], messages)
    system = [{"type": "text", "text": "You are Claude.", "cache_control": {"type": "ephemeral"}}]
    return {"model": "claude-x", "max_tokens": 1024, "system": system, "messages": messages}


def anthropic_body() -> dict[str, Any]:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x-2025",
        "content": [
            {"type": "thinking", "thinking": "Need the file — ok", "signature": "c2ln"},
            {"type": "text", "text": TEXT},
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "cat a.txt"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 42,
            "cache_creation_input_tokens": 20,
            "cache_read_input_tokens": 100,
        },
    }
    AnthropicMessage.model_validate(body)
    return body


def anthropic_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    start = {**copy.deepcopy(body), "content": [], "stop_reason": None}
    start["usage"] = {**body["usage"], "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        empty = {"thinking": {"thinking": "", "signature": ""}, "text": {"text": ""}}
        head = {**block, **empty.get(kind, {"input": {}})}
        events.append({"type": "content_block_start", "index": index, "content_block": head})
        if kind == "thinking":
            text = block["thinking"]
            pieces = [{"type": "thinking_delta", "thinking": text[i : i + 7]} for i in (0, 7, 14)]
            pieces.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            text = block["text"]
            pieces = [
                {"type": "text_delta", "text": text[i : i + 3]} for i in range(0, len(text), 3)
            ]
        else:
            raw = json.dumps(block["input"])
            pieces = [
                {"type": "input_json_delta", "partial_json": raw[i : i + 5]}
                for i in range(0, len(raw), 5)
            ]
        events += [{"type": "content_block_delta", "index": index, "delta": p} for p in pieces]
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": body["usage"]["output_tokens"]}
    events.append({"type": "message_delta", "delta": delta, "usage": usage})
    events.append({"type": "message_stop"})
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    for event in events:
        if event["type"] != "ping":
            adapter.validate_python(event)
    return events


def test_anthropic_request_system_blocks_tool_use_and_results() -> None:
    parsed = parse_request("anthropic", anthropic_request())
    assert _canonical(parsed.messages) == [
        ("system", "You are Claude.", [], None, None),
        ("user", "Look at\n[image]", [], None, None),
        ("assistant", "Running ls.", [("toolu_1", "bash", {"cmd": "ls"})], None, None),
        ("tool", "denied", [], "toolu_1", "bash"),
        ("user", "try again", [], None, None),
    ]
    assert parsed.messages[2]["reasoning"] == "hmm"
    assert parsed.messages[2]["tool_calls"][0]["type"] == "function"
    assert parsed.messages[3]["is_error"] is True
    assert parsed.params == {"model": "claude-x", "max_tokens": 1024}


def test_anthropic_response_usage_counts_cache_in_the_prompt() -> None:
    out = parse_response("anthropic", anthropic_body())
    assert _canonical(out.messages) == [
        ("assistant", TEXT, [("toolu_2", "bash", {"cmd": "cat a.txt"})], None, None)
    ]
    assert out.messages[0]["reasoning"] == "Need the file — ok"
    assert (out.finish_reason, out.model, out.response_id) == ("tool_use", "claude-x-2025", "msg_1")
    usage = (out.prompt_tokens, out.completion_tokens, out.cached_tokens)
    assert usage == (130, 42, 100)


# Bad bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        ("chat", {"model": "m"}),
        ("chat", {"messages": [{"content": "no role"}]}),
        ("chat", {"messages": [{"role": "ipython", "content": "x"}]}),
        ("responses", {"model": "m", "input": 3}),
        ("responses", {"model": "m"}),
        ("anthropic", {"messages": [{"role": "system", "content": "x"}]}),
        ("anthropic", {"messages": [{"role": "user", "content": ["x"]}]}),
        ("nope", {"messages": []}),
    ],
)
def test_bad_requests_raise_value_error(dialect: Any, body: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_request(dialect, body)


@pytest.mark.parametrize("dialect", ["chat", "responses", "anthropic"])
def test_error_bodies_raise_value_error_quoting_the_upstream(dialect: Any) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    with pytest.raises(ValueError, match="busy"):
        parse_response(dialect, error)
    with pytest.raises(ValueError):
        parse_response(dialect, [])  # type: ignore[arg-type]


def test_endpoints_name_every_dialect() -> None:
    assert sorted(ENDPOINTS.values()) == ["anthropic", "chat", "responses"]


# Streams ------------------------------------------------------------------------------------


def sse(events: Iterable[dict[str, Any]], *, named: bool, newline: str = "\n") -> bytes:
    frames = []
    for event in events:
        head = f"event: {event['type']}{newline}" if named else ""
        frames.append(f"{head}data: {json.dumps(event, ensure_ascii=False)}{newline}{newline}")
    if not named:
        frames.append(f"data: [DONE]{newline}{newline}")
    return (": keep-alive" + newline + newline + "".join(frames)).encode()


def assemble(dialect: Any, pieces: Iterable[bytes]) -> dict[str, Any]:
    assembler = StreamAssembler(dialect)
    for piece in pieces:
        assembler.feed(piece)
    return assembler.body()


def streams() -> list[tuple[str, bytes, dict[str, Any]]]:
    chat = chat_body(vllm=True)
    responses = responses_body()
    anthropic = anthropic_body()
    return [
        ("chat", sse(chat_chunks(chat), named=False), chat),
        ("responses", sse(responses_events(responses), named=True), responses),
        ("anthropic", sse(anthropic_events(anthropic), named=True), anthropic),
    ]


@pytest.mark.parametrize(("dialect", "data", "expected"), streams(), ids=lambda v: str(v)[:10])
def test_stream_equals_the_non_stream_body_under_every_split(
    dialect: Any, data: bytes, expected: dict[str, Any]
) -> None:
    assert assemble(dialect, [data]) == expected
    assert parse_response(dialect, assemble(dialect, [data])) == parse_response(dialect, expected)
    for cut in range(len(data) + 1):
        assert assemble(dialect, [data[:cut], data[cut:]]) == expected, cut
    assert assemble(dialect, [data[i : i + 1] for i in range(len(data))]) == expected
    rng = random.Random(7)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(data)), 12))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert assemble(dialect, pieces) == expected


@pytest.mark.parametrize(("dialect", "data", "expected"), streams(), ids=lambda v: str(v)[:10])
def test_stream_with_crlf_framing(dialect: Any, data: bytes, expected: dict[str, Any]) -> None:
    crlf = data.replace(b"\n", b"\r\n")
    assert assemble(dialect, [crlf[i : i + 7] for i in range(0, len(crlf), 7)]) == expected


def test_chat_stream_usage_and_vllm_tokens() -> None:
    out = parse_response(
        "chat", assemble("chat", [sse(chat_chunks(chat_body(vllm=True)), named=False)])
    )
    assert (out.prompt_tokens, out.completion_tokens, out.cached_tokens) == (100, 20, 64)
    assert out.token_ids == [11, 12, 13] and out.logprobs == [-5.5, -6.0, -6.5]


def test_responses_stream_without_completed_uses_items_done() -> None:
    body = responses_body()
    data = sse(responses_events(body, completed=False), named=True)
    out = parse_response("responses", assemble("responses", [data]))
    assert out.messages == parse_response("responses", body).messages
    assert out.prompt_tokens is None  # usage only arrives with the final response


def test_stream_body_is_readable_midway() -> None:
    data = sse(anthropic_events(anthropic_body()), named=True)
    assembler = StreamAssembler("anthropic")
    assembler.feed(data[: len(data) // 2])
    partial = assembler.body()
    assert partial["id"] == "msg_1" and partial["stop_reason"] is None
    assembler.feed(data[len(data) // 2 :])
    assert assembler.body() == anthropic_body()


def test_stream_answered_with_a_json_error_body() -> None:
    error = {"error": {"message": "rate limited", "type": "rate_limit"}}
    body = assemble("chat", [json.dumps(error)[:9].encode(), json.dumps(error)[9:].encode()])
    assert body == error
    with pytest.raises(ValueError, match="rate limited"):
        parse_response("chat", body)


def test_stream_with_malformed_event_data_raises() -> None:
    assembler = StreamAssembler("chat")
    assembler.feed(b"data: {not json}\n\n")
    with pytest.raises(ValueError, match="not JSON"):
        assembler.body()
    with pytest.raises(ValueError):
        StreamAssembler("nope")  # type: ignore[arg-type]
    empty = StreamAssembler("anthropic")
    with pytest.raises(ValueError):
        empty.body()


def test_chat_stream_of_tool_calls_only_has_null_content_like_the_body() -> None:
    body = chat_body()
    body["choices"][0]["message"]["content"] = None
    del body["choices"][0]["message"]["reasoning_content"]
    assert assemble("chat", [sse(chat_chunks(body), named=False)]) == body
