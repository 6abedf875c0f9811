"""SSE streams of the three dialects reassembled into the equivalent non-stream response body.

A streamed call and a plain one must be recorded alike, so a stream is not mapped to messages
itself: it is folded back into the body the same call would have returned without `stream`,
and that body goes through the one response mapping of its dialect. Bytes may arrive split
anywhere (inside a line, a multi-byte character or an event); only whole lines are decoded, so
the result does not depend on how the stream was cut.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from trajlake.schema import Dialect

__all__ = ["StreamAssembler"]

_DIALECTS = ("chat", "responses", "anthropic")
# Kept only until the first SSE event: an upstream error answers a stream request with plain JSON.
_RAW_LIMIT = 1 << 20
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_START_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})


class StreamAssembler:
    """Reassembles an SSE stream of one dialect into the body a non-stream call would return.

    Feed the raw bytes in any pieces; `body()` may be called at any time and reflects what has
    arrived. A stream request answered with a plain JSON body (an upstream error) yields that
    body. Chat: deltas merged per choice (tool-call arguments by index, logprobs and vLLM
    token ids concatenated), the usage chunk kept. Responses: the `response.completed` (or
    incomplete / failed) event's response, else the created response with the
    `output_item.done` items. Anthropic: `message_start` plus block starts and deltas
    (text, thinking, signature, input JSON, citations) plus `message_delta` stop reason and usage.
    """

    def __init__(self, dialect: Dialect) -> None:
        """Start an empty stream of `dialect` ("chat", "responses" or "anthropic")."""
        if dialect not in _DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}: expected chat, responses or anthropic")
        self.dialect = dialect
        self._buffer = b""
        self._raw = bytearray()
        self._data: list[str] = []
        self._event: str | None = None
        self._events = 0
        self._bad: list[str] = []
        self._state: _Chat | _Responses | _Anthropic
        if dialect == "chat":
            self._state = _Chat()
        else:
            self._state = _Responses() if dialect == "responses" else _Anthropic()

    def feed(self, chunk: bytes) -> None:
        """Add the next bytes of the stream (any split: partial lines, several events)."""
        if not self._events and len(self._raw) < _RAW_LIMIT:
            self._raw += chunk[: _RAW_LIMIT - len(self._raw)]
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line.decode("utf-8", errors="replace").removesuffix("\r"))

    def body(self) -> dict[str, Any]:
        """The assembled response body (same shape as the dialect's non-stream response).

        Raises:
            ValueError: nothing parseable arrived, or an event's data was not JSON.
        """
        pending = copy.deepcopy(self)  # a trailing partial line/event is read on a copy
        if pending._buffer:
            pending._line(pending._buffer.decode("utf-8", errors="replace").removesuffix("\r"))
        pending._dispatch()
        if pending._bad:
            raise ValueError(f"{self.dialect} stream: {pending._bad[0]}")
        if not pending._events:
            return _plain_json(bytes(self._raw), self.dialect)
        return pending._state.body()

    def _line(self, line: str) -> None:
        if not line:
            self._dispatch()
        elif line.startswith(":"):
            return  # comment / keep-alive
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value

    def _dispatch(self) -> None:
        data, event = "\n".join(self._data), self._event
        self._data, self._event = [], None
        if not data or data == "[DONE]":
            return
        self._events += 1
        try:
            payload = json.loads(data)
        except ValueError:
            self._bad.append(f"event {self._events} data is not JSON: {data[:80]!r}")
            return
        if isinstance(payload, dict):
            self._state.add(payload, event)


def _plain_json(raw: bytes, dialect: str) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{dialect} stream: no SSE event and not a JSON body") from None
    if not isinstance(value, dict):
        raise ValueError(f"{dialect} stream: no SSE event and not a JSON object")
    return value


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class _Chat:
    """Chat-completions chunks merged into one `chat.completion` body."""

    def __init__(self) -> None:
        self.top: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.calls: dict[int, dict[int, dict[str, Any]]] = {}

    def add(self, chunk: dict[str, Any], event: str | None) -> None:
        if "error" in chunk and "choices" not in chunk:
            self.top["error"] = chunk["error"]
            return
        for key, value in chunk.items():
            if key not in ("choices", "object") and value is not None:
                self.top[key] = value
        for raw in chunk.get("choices") or ():
            choice = _map(raw)
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            self._choice(index, choice)

    def _choice(self, index: int, choice: Mapping[str, Any]) -> None:
        out = self.choices.setdefault(index, {"index": index, "message": {}, "finish_reason": None})
        message = out["message"]
        delta = _map(choice.get("delta"))
        for key, value in delta.items():
            if key == "tool_calls":
                for call in value or ():
                    self._call(index, _map(call))
            elif isinstance(value, str) and key != "role":
                message[key] = message.get(key, "") + value
            elif value is not None:
                message[key] = value
        if choice.get("finish_reason") is not None:
            out["finish_reason"] = choice["finish_reason"]
        logprobs = _map(choice.get("logprobs"))
        for key in ("content", "refusal"):
            if isinstance(logprobs.get(key), list):
                merged = out.setdefault("logprobs", {}).setdefault(key, [])
                merged.extend(logprobs[key])
        if isinstance(choice.get("token_ids"), list):  # vLLM `return_token_ids`
            out.setdefault("token_ids", []).extend(choice["token_ids"])

    def _call(self, choice: int, delta: Mapping[str, Any]) -> None:
        calls = self.calls.setdefault(choice, {})
        index = delta.get("index")
        index = index if isinstance(index, int) else len(calls)
        call = calls.setdefault(index, {"function": {"arguments": ""}})
        for key in ("id", "type"):
            # The first non-empty value wins: some servers repeat the key with "" (or null) on
            # every later chunk of the call, which must not erase the id the client will answer.
            if delta.get(key) not in (None, "") and not call.get(key):
                call[key] = delta[key]
        function = _map(delta.get("function"))
        if function.get("name") is not None:
            call["function"]["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            call["function"]["arguments"] += function["arguments"]

    def body(self) -> dict[str, Any]:
        choices = []
        for index in sorted(self.choices):
            choice = copy.deepcopy(self.choices[index])
            message = {"role": "assistant", "content": None, **choice["message"]}
            calls = self.calls.get(index)
            if calls:
                ordered = [calls[i] for i in sorted(calls)]
                message["tool_calls"] = [{"type": "function", "id": None, **c} for c in ordered]
                # Streams open with `content: ""`; a non-stream tool-call answer has null there.
                message["content"] = message["content"] or None
            choice["message"] = message
            choices.append(choice)
        return {**self.top, "object": "chat.completion", "choices": choices}


class _Responses:
    """Responses events: the final response when sent, else the items done so far."""

    def __init__(self) -> None:
        self.base: dict[str, Any] = {}
        self.final: dict[str, Any] | None = None
        self.items: dict[int, Any] = {}
        self.error: Any = None

    def add(self, event: dict[str, Any], name: str | None) -> None:
        kind = event.get("type", name)
        response = event.get("response")
        if kind in _FINAL_EVENTS and isinstance(response, dict):
            self.final = response
        elif kind in _START_EVENTS and isinstance(response, dict):
            self.base = response
        elif kind == "response.output_item.done":
            index = event.get("output_index")
            self.items[index if isinstance(index, int) else len(self.items)] = event.get("item")
        elif kind == "error":
            self.error = {k: v for k, v in event.items() if k not in ("type", "sequence_number")}

    def body(self) -> dict[str, Any]:
        if self.final is not None:
            return copy.deepcopy(self.final)
        body = {**copy.deepcopy(self.base), "object": "response"}
        body["output"] = [copy.deepcopy(self.items[i]) for i in sorted(self.items)]
        if self.error is not None:
            body["error"] = self.error
        return body


class _Anthropic:
    """Anthropic message events: blocks built from their starts and deltas."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, str] = {}
        self.error: Any = None

    def add(self, event: dict[str, Any], name: str | None) -> None:
        kind = event.get("type", name)
        index = event.get("index")
        if kind == "message_start":
            self.message = dict(_map(event.get("message")))
        elif kind == "content_block_start" and isinstance(index, int):
            self.blocks[index] = dict(_map(event.get("content_block")))
        elif kind == "content_block_delta" and isinstance(index, int):
            self._delta(self.blocks.setdefault(index, {}), index, _map(event.get("delta")))
        elif kind == "message_delta":
            self.message.update(_map(event.get("delta")))
            usage = {k: v for k, v in _map(event.get("usage")).items() if v is not None}
            self.message["usage"] = {**_map(self.message.get("usage")), **usage}
        elif kind == "error":
            self.error = event.get("error")

    def _delta(self, block: dict[str, Any], index: int, delta: Mapping[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "input_json_delta":
            self.json[index] = self.json.get(index, "") + str(delta.get("partial_json", ""))
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def body(self) -> dict[str, Any]:
        body = copy.deepcopy(self.message)
        blocks = [copy.deepcopy(self.blocks[i]) for i in sorted(self.blocks)]
        for i, block in zip(sorted(self.blocks), blocks, strict=True):
            text = self.json.get(i)
            if text is None:
                continue
            try:
                block["input"] = json.loads(text) if text.strip() else {}
            except ValueError:  # a cut stream: keep what arrived
                block["input"] = {"_partial_json": text}
        body["content"] = blocks
        if self.error is not None:
            body["error"] = self.error
            body["type"] = "error"
        return body
