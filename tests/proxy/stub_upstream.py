"""A scriptable local model server for proxy tests: OpenAI chat completions, OpenAI Responses and
Anthropic messages, streamed (SSE framed as the real services frame it) or not, with faults.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NamedTuple

from aiohttp import web
from multidict import CIMultiDict

Dialect = Literal["chat", "responses", "anthropic"]
ENDPOINTS: dict[str, Dialect] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "anthropic",
}
PIECE_CHARS = 4
"""Text is cut into pieces of this many characters: one piece is one token and one stream delta."""


@dataclass(frozen=True)
class Reply:
    """One assistant turn: text, tool calls `(name, arguments)`, optional reasoning."""

    text: str = ""
    tool_calls: Sequence[tuple[str, Mapping[str, Any]]] = ()
    reasoning: str = ""
    truncated: bool = False
    """Stop as if the token limit was hit (finish_reason length / max_tokens / incomplete)."""
    cached_tokens: int = 0


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error; `body=None` sends the dialect's own error shape."""

    status: int = 500
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Stall for `seconds` (before the response, or after `after_chunks` stream events), then
    answer with `reply`."""

    seconds: float
    after_chunks: int | None = None
    reply: Reply = Reply(text="late answer")


@dataclass(frozen=True)
class Disconnect:
    """Close the connection after `after_chunks` stream events (a non-stream call gets nothing)."""

    after_chunks: int = 1
    reply: Reply = Reply(text="an answer that is cut off before it ends")


Step = Reply | Fail | Hang | Disconnect


class Received(NamedTuple):
    """One request as the stub saw it (headers look up without regard to case)."""

    path: str
    headers: CIMultiDict[str]
    body: Any


def pieces(text: str) -> list[str]:
    """The token pieces of `text` (see `PIECE_CHARS`)."""
    return [text[i : i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def prompt_tokens(dialect: Dialect, body: Mapping[str, Any]) -> int:
    """Usage the stub reports for a request: all characters of strings in the history, // 4."""
    keys = ("input", "instructions") if dialect == "responses" else ("messages", "system")
    return sum(len(s) for key in keys for s in _strings(body.get(key))) // 4


def _is_assistant_item(item: Any) -> bool:
    if not isinstance(item, Mapping):
        return False
    kind = item.get("type", "message")
    return kind in ("function_call", "reasoning") or (
        kind == "message" and item.get("role") == "assistant"
    )


def assistant_turns(dialect: Dialect, body: Mapping[str, Any]) -> int:
    """Assistant turns already in a request's history (Responses: runs of model-made items)."""
    if dialect != "responses":
        return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
    items = body.get("input")
    flags = [_is_assistant_item(i) for i in items] if isinstance(items, list) else []
    return sum(1 for k, flag in enumerate(flags) if flag and (k == 0 or not flags[k - 1]))


