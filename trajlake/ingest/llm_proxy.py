"""LLM_PROXY_V2 `.http` recordings (llm-tracelab): one chat-completions call per file.

Line 1 is a JSON header space-padded to 2047 bytes (`meta`, `layout` with the byte lengths of
the request/response header and body, `usage`); then the raw HTTP request, `\\n`, and the raw
HTTP response, whose body is JSON or, for streams, SSE chunks that are reassembled here. The
trajectory is the request's messages plus the response's assistant message. HTTP headers are
dropped (they carry credentials and cookies); only the content types are kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar

from trajlake.ingest._adapter import Parsed, stable_id, to_parsed
from trajlake.ingest._jsonl_adapter import first_line
from trajlake.ingest._sources import SourceFile
from trajlake.wire.chat import chat_message, name_tool_results
from trajlake.wire.values import as_int, drop_none, mapping, parse_time

_MAGIC = b'{"version":"LLM_PROXY_V'
_LAYOUT = ("req_header_len", "req_body_len", "res_header_len", "res_body_len")
_PARAMS_DROPPED = frozenset({"messages", "tools"})


class LlmProxyAdapter:
    """Reads one LLM_PROXY_V2 recording: one model call, one trajectory."""

    name: ClassVar[str] = "llm-proxy"
    description: ClassVar[str] = "*.http — LLM_PROXY_V2 recording of a chat-completions call"

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure when line 1 is the proxy's JSON header with its layout."""
        if not head.startswith(_MAGIC):
            return 0.0
        header = first_line(head).value
        return 1.0 if isinstance(header, dict) and isinstance(header.get("layout"), dict) else 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory, or one BadRecord naming what is wrong with the file."""
        data = stream.read()
        # json.JSONDecodeError and UnicodeError are ValueErrors: a bad record like the others.
        yield to_parsed(lambda: _record(data), line=1, offset=0, raw=data)


def _sections(data: bytes) -> tuple[dict[str, Any], bytes, bytes, bytes, bytes]:
    """(header, request headers and body, response headers and body), sliced by the layout."""
    first, newline, rest = data.partition(b"\n")
    if not newline:
        raise ValueError("no header line: not an LLM_PROXY recording (truncated file?)")
    header = json.loads(first)
    if not isinstance(header, dict) or not isinstance(header.get("layout"), dict):
        raise ValueError("header line has no 'layout'")
    lengths = [as_int(header["layout"].get(k)) for k in _LAYOUT]
    if any(n is None or n < 0 for n in lengths):
        raise ValueError(f"field 'layout': needs non-negative {', '.join(_LAYOUT)}")
    req_head, req_body, res_head, res_body = (n or 0 for n in lengths)
    body_start = req_head
    # The request is followed by one "\n" before the response status line.
    res_start = req_head + req_body + 1
    if len(rest) < res_start + res_head + res_body:
        raise ValueError(
            f"file shorter than its layout says ({len(rest)} of "
            f"{res_start + res_head + res_body} bytes after the header; truncated?)"
        )
    return (
        header,
        rest[:req_head],
        rest[body_start : body_start + req_body],
        rest[res_start : res_start + res_head],
        rest[res_start + res_head : res_start + res_head + res_body],
    )


def _content_type(head: bytes) -> str | None:
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-type":
            return value.strip()
    return None


def _stream_message(body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(assistant message as an OpenAI dict, response metadata) from SSE chunks."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    meta: dict[str, Any] = {"finish_reason": None}
    for line in body.decode("utf-8").splitlines():
        if not line.startswith("data:"):
            continue  # blank separators, `event:` and `:` comments
        payload = line[5:].strip()
        if payload == "[DONE]" or not payload:
            continue
        chunk = mapping(json.loads(payload))
        for key in ("id", "model", "created", "system_fingerprint"):
            meta[key] = chunk.get(key) or meta.get(key)
        if chunk.get("usage"):
            meta["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or ():
            choice = mapping(choice)
            if choice.get("index", 0) != 0:
                continue  # n > 1: the first choice is the one continued
            delta = mapping(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or ():
                _merge_call(calls, mapping(call))
            meta["finish_reason"] = choice.get("finish_reason") or meta["finish_reason"]
    message = {
        "role": "assistant",
        "content": "".join(text) if text else None,
        "reasoning_content": "".join(reasoning) if reasoning else None,
        "tool_calls": [calls[i] for i in sorted(calls)] or None,
    }
    return drop_none(message), meta


def _merge_call(calls: dict[int, dict[str, Any]], delta: Mapping[str, Any]) -> None:
    """Accumulate one tool-call delta: id/type/name arrive once, arguments in pieces."""
    index = as_int(delta.get("index"))
    index = len(calls) if index is None else index
    call = calls.setdefault(index, {"function": {"name": None, "arguments": ""}})
    for key in ("id", "type"):
        if delta.get(key):
            call[key] = delta[key]
    function = mapping(delta.get("function"))
    if function.get("name"):
        call["function"]["name"] = function["name"]
    if isinstance(function.get("arguments"), str):
        call["function"]["arguments"] += function["arguments"]


def _response(body: bytes, is_stream: bool) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(assistant message or None, response metadata incl. usage/finish_reason/error)."""
    # An upstream error is answered with a JSON body even when a stream was asked for.
    if is_stream and body.lstrip().startswith((b"data:", b"event:", b":")):
        return _stream_message(body)
    response = mapping(json.loads(body)) if body.strip() else {}
    meta = {k: response.get(k) for k in ("id", "model", "created", "usage", "system_fingerprint")}
    error = response.get("error")
    if error is not None:
        meta["error"] = mapping(error).get("message") or json.dumps(error)
    choices = response.get("choices") or ()
    first = mapping(choices[0]) if choices else {}
    meta["finish_reason"] = first.get("finish_reason")
    message = first.get("message")
    return (dict(message) if isinstance(message, Mapping) else None), meta


