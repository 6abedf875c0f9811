"""LLM_PROXY_V2 adapter: the llm-tracelab recordings checked against their header and body."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.llm_proxy import LlmProxyAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "llm_proxy"
PLAIN, STREAM = DATA / "non-stream.http", DATA / "stream.http"


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(LlmProxyAdapter().read(source, stream))


def _one(path: Path) -> CanonicalTrajectory:
    (item,) = _read(path)
    assert isinstance(item, ParsedTrajectory), item
    return normalize(item.record)


def _sections(path: Path) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """(header, request body, response body) of a recording, sliced by its layout."""
    data = path.read_bytes()
    first, _, rest = data.partition(b"\n")
    header = json.loads(first)
    layout = header["layout"]
    body_start = layout["req_header_len"]
    request = json.loads(rest[body_start : body_start + layout["req_body_len"]])
    response = rest[body_start + layout["req_body_len"] + 1 + layout["res_header_len"] :]
    return header, request, response


def _check(path: Path) -> CanonicalTrajectory:
    header, request, _ = _sections(path)
    record = _one(path)
    assert [m.role for m in record.messages] == [m["role"] for m in request["messages"]] + [
        "assistant"
    ]
    assert [m.content for m in record.messages[:-1]] == [m["content"] for m in request["messages"]]
    reply = record.messages[-1]
    usage = header["usage"]
    assert (reply.prompt_tokens, reply.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert record.total_tokens == usage["total_tokens"]
    assert reply.model == header["meta"]["model"] == record.policy_model
    when = dt.datetime.fromisoformat(header["meta"]["time"]).astimezone(dt.UTC)
    assert reply.timestamp == when == record.started_at
    assert record.ended_at == when + dt.timedelta(milliseconds=header["meta"]["duration_ms"])
    assert (record.status, reply.finish_reason) == ("completed", "stop")
    assert record.attrs is not None
    assert record.attrs["request_id"] == header["meta"]["request_id"]
    assert record.attrs["request_params"]["max_completion_tokens"] == 10
    # Of the HTTP headers only the content types are kept (they may carry keys and cookies).
    assert "Set-Cookie" not in json.dumps(record.attrs) and "acw_tc" not in json.dumps(record.attrs)
    assert record.reward is None and record.tools is None
    return record


def test_plain_recording() -> None:
    record = _check(PLAIN)
    _, _, body = _sections(PLAIN)
    message = json.loads(body)["choices"][0]["message"]
    assert record.messages[-1].content == message["content"] == "AI小助手"
    assert record.messages[-1].cached_tokens == 0  # reported as 0 in prompt_tokens_details


def test_streamed_recording_is_reassembled() -> None:
    record = _check(STREAM)
    _, _, body = _sections(STREAM)
    deltas = [
        json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")
    ]
    text = "".join(c["delta"].get("content") or "" for d in deltas for c in d["choices"])
    assert record.messages[-1].content == text == "AI小助手"
    usage = next(d["usage"] for d in deltas if d["usage"])
    assert record.messages[-1].prompt_tokens == usage["prompt_tokens"]
    assert record.attrs is not None and record.attrs["stream"] is True


def _recording(request: dict[str, Any], response: bytes, *, stream: bool, code: int = 200) -> bytes:
    """An LLM_PROXY_V2 file around a request and response body (headers as the proxy writes)."""
    req_body = json.dumps(request).encode()
    req_head = b"POST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer sk-secret\r\n"
    req_head += b"Content-Type: application/json\r\n\r\n"
    res_head = b"HTTP/1.1 %d X\r\nContent-Type: text/event-stream\r\n\r\n" % code
    header = {
        "version": "LLM_PROXY_V2",
        "meta": {"request_id": "r1", "time": "2025-01-01T00:00:00Z", "status_code": code},
        "layout": {
            "req_header_len": len(req_head),
            "req_body_len": len(req_body),
            "res_header_len": len(res_head),
            "res_body_len": len(response),
            "is_stream": stream,
        },
        "usage": {},
    }
    line = json.dumps(header).encode().ljust(2047) + b"\n"
    return line + req_head + req_body + b"\n" + res_head + response


def test_streamed_tool_calls_and_errors(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {}}}]
    request = {
        "model": "m",
        "stream": True,
        "tools": tools,
        "messages": [{"role": "user", "content": "hi"}],
    }
    chunks = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "ls", "arguments": ""},
                            }
                        ],
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]},
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'th": "."}'}}]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}},
    ]
    body = (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )
    path = tmp_path / "call.http"
    path.write_bytes(_recording(request, body, stream=True))
    record = _one(path)
    reply = record.messages[-1]
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls or []] == [
        ("call_1", "ls", '{"path": "."}')
    ]
    assert (reply.finish_reason, reply.prompt_tokens, reply.completion_tokens) == (
        "tool_calls",
        5,
        7,
    )
    assert record.tools == tools and "sk-secret" not in record.model_dump_json()
    error = b'{"error": {"message": "rate limited"}}'
    path.write_bytes(_recording(request, error, stream=True, code=429))
    record = _one(path)
    assert (record.status, record.exit_reason) == ("error", "rate limited")
    assert [m.role for m in record.messages] == ["user"]
    path.write_bytes(_recording(request, body, stream=True)[:-40])
    (item,) = _read(path)
    assert isinstance(item, BadRecord) and "shorter than its layout" in item.error


def test_sniff_is_specific() -> None:
    adapter = LlmProxyAdapter()
    for path in (PLAIN, STREAM):
        source = SourceFile(str(path), os.path.getsize(path))
        assert adapter.sniff(source, read_head(source)) == 1.0
    if SHARED_CORPUS.exists():
        for other in expand_sources([str(SHARED_CORPUS)]):
            score = adapter.sniff(other, read_head(other))
            assert (score >= 0.9) == other.uri.endswith(".http"), other.uri


def test_ingest_and_query(lake: tl.Lake) -> None:
    report = lake.ingest(DATA)  # LICENSE is skipped; SOURCE.txt is no format
    assert report.formats == {"llm-proxy": 2}
    assert (report.added, report.quarantined) == (2, 0)
    rows = lake.sql("SELECT role, count(*) FROM messages GROUP BY role ORDER BY role").rows()
    assert [tuple(r) for r in rows] == [("assistant", 2), ("system", 2)]
    total = lake.sql("SELECT sum(prompt_tokens), sum(completion_tokens) FROM trajectories").rows()
    assert tuple(total[0]) == (38, 6)  # 19 + 3 per call, from the headers' usage
    assert lake.ingest(STREAM, format="llm-proxy").added == 0