@dataclass
class _Turn:
    """A reply made concrete for one request: ids, serialized calls, tokens and usage."""

    dialect: Dialect
    body: Mapping[str, Any]
    reply: Reply
    n: int
    with_ids: bool
    calls: list[tuple[str, str, str, Mapping[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        prefix = "toolu_stub" if self.dialect == "anthropic" else "call_stub"
        for i, (name, args) in enumerate(self.reply.tool_calls):
            self.calls.append((f"{prefix}{self.n}_{i}", name, json.dumps(dict(args)), args))

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "stub-model")

    @property
    def tokens(self) -> list[str]:
        out = pieces(self.reply.reasoning) + pieces(self.reply.text)
        return out + [p for _, _, args, _ in self.calls for p in pieces(args)]

    @property
    def prompt(self) -> int:
        return prompt_tokens(self.dialect, self.body)

    @property
    def completion(self) -> int:
        return max(1, len(self.tokens))

    @property
    def reasoning_tokens(self) -> int:
        return len(pieces(self.reply.reasoning))


def token_id(piece: str) -> int:
    """The stub's token id for a piece (stable across runs)."""
    return zlib.crc32(piece.encode()) % 100_000


def logprob_entry(piece: str) -> dict[str, Any]:
    """An OpenAI `logprobs.content[]` entry for a piece; the logprob is a function of its id."""
    return {
        "token": piece,
        "logprob": -(token_id(piece) % 100) / 100,
        "bytes": list(piece.encode()),
        "top_logprobs": [],
    }


def _sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


# --- OpenAI chat completions ---------------------------------------------------------------


def _chat_usage(turn: _Turn) -> dict[str, Any]:
    return {
        "prompt_tokens": turn.prompt,
        "completion_tokens": turn.completion,
        "total_tokens": turn.prompt + turn.completion,
        "prompt_tokens_details": {"cached_tokens": turn.reply.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
    }


def _chat_finish(turn: _Turn) -> str:
    if turn.reply.truncated:
        return "length"
    return "tool_calls" if turn.calls else "stop"


def _chat_ids(turn: _Turn, tokens: list[str]) -> dict[str, Any]:
    """vLLM's extras on a choice: the generated token ids and their logprobs."""
    if not turn.with_ids:
        return {}
    return {
        "token_ids": [token_id(p) for p in tokens],
        "logprobs": {"content": [logprob_entry(p) for p in tokens]},
    }


def chat_body(turn: _Turn) -> dict[str, Any]:
    """A non-stream `chat.completion` body."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.reply.text if turn.reply.text or not turn.calls else None,
        "refusal": None,
    }
    if turn.reply.reasoning:
        message["reasoning_content"] = turn.reply.reasoning
    if turn.calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args, _ in turn.calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _chat_finish(turn)}
    choice.update(_chat_ids(turn, turn.tokens))
    return {
        "id": f"chatcmpl-stub{turn.n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": turn.model,
        "system_fingerprint": None,
        "choices": [choice],
        "usage": _chat_usage(turn),
    }


def chat_events(turn: _Turn) -> list[bytes]:
    """`chat.completion.chunk` events, a usage chunk if asked for, then `[DONE]`."""
    options = turn.body.get("stream_options") or {}
    usage = bool(options.get("include_usage"))
    head: dict[str, Any] = {"id": f"chatcmpl-stub{turn.n}", "object": "chat.completion.chunk"}
    head |= {"created": int(time.time()), "model": turn.model, "system_fingerprint": None}

    def chunk(delta: dict[str, Any], finish: str | None = None, piece: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        choice.update(_chat_ids(turn, [piece]) if piece is not None else {})
        return _sse(head | {"choices": [choice]} | ({"usage": None} if usage else {}))

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    out += [chunk({"reasoning_content": p}, piece=p) for p in pieces(turn.reply.reasoning)]
    out += [chunk({"content": p}, piece=p) for p in pieces(turn.reply.text)]
    for i, (cid, name, args, _) in enumerate(turn.calls):
        function = {"name": name, "arguments": ""}
        out.append(
            chunk(
                {"tool_calls": [{"index": i, "id": cid, "type": "function", "function": function}]}
            )
        )
        for p in pieces(args):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}, piece=p))
    out.append(chunk({}, _chat_finish(turn)))
    if usage:
        out.append(_sse(head | {"choices": [], "usage": _chat_usage(turn)}))
    return [*out, _sse("[DONE]")]


# --- OpenAI Responses ------------------------------------------------------------------------


def _responses_items(turn: _Turn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.reply.reasoning:
        summary = [{"type": "summary_text", "text": turn.reply.reasoning}]
        items.append({"id": f"rs_stub{turn.n}", "type": "reasoning", "summary": summary})
    if turn.reply.text or not turn.calls:
        part = {"type": "output_text", "text": turn.reply.text, "annotations": [], "logprobs": []}
        items.append(
            {"id": f"msg_stub{turn.n}", "type": "message", "status": "completed"}
            | {"role": "assistant", "content": [part]}
        )
    for i, (cid, name, args, _) in enumerate(turn.calls):
        items.append(
            {"id": f"fc_stub{turn.n}_{i}", "type": "function_call", "status": "completed"}
            | {"call_id": cid, "name": name, "arguments": args}
        )
    return items


def responses_body(turn: _Turn, *, done: bool = True) -> dict[str, Any]:
    """A `response` object: finished (the non-stream body) or as `response.created` shows it."""
    status = ("incomplete" if turn.reply.truncated else "completed") if done else "in_progress"
    body = turn.body
    usage = {
        "input_tokens": turn.prompt,
        "input_tokens_details": {"cached_tokens": turn.reply.cached_tokens},
        "output_tokens": turn.completion,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.prompt + turn.completion,
    }
    incomplete = {"reason": "max_output_tokens"} if done and turn.reply.truncated else None
    return {
        "id": f"resp_stub{turn.n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": turn.model,
        "output": _responses_items(turn) if done else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "usage": usage if done else None,
        "metadata": body.get("metadata") or {},
    }


def _item_events(k: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The events that stream output item `k` (added, deltas, done)."""
    where = {"item_id": item["id"], "output_index": k}
    if item["type"] == "reasoning":
        text = item["summary"][0]["text"]
        at = where | {"summary_index": 0}
        added = item | {"summary": []}
        part = {"type": "summary_text", "text": text}
        middle = [("response.reasoning_summary_part.added", at | {"part": part | {"text": ""}})]
        middle += [
            ("response.reasoning_summary_text.delta", at | {"delta": p}) for p in pieces(text)
        ]
        middle += [("response.reasoning_summary_text.done", at | {"text": text})]
        middle += [("response.reasoning_summary_part.done", at | {"part": part})]
    elif item["type"] == "message":
        part = item["content"][0]
        at = where | {"content_index": 0}
        added = item | {"status": "in_progress", "content": []}
        middle = [("response.content_part.added", at | {"part": part | {"text": ""}})]
        middle += [
            ("response.output_text.delta", at | {"delta": p, "logprobs": []})
            for p in pieces(part["text"])
        ]
        middle += [("response.output_text.done", at | {"text": part["text"], "logprobs": []})]
        middle += [("response.content_part.done", at | {"part": part})]
    else:
        added = item | {"status": "in_progress", "arguments": ""}
        args = item["arguments"]
        middle = [
            ("response.function_call_arguments.delta", where | {"delta": p}) for p in pieces(args)
        ]
        middle += [
            (
                "response.function_call_arguments.done",
                where | {"arguments": args, "name": item["name"]},
            )
        ]
    return [
        ("response.output_item.added", {"output_index": k, "item": added}),
        *middle,
        ("response.output_item.done", {"output_index": k, "item": item}),
    ]


def responses_events(turn: _Turn) -> list[bytes]:
    """`response.created` … `response.completed` (or `response.incomplete`), numbered in order."""
    start = responses_body(turn, done=False)
    final = responses_body(turn)
    events = [
        ("response.created", {"response": start}),
        ("response.in_progress", {"response": start}),
    ]
    for k, item in enumerate(final["output"]):
        events += _item_events(k, item)
    events.append((f"response.{final['status']}", {"response": final}))
    return [
        _sse({"type": kind, "sequence_number": i} | data, kind)
        for i, (kind, data) in enumerate(events)
    ]


# --- Anthropic messages ----------------------------------------------------------------------


def _anthropic_stop(turn: _Turn) -> str:
    if turn.reply.truncated:
        return "max_tokens"
    return "tool_use" if turn.calls else "end_turn"


def _anthropic_blocks(turn: _Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.reply.reasoning:
        signature = f"stub-signature-{turn.n}"
        blocks.append(
            {"type": "thinking", "thinking": turn.reply.reasoning, "signature": signature}
        )
    if turn.reply.text or not turn.calls:
        blocks.append({"type": "text", "text": turn.reply.text})
    for cid, name, _, args in turn.calls:
        blocks.append({"type": "tool_use", "id": cid, "name": name, "input": dict(args)})
    return blocks


def _anthropic_usage(turn: _Turn, output_tokens: int) -> dict[str, Any]:
    # Anthropic counts cache reads apart from input_tokens, unlike OpenAI's prompt_tokens.
    return {
        "input_tokens": turn.prompt - turn.reply.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": turn.reply.cached_tokens,
        "output_tokens": output_tokens,
    }


def anthropic_body(turn: _Turn, *, done: bool = True) -> dict[str, Any]:
    """A `message` body: finished, or empty as `message_start` carries it."""
    return {
        "id": f"msg_stub{turn.n}",
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": _anthropic_blocks(turn) if done else [],
        "stop_reason": _anthropic_stop(turn) if done else None,
        "stop_sequence": None,
        "usage": _anthropic_usage(turn, turn.completion if done else 1),
    }


def _block_deltas(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A content block as `content_block_start` shows it, and its deltas."""
    if block["type"] == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
        return {"type": "thinking", "thinking": "", "signature": ""}, deltas
    if block["type"] == "text":
        return {"type": "text", "text": ""}, [
            {"type": "text_delta", "text": p} for p in pieces(block["text"])
        ]
    args = json.dumps(block["input"])
    deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(args)]
    return block | {"input": {}}, deltas


def anthropic_events(turn: _Turn) -> list[bytes]:
    """`message_start`, a `ping`, the content blocks, `message_delta` and `message_stop`."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": anthropic_body(turn, done=False)},
        {"type": "ping"},
    ]
    for k, block in enumerate(_anthropic_blocks(turn)):
        start, deltas = _block_deltas(block)
        events.append({"type": "content_block_start", "index": k, "content_block": start})
        events += [{"type": "content_block_delta", "index": k, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": k})
    stop = {"stop_reason": _anthropic_stop(turn), "stop_sequence": None}
    events.append(
        {"type": "message_delta", "delta": stop, "usage": {"output_tokens": turn.completion}}
    )
    events.append({"type": "message_stop"})
    return [_sse(e, e["type"]) for e in events]


# --- the server ------------------------------------------------------------------------------

_BUILDERS = {
    "chat": (chat_body, chat_events),
    "responses": (responses_body, responses_events),
    "anthropic": (anthropic_body, anthropic_events),
}


def _error_body(dialect: Dialect, status: int, message: str) -> dict[str, Any]:
    if dialect == "anthropic":
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class StubUpstream:
    """A scripted upstream. The reply to a request is `script[k]`, k = the assistant turns already
    in its history (the last step repeats past the end), so every conversation walks the script
    on its own; steps queued with `inject` are answered first, one request each, whatever the
    history. Run it in a background thread (`start`/`stop`, or `with`) or mount `make_app()`.

    Args:
        script: the steps, in turn order.
        return_token_ids: add vLLM's `token_ids` and `logprobs` to chat choices (a request can
            also ask with `"return_token_ids": true`).
        models: ids listed by `GET /v1/models`.
        latency_s: wait this long before answering each call.
        chunk_delay_s: wait this long between stream events.
    """

    def __init__(
        self,
        script: Sequence[Step] = (Reply(text="ok"),),
        *,
        return_token_ids: bool = False,
        models: Sequence[str] = ("stub-model",),
        latency_s: float = 0.0,
        chunk_delay_s: float = 0.0,
    ) -> None:
        if not script:
            raise ValueError("script needs at least one step")
        self.script = list(script)
        self.return_token_ids = return_token_ids
        self.models = list(models)
        self.latency_s = latency_s
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[Received] = []
        self.url = ""
        self._injected: list[Step] = []
        self._numbers = itertools.count(1)
        self._closing: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The SDK base URL (OpenAI clients; Anthropic clients take `url`)."""
        return f"{self.url}/v1"

    def inject(self, *steps: Step) -> None:
        """Answer the next requests with these steps, in order, before the script resumes."""
        with self._lock:
            self._injected.extend(steps)

    def step_for(self, dialect: Dialect, body: Mapping[str, Any]) -> Step:
        """The step that answers `body`."""
        with self._lock:
            if self._injected:
                return self._injected.pop(0)
        return self.script[min(assistant_turns(dialect, body), len(self.script) - 1)]

    def make_app(self) -> web.Application:
        """The aiohttp application (to run on a loop of one's own)."""
        app = web.Application()
        for path in ENDPOINTS:
            app.router.add_post(path, self._handle)
        app.router.add_get("/v1/models", self._models)
        return app

    # -- running in a thread ------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> StubUpstream:
        """Serve on `host:port` (0: a free port) from a thread with its own event loop."""
        if self._thread is not None:
            raise RuntimeError("the stub is already running")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(host, port, ready, failure), name="stub-upstream", daemon=True
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving: stalled calls end at once, open connections are closed."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> StubUpstream:
        return self.start() if self._thread is None else self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _serve(
        self, host: str, port: int, ready: threading.Event, failure: list[BaseException]
    ) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._open(host, port))
            except BaseException as e:  # handed to start() to raise in the caller's thread
                failure.append(e)
                return
            finally:
                ready.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    async def _open(self, host: str, port: int) -> None:
        self._closing = asyncio.Event()
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}"

    def _shutdown(self) -> None:
        assert self._loop is not None and self._closing is not None
        self._closing.set()
        self._loop.stop()

    # -- handlers -------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        self.requests.append(Received(request.path, CIMultiDict(request.headers), None))
        if "anthropic-version" in request.headers:
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in self.models
            ]
            first, last = (self.models[0], self.models[-1]) if self.models else (None, None)
            return web.json_response(
                {"data": data, "has_more": False, "first_id": first, "last_id": last}
            )
        listed = [
            {"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in self.models
        ]
        return web.json_response({"object": "list", "data": listed})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        dialect = ENDPOINTS[request.path]
        try:
            body = await request.json()
        except ValueError:
            body = None
        self.requests.append(Received(request.path, CIMultiDict(request.headers), body))
        if not isinstance(body, dict):
            return web.json_response(
                _error_body(dialect, 400, "body is not a JSON object"), status=400
            )
        step = self.step_for(dialect, body)
        await self._pause(self.latency_s)
        if isinstance(step, Fail):
            payload = (
                _error_body(dialect, step.status, "stub failure")
                if step.body is None
                else step.body
            )
            if isinstance(payload, str | bytes):
                return web.Response(status=step.status, body=payload, headers=dict(step.headers))
            return web.json_response(payload, status=step.status, headers=dict(step.headers))
        stream = bool(body.get("stream"))
        stall = isinstance(step, Hang) and (step.after_chunks is None or not stream)
        if stall and await self._pause(step.seconds):  # type: ignore[union-attr]
            return self._abort(request)
        if isinstance(step, Disconnect) and not stream:
            return self._abort(request)
        reply = step if isinstance(step, Reply) else step.reply
        with_ids = self.return_token_ids or bool(body.get("return_token_ids"))
        turn = _Turn(dialect, body, reply, next(self._numbers), with_ids)
        make_body, make_events = _BUILDERS[dialect]
        if not stream:
            return web.json_response(make_body(turn))
        return await self._stream(request, step, make_events(turn))

    async def _stream(
        self, request: web.Request, step: Step, events: list[bytes]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for k, event in enumerate(events):
            if isinstance(step, Disconnect) and k == step.after_chunks:
                return self._abort(request, response)
            if (
                isinstance(step, Hang)
                and k == step.after_chunks
                and await self._pause(step.seconds)
            ):
                return self._abort(request, response)
            if k and await self._pause(self.chunk_delay_s):
                return self._abort(request, response)
            await response.write(event)
        await response.write_eof()
        return response

    async def _pause(self, seconds: float) -> bool:
        """Sleep; True when the stub is shutting down meanwhile (the call should end)."""
        if seconds <= 0:
            return False
        closing = self._closing if self._closing is not None else asyncio.Event()
        try:
            await asyncio.wait_for(closing.wait(), seconds)
        except TimeoutError:
            return False
        return True

    @staticmethod
    def _abort(
        request: web.Request, response: web.StreamResponse | None = None
    ) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.abort()
        return response if response is not None else web.Response(status=499)
