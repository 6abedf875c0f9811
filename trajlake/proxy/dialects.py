"""The proxy's calls in the three wire dialects (chat, Responses, Anthropic) as canonical messages.

`parse_request` reads what a client asked, `parse_response` what came back (a non-stream body;
`StreamAssembler` turns an SSE stream into one). The messages themselves are mapped by
`trajlake.wire`, the same code the log adapters use, so a recorded call and the harness's own
log of it agree; this module adds the request/response envelopes (parameters, usage, token ids,
upstream errors) that only a recorded call has. Pure Python: no HTTP library is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trajlake.schema import Dialect
from trajlake.wire.anthropic import assistant_message, blocks, canonical_messages, text_and_parts
from trajlake.wire.chat import chat_message, name_tool_results
from trajlake.wire.responses import ResponsesMessageBuilder
from trajlake.wire.sse import StreamAssembler
from trajlake.wire.values import as_int, mapping

__all__ = [
    "ENDPOINTS",
    "CallInput",
    "CallOutput",
    "Dialect",
    "StreamAssembler",
    "parse_request",
    "parse_response",
]

ENDPOINTS: dict[str, Dialect] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "anthropic",
}
"""Path → dialect of every endpoint the proxy records."""

# Request keys that hold the history: they become `messages`, the rest is `params`.
_HISTORY_KEYS: dict[str, frozenset[str]] = {
    "chat": frozenset({"messages"}),
    "responses": frozenset({"input", "instructions"}),
    "anthropic": frozenset({"messages", "system"}),
}
_ROLES = frozenset({"system", "user", "assistant", "tool"})
_ANTHROPIC_ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class CallInput:
    """What the client asked: the history as canonical message dicts and the other parameters.

    Attributes:
        dialect: Wire dialect of the request.
        model: Requested model.
        stream: The client asked for an SSE stream.
        messages: Input history as canonical message dicts (`role`, `content`, `tool_calls`,
            `tool_call_id`, `name`, and `parts` / `reasoning` / `attrs` where the source has
            them). Anthropic `system` and Responses `instructions` are a leading system
            message; non-text parts stand in the text as `[image]`, `[audio]`, `[file]`.
        params: The request body without its history keys, verbatim.
        tools: Tool definitions offered, when any.
    """

    dialect: Dialect
    model: str | None
    stream: bool
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    tools: list[dict[str, Any]] | None


@dataclass(frozen=True)
class CallOutput:
    """What came back: the assistant message(s) produced and the call's usage.

    Attributes:
        messages: Canonical assistant message dicts (`content`, `reasoning`, `tool_calls`,
            vendor details in `attrs`).
        finish_reason: Why generation stopped (the dialect's own word).
        prompt_tokens: Input tokens, cache reads and writes included.
        completion_tokens: Output tokens.
        cached_tokens: Input tokens read from the prompt cache.
        reasoning_tokens: Output tokens spent on reasoning, when reported.
        model: Model that answered.
        response_id: The response's id.
        token_ids: Output token ids, when the server returns them (vLLM).
        logprobs: Per-token logprobs of the output, when returned.
    """

    messages: list[dict[str, Any]]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None
    model: str | None
    response_id: str | None
    token_ids: list[int] | None
    logprobs: list[float] | None


def parse_request(dialect: Dialect, body: Mapping[str, Any]) -> CallInput:
    """Read a request body of `dialect` into its canonical history and parameters.

    Args:
        dialect: "chat", "responses" or "anthropic".
        body: The decoded JSON request body.

    Raises:
        ValueError: `dialect` is unknown or `body` is not a request of that dialect.
    """
    body = _checked(dialect, body, "request")
    if dialect == "chat":
        messages = _chat_request(body)
    elif dialect == "responses":
        messages = _responses_request(body)
    else:
        messages = _anthropic_request(body)
    _finish(messages, dialect)
    model, tools = body.get("model"), body.get("tools")
    return CallInput(
        dialect=dialect,
        model=model if isinstance(model, str) else None,
        stream=body.get("stream") is True,
        messages=messages,
        params={k: v for k, v in body.items() if k not in _HISTORY_KEYS[dialect]},
        tools=tools if isinstance(tools, list) and tools else None,
    )


def parse_response(dialect: Dialect, body: Mapping[str, Any]) -> CallOutput:
    """Read a non-stream response body of `dialect` (or an assembled stream).

    Args:
        dialect: "chat", "responses" or "anthropic".
        body: The decoded JSON response body.

    Raises:
        ValueError: `dialect` is unknown or `body` is not a response of that dialect (an
            upstream error body included; its message is quoted).
    """
    body = _checked(dialect, body, "response")
    if dialect == "chat":
        output = _chat_response(body)
    elif dialect == "responses":
        output = _responses_response(body)
    else:
        output = _anthropic_response(body)
    _finish(output.messages, dialect)
    return output


def _checked(dialect: str, body: Any, what: str) -> Mapping[str, Any]:
    if dialect not in _HISTORY_KEYS:
        raise ValueError(f"unknown dialect {dialect!r}: expected chat, responses or anthropic")
    if not isinstance(body, Mapping):
        raise ValueError(f"{dialect} {what}: expected a JSON object, got {type(body).__name__}")
    return body


def _finish(messages: list[dict[str, Any]], dialect: str) -> None:
    """Placeholders for non-text parts, tool-result names, and a check of roles and calls."""
    for m in messages:
        parts = m.get("parts")
        if parts:
            m["content"] = "\n".join(
                str(p.get("text") or "") if p.get("type") == "text" else f"[{p.get('type')}]"
                for p in parts
            )
        if m.get("role") not in _ROLES:
            raise ValueError(f"{dialect}: message role {m.get('role')!r} is not supported")
        for call in m.get("tool_calls") or ():
            if not isinstance(call.get("name"), str):
                raise ValueError(f"{dialect}: a tool call has no function name")
    name_tool_results(messages)


def _error_text(body: Mapping[str, Any]) -> str:
    error = body.get("error")
    if error is None:
        return ""
    message = mapping(error).get("message") if isinstance(error, Mapping) else error
    return f" (upstream error: {message})"


# Chat completions -------------------------------------------------------------------------


def _chat_request(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in raw
    ):
        raise ValueError("chat request: 'messages' must be a list of {role, content} objects")
    return [chat_message(m) for m in raw]


def _chat_response(body: Mapping[str, Any]) -> CallOutput:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"chat response: no 'choices'{_error_text(body)}")
    # n > 1: the first choice is the one a harness continues with.
    choice = mapping(next((c for c in choices if mapping(c).get("index", 0) == 0), choices[0]))
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise ValueError("chat response: choices[0] has no 'message' object")
    usage = mapping(body.get("usage"))
    token_ids, logprobs = _chat_tokens(choice)
    return CallOutput(
        messages=[chat_message({**message, "role": message.get("role") or "assistant"})],
        finish_reason=_str(choice.get("finish_reason")),
        prompt_tokens=as_int(usage.get("prompt_tokens")),
        completion_tokens=as_int(usage.get("completion_tokens")),
        cached_tokens=as_int(mapping(usage.get("prompt_tokens_details")).get("cached_tokens")),
        reasoning_tokens=as_int(
            mapping(usage.get("completion_tokens_details")).get("reasoning_tokens")
        ),
        model=_str(body.get("model")),
        response_id=_str(body.get("id")),
        token_ids=token_ids,
        logprobs=logprobs,
    )


def _chat_tokens(choice: Mapping[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    """vLLM's `choices[].token_ids`, else ids spelled `token_id:N` in `logprobs.content`."""
    entries = mapping(choice.get("logprobs")).get("content")
    entries = [mapping(e) for e in entries] if isinstance(entries, list) else []
    values = [e.get("logprob") for e in entries]
    numeric = bool(values) and all(isinstance(v, (int, float)) for v in values)
    logprobs = [float(v) for v in values] if numeric else None
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids and all(as_int(i) is not None for i in ids):
        return list(ids), logprobs
    tokens = [e.get("token") for e in entries]
    if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            return [int(str(t)[len("token_id:") :]) for t in tokens], logprobs
        except ValueError:
            pass
    return None, logprobs


# Responses --------------------------------------------------------------------------------


def _responses_request(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    server_side = any(body.get(k) for k in ("previous_response_id", "conversation", "prompt"))
    if raw is None and not server_side:
        raise ValueError("responses request: no 'input' (a string or a list of items)")
    if raw is not None and not isinstance(raw, (str, list)):
        raise ValueError("responses request: 'input' must be a string or a list of items")
    builder = ResponsesMessageBuilder()
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        builder.messages.append({"role": "system", "content": instructions})
    items = [*(instructions if isinstance(instructions, list) else [])]
    items += [raw] if isinstance(raw, str) else list(raw or [])
    try:
        for item in items:
            builder.add(item, None)
    except TypeError as e:
        raise ValueError(f"responses request: {e}") from None
    return builder.finish()


def _responses_response(body: Mapping[str, Any]) -> CallOutput:
    output = body.get("output")
    if body.get("object", "response") != "response" or not isinstance(output, list):
        raise ValueError(f"responses response: no 'output' list{_error_text(body)}")
    model = _str(body.get("model"))
    builder = ResponsesMessageBuilder()
    try:
        for item in output:
            builder.add(item, model)
    except TypeError as e:
        raise ValueError(f"responses response: {e}") from None
    usage = mapping(body.get("usage"))
    status = _str(body.get("status"))
    reason = _str(mapping(body.get("incomplete_details")).get("reason"))
    logprobs = [
        float(lp["logprob"])
        for item in output
        for part in (mapping(item).get("content") or ())
        for lp in (mapping(part).get("logprobs") or ())
        if isinstance(mapping(lp).get("logprob"), (int, float))
    ]
    return CallOutput(
        messages=builder.finish(),
        finish_reason=reason if status == "incomplete" and reason else status,
        prompt_tokens=as_int(usage.get("input_tokens")),
        completion_tokens=as_int(usage.get("output_tokens")),
        cached_tokens=as_int(mapping(usage.get("input_tokens_details")).get("cached_tokens")),
        reasoning_tokens=as_int(
            mapping(usage.get("output_tokens_details")).get("reasoning_tokens")
        ),
        model=model,
        response_id=_str(body.get("id")),
        token_ids=None,
        logprobs=logprobs or None,
    )


# Anthropic messages -----------------------------------------------------------------------


def _anthropic_request(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not all(
        isinstance(m, Mapping)
        and m.get("role") in _ANTHROPIC_ROLES
        and isinstance(m.get("content"), (str, list))
        for m in raw
    ):
        raise ValueError(
            "anthropic request: 'messages' must be a list of {role: user|assistant, content}"
        )
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise ValueError("anthropic request: 'system' must be a string or a list of text blocks")
    text = system if isinstance(system, str) else text_and_parts(system)[0]
    if text:
        messages.append({"role": "system", "content": text})
    for m in raw:
        messages.extend(canonical_messages(m))
    return messages


def _anthropic_response(body: Mapping[str, Any]) -> CallOutput:
    content = body.get("content")
    if body.get("type", "message") != "message" or not isinstance(content, list):
        raise ValueError(f"anthropic response: no 'content' list{_error_text(body)}")
    usage = mapping(body.get("usage"))
    fresh = as_int(usage.get("input_tokens"))
    write = as_int(usage.get("cache_creation_input_tokens"))
    read = as_int(usage.get("cache_read_input_tokens"))
    # Anthropic reports cache reads and writes apart from `input_tokens`; the prompt is all three.
    prompt = None if fresh is None else fresh + (write or 0) + (read or 0)
    return CallOutput(
        messages=[assistant_message(blocks(content))],
        finish_reason=_str(body.get("stop_reason")),
        prompt_tokens=prompt,
        completion_tokens=as_int(usage.get("output_tokens")),
        cached_tokens=read,
        reasoning_tokens=as_int(mapping(usage.get("output_tokens_details")).get("thinking_tokens")),
        model=_str(body.get("model")),
        response_id=_str(body.get("id")),
        token_ids=None,
        logprobs=None,
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