def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": as_int(usage.get("prompt_tokens")),
        "completion_tokens": as_int(usage.get("completion_tokens")),
        "cached_tokens": as_int(mapping(usage.get("prompt_tokens_details")).get("cached_tokens")),
        "reasoning_tokens": as_int(
            mapping(usage.get("completion_tokens_details")).get("reasoning_tokens")
        ),
    }


def _status(code: int | None, finish: Any, error: str | None) -> str | None:
    if error is not None or (code is not None and not 200 <= code < 300):
        return "error"
    if finish == "length":
        return "truncated"
    return "completed" if finish is not None else None


def _record(data: bytes) -> dict[str, Any]:
    header, req_head, req_body, res_head, res_body = _sections(data)
    meta, layout = mapping(header.get("meta")), mapping(header.get("layout"))
    request = json.loads(req_body) if req_body.strip() else {}
    if not isinstance(request, dict):
        raise TypeError(f"request body: expected a JSON object, got {type(request).__name__}")
    raw_messages = request.get("messages")
    if not isinstance(raw_messages, list):
        raise ValueError("request body has no 'messages' list (not a chat-completions call)")
    assistant, response = _response(res_body, bool(layout.get("is_stream")))
    code = as_int(meta.get("status_code"))
    # The proxy's header usage is its own reading of the response; the body's is the source.
    usage = mapping(response.get("usage")) or mapping(header.get("usage"))
    started = parse_time(meta.get("time"))
    duration = as_int(meta.get("duration_ms"))
    model = response.get("model") or meta.get("model") or request.get("model")
    messages = [chat_message(m) for m in raw_messages]
    if assistant is not None:
        reply = chat_message(assistant)
        reply.update(drop_none(_usage(usage)))
        reply.update(model=model, finish_reason=response.get("finish_reason"), timestamp=started)
        messages.append(drop_none(reply))
    name_tool_results(messages)
    request_id = meta.get("request_id")
    attrs = {
        "request_id": request_id,
        "response_id": response.get("id"),
        "url": meta.get("url"),
        "method": meta.get("method"),
        "status_code": code,
        "duration_ms": duration,
        "ttft_ms": as_int(meta.get("ttft_ms")),
        "stream": layout.get("is_stream"),
        "request_params": {k: v for k, v in request.items() if k not in _PARAMS_DROPPED} or None,
        "request_content_type": _content_type(req_head),
        "response_content_type": _content_type(res_head),
        "total_tokens": as_int(usage.get("total_tokens")),
        "recorder": header.get("version"),
    }
    tools = request.get("tools")
    return drop_none(
        {
            "trajectory_id": stable_id("llm-proxy", request_id, meta.get("time"), meta.get("url"))
            if request_id
            else stable_id("llm-proxy", hashlib.sha256(data).hexdigest()),
            "policy_model": model,
            "started_at": started,
            "ended_at": started + dt.timedelta(milliseconds=duration)
            if started and duration is not None
            else None,
            "status": _status(code, response.get("finish_reason"), response.get("error")),
            "exit_reason": response.get("error") or response.get("finish_reason"),
            "tools": tools if isinstance(tools, list) and tools else None,
            "attrs": drop_none(attrs),
            "messages": messages,
        }
    )
