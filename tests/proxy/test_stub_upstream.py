"""The stub upstream is wire-accurate: the official OpenAI and Anthropic SDKs, pointed at it,
parse every reply (text, tool calls, usage, stop reasons), streamed and not, and see its faults
as they would see the real services' faults."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
import requests
from stub_upstream import (
    Disconnect,
    Fail,
    Hang,
    Reply,
    StubUpstream,
    assistant_turns,
    pieces,
    prompt_tokens,
    token_id,
)

TOOLS: Any = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
TOOL_TURN = Reply(
    text="Let me look.",
    tool_calls=[("bash", {"command": "ls -la"}), ("read", {"path": "a.txt", "lines": [1, 2]})],
)
MakeStub = Callable[..., StubUpstream]
SCRIPT = (TOOL_TURN, Reply(text="All done: two files."))
USER: Any = {"role": "user", "content": "List the files and read a.txt, please."}


def _openai(stub: StubUpstream, **options: Any) -> openai.OpenAI:
    options.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=stub.base_url, api_key="sk-test", **options)


def _anthropic(stub: StubUpstream, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stub.url, api_key="sk-ant-test", max_retries=0, **options)


def _completion_tokens(reply: Reply) -> int:
    args = [json.dumps(a) for _, a in reply.tool_calls]
    return len(pieces(reply.reasoning) + pieces(reply.text) + [p for a in args for p in pieces(a)])


def test_chat_tool_conversation_and_what_the_stub_recorded(make_stub: MakeStub) -> None:
    stub = make_stub(*SCRIPT)
    client = _openai(stub)
    history: list[Any] = [USER]
    first = client.chat.completions.create(model="m-1", messages=history, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    calls: list[Any] = list(choice.message.tool_calls or [])
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("bash", {"command": "ls -la"}),
        ("read", {"path": "a.txt", "lines": [1, 2]}),
    ]
    assert first.model == "m-1"
    assert first.usage is not None
    assert first.usage.prompt_tokens == len(USER["content"]) // 4 + len("user") // 4
    assert first.usage.completion_tokens == _completion_tokens(TOOL_TURN)
    history.append(choice.message.model_dump(exclude_none=True))
    history += [{"role": "tool", "tool_call_id": c.id, "content": "a.txt b.txt"} for c in calls]
    second = client.chat.completions.create(model="m-1", messages=history, tools=TOOLS)
    assert second.choices[0].message.content == "All done: two files."
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls is None
    path, headers, body = stub.requests[1]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["messages"] == history and body["tools"] == TOOLS
    assert second.usage is not None and second.usage.prompt_tokens == prompt_tokens("chat", body)


def test_chat_stream_is_assembled_by_the_sdk(make_stub: MakeStub) -> None:
    stub = make_stub(Reply(text="Thinking done.", reasoning="hmm", tool_calls=[("bash", {"a": 1})]))
    client = _openai(stub)
    with client.chat.completions.stream(
        model="m", messages=[USER], stream_options={"include_usage": True}
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Thinking done."
    assert message.tool_calls is not None
    assert message.tool_calls[0].function.arguments == '{"a": 1}'
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.completion_tokens_details is not None
    assert final.usage.completion_tokens_details.reasoning_tokens == 1
    chunks = list(client.chat.completions.create(model="m", messages=[USER], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Thinking done."
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for


def test_sse_framing_is_as_the_services_send_it(stub_upstream: StubUpstream) -> None:
    messages = [USER]
    cases: list[tuple[str, dict[str, Any], bytes]] = [
        ("/v1/chat/completions", {}, b"data: {"),
        ("/v1/responses", {"input": "hi"}, b"event: response.created\ndata: {"),
        ("/v1/messages", {"max_tokens": 9}, b"event: message_start\ndata: {"),
    ]
    for path, extra, first in cases:
        body = {"model": "m", "messages": messages, "stream": True, **extra}
        answer = requests.post(stub_upstream.url + path, json=body, timeout=5)
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        assert answer.content.startswith(first)
        assert answer.content.endswith(b"\n\n")
    assert answer.content.endswith(b'data: {"type": "message_stop"}\n\n')
    chat = requests.post(
        stub_upstream.url + "/v1/chat/completions",
        json={"model": "m", "messages": messages, "stream": True},
        timeout=5,
    )
    assert chat.content.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_token_ids_and_logprobs(make_stub: MakeStub, stream: bool) -> None:
    reply = Reply(text="twelve chars", tool_calls=[("bash", {"x": 1})])
    stub = make_stub(reply, return_token_ids=True)
    client = _openai(stub)
    expected = pieces("twelve chars") + pieces('{"x": 1}')
    if stream:
        chunks = list(client.chat.completions.create(model="m", messages=[USER], stream=True))
        choices = [c.choices[0] for c in chunks]
        ids = [i for c in choices for i in (c.model_extra or {}).get("token_ids", [])]
        entries = [
            e for c in choices if c.logprobs and c.logprobs.content for e in c.logprobs.content
        ]
    else:
        choice = client.chat.completions.create(model="m", messages=[USER]).choices[0]
        ids = (choice.model_extra or {})["token_ids"]
        assert choice.logprobs is not None
        entries = choice.logprobs.content or []
    assert ids == [token_id(p) for p in expected]
    assert [e.token for e in entries] == expected
    assert all(-1 < e.logprob <= 0 for e in entries)


def test_responses_tool_conversation(make_stub: MakeStub) -> None:
    stub = make_stub(*SCRIPT)
    client = _openai(stub)
    tools: Any = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
    first = client.responses.create(model="m", instructions="Be brief.", input=[USER], tools=tools)
    assert first.status == "completed" and first.output_text == "Let me look."
    calls = [item for item in first.output if item.type == "function_call"]
    assert (calls[0].name, json.loads(calls[0].arguments)) == ("bash", {"command": "ls -la"})
    assert first.usage is not None
    assert first.usage.input_tokens == prompt_tokens("responses", stub.requests[0].body)
    assert first.usage.output_tokens == _completion_tokens(TOOL_TURN)
    history: list[Any] = [USER, *(item.model_dump(exclude_none=True) for item in first.output)]
    history += [
        {"type": "function_call_output", "call_id": c.call_id, "output": "ok"} for c in calls
    ]
    second = client.responses.create(model="m", input=history, tools=tools)
    assert second.output_text == "All done: two files."
    assert [item.type for item in second.output] == ["message"]


def test_responses_stream_and_truncation(make_stub: MakeStub) -> None:
    stub = make_stub(Reply(text="A whole answer.", reasoning="plan"))
    client = _openai(stub)
    with client.responses.stream(model="m", input="go") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in kinds
    assert final.output_text == "A whole answer."
    assert [item.type for item in final.output] == ["reasoning", "message"]
    stub.script = [Reply(text="Half an ans", truncated=True)]
    events = list(client.responses.create(model="m", input="go", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "Half an ans"
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == "Half an ans"


def test_anthropic_tool_conversation(make_stub: MakeStub) -> None:
    stub = make_stub(*SCRIPT)
    client = _anthropic(stub)
    first = client.messages.create(
        model="claude-x", max_tokens=256, system="Be brief.", messages=[USER]
    )
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use", "tool_use"]
    uses = [b for b in first.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses][1] == ("read", {"path": "a.txt", "lines": [1, 2]})
    assert first.usage.input_tokens == prompt_tokens("anthropic", stub.requests[0].body)
    assert first.usage.output_tokens == _completion_tokens(TOOL_TURN)
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": "ok"} for u in uses]
    history: list[Any] = [USER, {"role": "assistant", "content": first.content}]
    history.append({"role": "user", "content": results})
    second = client.messages.create(model="claude-x", max_tokens=256, messages=history)
    assert second.stop_reason == "end_turn"
    assert [b.text for b in second.content if b.type == "text"] == ["All done: two files."]
    headers = stub.requests[1].headers
    credential = (
        headers.get("x-api-key") or headers.get("Authorization") or ""
    )  # SDK versions differ
    assert credential.endswith("sk-ant-test") and "anthropic-version" in headers


def test_anthropic_stream_with_thinking_and_cache(make_stub: MakeStub) -> None:
    stub = make_stub(Reply(text="The answer is 4.", reasoning="2 + 2", cached_tokens=3))
    client = _anthropic(stub)
    long_user: Any = {"role": "user", "content": "x" * 40}
    with client.messages.stream(model="c", max_tokens=64, messages=[long_user]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "The answer is 4."
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].type == "thinking" and final.content[0].thinking == "2 + 2"
    assert final.stop_reason == "end_turn"
    assert final.usage.cache_read_input_tokens == 3
    assert final.usage.input_tokens == prompt_tokens("anthropic", {"messages": [long_user]}) - 3
    assert final.usage.output_tokens == _completion_tokens(stub.script[0])  # type: ignore[arg-type]


def test_models_in_both_shapes(make_stub: MakeStub) -> None:
    stub = make_stub(models=["a", "b"])
    assert [m.id for m in _openai(stub).models.list()] == ["a", "b"]
    assert [m.id for m in _anthropic(stub).models.list()] == ["a", "b"]


def test_fail_is_an_api_status_error_in_each_dialect(make_stub: MakeStub) -> None:
    stub = make_stub(Fail(status=500))
    with pytest.raises(openai.APIStatusError) as chat_error:
        _openai(stub).chat.completions.create(model="m", messages=[USER])
    assert chat_error.value.status_code == 500 and "stub failure" in chat_error.value.message
    with pytest.raises(openai.APIStatusError):
        _openai(stub).responses.create(model="m", input="hi", stream=True)
    with pytest.raises(anthropic.APIStatusError) as claude_error:
        _anthropic(stub).messages.create(model="c", max_tokens=8, messages=[USER])
    assert claude_error.value.status_code == 500
    assert claude_error.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "stub failure"},
    }
    stub.script = [Fail(status=429, body={"error": {"message": "slow down"}})]
    with pytest.raises(openai.RateLimitError, match="slow down"):
        _openai(stub).chat.completions.create(model="m", messages=[USER])


def test_injected_steps_come_first_then_the_script(make_stub: MakeStub) -> None:
    stub = make_stub(Reply(text="fine"))
    stub.inject(Fail(status=503, headers={"retry-after": "0"}))
    client = _openai(stub, max_retries=1)  # the SDK retries the 503 and gets the script's answer
    answer = client.chat.completions.create(model="m", messages=[USER])
    assert answer.choices[0].message.content == "fine"
    assert len(stub.requests) == 2
    assert stub.requests[0].body == stub.requests[1].body


def test_hang_makes_the_sdks_time_out(make_stub: MakeStub) -> None:
    stub = make_stub(Hang(30))
    with pytest.raises(openai.APITimeoutError):
        _openai(stub, timeout=0.3).chat.completions.create(model="m", messages=[USER])
    with pytest.raises(anthropic.APITimeoutError):
        _anthropic(stub, timeout=0.3).messages.create(model="c", max_tokens=8, messages=[USER])
    stub.script = [Hang(0.05, reply=Reply(text="late but here"))]
    late = _openai(stub, timeout=5).chat.completions.create(model="m", messages=[USER])
    assert late.choices[0].message.content == "late but here"
    started = time.monotonic()
    stub.stop()  # the two stalled handlers end at once
    assert time.monotonic() - started < 2


def test_hang_mid_stream_times_out_after_the_first_events(make_stub: MakeStub) -> None:
    stub = make_stub(Hang(30, after_chunks=3, reply=Reply(text="abcdefghijkl")))
    seen: list[str] = []
    stream = _openai(stub, timeout=0.3).chat.completions.create(
        model="m", messages=[USER], stream=True
    )
    with pytest.raises(openai.APITimeoutError):
        seen += [c.choices[0].delta.content or "" for c in stream]
    assert seen == []  # the error interrupts the loop before the list is extended
    assert len(stub.requests) == 1


def test_disconnect_mid_stream_and_before_an_answer(make_stub: MakeStub) -> None:
    stub = make_stub(Disconnect(after_chunks=3, reply=Reply(text="abcdefghijklmnop")))
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in _openai(stub).chat.completions.create(model="m", messages=[USER], stream=True):
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "abcdefgh"  # the role chunk, then two pieces
    with pytest.raises(anthropic.APIConnectionError):
        _anthropic(stub).messages.create(model="c", max_tokens=8, messages=[USER])


def test_bad_body_and_turn_counting(stub_upstream: StubUpstream) -> None:
    bad = requests.post(stub_upstream.url + "/v1/messages", data=b"not json", timeout=5)
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    items = [
        USER,
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "more"},
    ]
    assert assistant_turns("responses", {"input": items}) == 2
    assert assistant_turns("responses", {"input": "just text"}) == 0
    chat = {"messages": [USER, {"role": "assistant", "content": "a"}, USER]}
    assert assistant_turns("chat", chat) == 1
    assert prompt_tokens("anthropic", {"system": "12345678", "messages": []}) == 2
    with pytest.raises(ValueError, match="at least one step"):
        StubUpstream([])
