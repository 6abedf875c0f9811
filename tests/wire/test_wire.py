"""The shared wire formats: one mapping of chat, Responses, Anthropic and SSE for ingest and proxy.

What matters is that a conversation means the same thing whichever side reads it: the same
inline image gets the same reference from a chat data URI and an Anthropic base64 block, a
Responses turn folds into one assistant message, a stream cut anywhere reassembles to one body,
and the package stays below the layers that use it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys

from trajlake.ingest._adapter import ParsedTrajectory
from trajlake.wire import (
    DIGEST_SCHEME,
    ResponsesMessageBuilder,
    StreamAssembler,
    assistant_message,
    canonical_messages,
    chat_message,
    content_fields,
    text_and_parts,
)
from trajlake.wire.values import as_bool, as_int, as_number, map_status, parse_time

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DIGEST = hashlib.sha256(PIXEL).hexdigest()


def test_one_image_gets_one_reference_from_chat_and_anthropic() -> None:
    data_uri = "data:image/png;base64," + base64.b64encode(PIXEL).decode()
    chat = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": data_uri}}]
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PIXEL).decode()}
    anthropic = [{"type": "text", "text": "look"}, {"type": "image", "source": source}]
    text, chat_parts, _ = content_fields(chat)
    a_text, a_parts = text_and_parts(anthropic)
    assert text == a_text == "look"
    assert chat_parts is not None and a_parts is not None
    assert chat_parts[1]["uri"] == a_parts[1]["uri"] == f"{DIGEST_SCHEME}{DIGEST}"
    assert chat_parts[1]["mime_type"] == a_parts[1]["mime_type"] == "image/png"
    assert base64.b64encode(PIXEL).decode() not in json.dumps([chat_parts, a_parts])


def test_chat_roles_and_legacy_calls_map_to_the_canonical_shape() -> None:
    developer = chat_message({"role": "developer", "content": "be brief"})
    assert developer == {"role": "system", "content": "be brief", "attrs": {"role": "developer"}}
    legacy = chat_message(
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": {}}}
    )
    assert legacy["tool_calls"] == [{"name": "f", "arguments": "{}"}]
    thinking = chat_message({"role": "assistant", "content": "4", "reasoning_content": "2+2"})
    assert thinking["reasoning"] == "2+2"


def test_a_responses_turn_is_one_assistant_message_and_outputs_are_named() -> None:
    builder = ResponsesMessageBuilder()
    builder.add("what is in /tmp?", None)
    builder.flush()
    for item in (
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "ls"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "sh"}
        | {"arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "message", "role": "assistant", "id": "msg_1", "content": "a.txt"},
    ):
        builder.add(item, "gpt-x")
    user, call, output, answer = builder.finish()
    assert user == {"role": "user", "content": "what is in /tmp?"}
    assert call["reasoning"] == "ls" and call["model"] == "gpt-x"
    assert call["tool_calls"] == [
        {"id": "call_1", "name": "sh", "arguments": "{}", "type": "function"}
    ]
    assert call["attrs"] == {"item_ids": ["rs_1", "fc_1"]}
    assert output == {"role": "tool", "content": "a.txt", "tool_call_id": "call_1", "name": "sh"}
    assert answer["content"] == "a.txt" and answer["attrs"] == {"item_ids": ["msg_1"]}


def test_anthropic_tool_results_become_tool_messages() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": False},
            {"type": "text", "text": "go on"},
        ],
    }
    assert canonical_messages(message) == [
        {"role": "tool", "content": "ok", "tool_call_id": "t1", "is_error": False},
        {"role": "user", "content": "go on"},
    ]
    reply = assistant_message(
        [
            {"type": "thinking", "thinking": "hm"},
            {"type": "tool_use", "id": "t2", "name": "sh", "input": {"cmd": "ls"}},
            {"type": "web_search_tool_result"},
        ]
    )
    assert reply["reasoning"] == "hm"
    assert reply["tool_calls"] == [
        {"id": "t2", "name": "sh", "arguments": '{"cmd": "ls"}', "type": "function"}
    ]
    assert reply["attrs"] == {"other_blocks": {"web_search_tool_result": 1}}


def _chat_stream() -> bytes:
    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"content": "日本"}}]},
        {"choices": [{"index": 0, "delta": {"content": "語"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    events = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks)
    return (events + "data: [DONE]\n\n").encode()


def test_a_stream_cut_anywhere_reassembles_to_the_same_body() -> None:
    raw = _chat_stream()
    whole = StreamAssembler("chat")
    whole.feed(raw)
    expected = whole.body()
    assert expected["choices"][0]["message"]["content"] == "日本語"
    assert expected["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}
    for cut in range(1, len(raw)):  # every split point, inside multi-byte characters too
        split = StreamAssembler("chat")
        split.feed(raw[:cut])
        split.feed(raw[cut:])
        assert split.body() == expected


def test_a_tool_call_keeps_its_id_when_later_chunks_send_an_empty_one() -> None:
    def call(delta: dict[str, object]) -> dict[str, object]:
        return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **delta}]}}]}

    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        call({"id": "call_1", "type": "function", "function": {"name": "sh", "arguments": ""}}),
        call({"id": "", "type": "", "function": {"arguments": '{"cmd": '}}),
        call({"id": None, "function": {"arguments": '"ls"}'}}),
    ]
    stream = StreamAssembler("chat")
    stream.feed("".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode())
    (tool_call,) = stream.body()["choices"][0]["message"]["tool_calls"]
    assert tool_call == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "sh", "arguments": '{"cmd": "ls"}'},
    }


def test_values_read_loose_spellings_and_refuse_the_rest() -> None:
    verdicts = [as_bool(v) for v in ("Resolved", "fail", 1, 0.5, None)]
    assert verdicts == [True, False, True, None, None]
    assert as_int(True) is None and as_int(3) == 3
    assert as_number(float("nan")) is None and as_number(2) == 2.0
    assert map_status("Timed-Out") == "timeout" and map_status("weird") is None
    millis = parse_time(1_700_000_000_000)
    assert millis is not None and millis == parse_time("2023-11-14T22:13:20Z")
    assert parse_time("2023-11-14T22:13:20") == millis  # naive is UTC


def test_the_wire_package_imports_no_layer_above_it() -> None:
    code = (
        "import sys, trajlake.wire, trajlake.wire.values;"
        "bad = [m for m in sys.modules if m.startswith(('trajlake.ingest', 'trajlake.proxy',"
        " 'trajlake.lake', 'trajlake.query'))];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_logged_and_a_recorded_chat_become_the_same_messages() -> None:
    # The point of one wire package: a harness's chat log (ingest) and the same conversation
    # recorded by the proxy map through the same code to the same messages.
    from trajlake.ingest._sources import SourceFile
    from trajlake.ingest.openai_messages import OpenAIMessagesAdapter
    from trajlake.proxy import parse_request

    call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    conversation = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "list /tmp"},
        {"role": "assistant", "content": None, "reasoning_content": "use ls", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "assistant", "content": "a.txt"},
    ]
    line = json.dumps({"messages": conversation}).encode() + b"\n"
    (parsed,) = OpenAIMessagesAdapter().read(SourceFile("chat.jsonl", None), io.BytesIO(line))
    assert isinstance(parsed, ParsedTrajectory)
    logged = [m.model_dump(exclude_none=True) for m in parsed.record.messages]
    recorded = parse_request("chat", {"model": "m", "messages": conversation}).messages
    fields = ("role", "content", "reasoning", "tool_calls", "tool_call_id", "name", "attrs")
    for log, live in zip(logged, recorded, strict=True):
        assert {k: log.get(k) for k in fields} == {k: live.get(k) for k in fields}
