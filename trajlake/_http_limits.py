"""Limits every trajlake HTTP server runs under (`trajlake proxy`, `trajlake serve`): what one
request may send and how slowly, how many requests and connections are served at once, and how
long a shutdown may take. `ServerLimits` holds them; `limits_middleware` answers the refusals
as JSON; `ConnectionGuard` closes slow connections. aiohttp is imported lazily."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

__all__ = [
    "BodyTooLarge",
    "ConnectionGuard",
    "ServerLimits",
    "decoded_limit",
    "limits_middleware",
]

MiB = 1 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
_UNITS |= {"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}
_OPEN_PATHS = frozenset({"/health"})  # health checks are answered even at the in-flight bound


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on what clients may make a server hold (defaults in brackets).

    Attributes:
        max_body_bytes: Largest request body [64 MiB]: real agent requests with long
            transcripts and images reach tens of MB (Anthropic's API caps at 32 MB). 413 past it.
        max_decoded_bytes: Largest decoded size of a gzip/deflate/zstd request body [256 MiB]:
            a compressed body stops decoding there (413), so a small bomb cannot fill memory.
        header_timeout_s: Time for a request's line and headers, from its first byte (from
            the connection's start for its first request) [20 s]; then 408 and closed.
        body_idle_s: Longest silence while a body is still being sent [30 s]; then closed.
        body_timeout_s: Longest time to send a whole body [300 s]; then closed.
        keepalive_s: How long an idle keep-alive connection stays open [75 s].
        max_inflight: Requests handled at once [1024]; more get 429 with Retry-After.
        max_inflight_body_bytes: Sum of the bodies of requests in flight [1 GiB]; a request
            that would pass it gets 429 (bounds memory under many large concurrent bodies).
        max_connections: Open connections [2048, at most the file limit less 64]; past it,
            the connection idle or sending its head longest is closed for the new one.
        shutdown_s: On SIGTERM/stop, how long requests being handled get to finish [10 s];
            slow and idle connections are closed at once.
        retry_after_s: The `Retry-After` of a 429, in whole seconds [1].
    """

    max_body_bytes: int = 64 * MiB
    max_decoded_bytes: int = 256 * MiB
    header_timeout_s: float = 20.0
    body_idle_s: float = 30.0
    body_timeout_s: float = 300.0
    keepalive_s: float = 75.0
    max_inflight: int = 1024
    max_inflight_body_bytes: int = 1024 * MiB
    max_connections: int = 2048
    shutdown_s: float = 10.0
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = int if f.type in ("int", int) else float
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            if kind is int and not isinstance(value, int):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
            if not value > 0:
                raise ValueError(f"{f.name} must be > 0, got {value!r}")
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_inflight_body_bytes ({self.max_inflight_body_bytes}) must be at least "
                f"max_body_bytes ({self.max_body_bytes}): one largest body must fit"
            )

    @classmethod
    def parse(cls, pairs: Iterable[str], base: ServerLimits | None = None) -> ServerLimits:
        """`base` (default: the defaults) with `KEY=VALUE` settings applied.

        Sizes take a unit (`64MiB`, `2GB`, `512k`); durations are seconds.

        Raises:
            ValueError: An unknown key, a value that is not a number, or a bad limit.
        """
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"a limit is KEY=VALUE, got {pair!r}")
            if key not in known:
                raise ValueError(f"unknown limit {key!r}; known: {', '.join(sorted(known))}")
            changes[key] = _value(key, text, known[key].type in ("int", int))
        return replace(base or cls(), **changes)

    def describe(self) -> str:
        """`key=value` of every limit, for logs and help text."""
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


def _value(key: str, text: str, integer: bool) -> int | float:
    if not integer:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number of seconds, got {text!r}") from None
    match = _SIZE.match(text)
    unit = (match.group(2).lower().removesuffix("b") if match else "") or ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"{key} must be an integer (sizes may say KiB, MiB, GiB), got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


class BodyTooLarge(Exception):
    """A request body (as sent, or decoded) is over its limit; answered with 413."""

    def __init__(self, limit: int, what: str = "the request body") -> None:
        super().__init__(f"{what} exceeds {limit} bytes")
        self.limit, self.what = limit, what


# The decoded-size limit of the request being handled: set by the middleware, read by the
# decoders deep in a handler, so that every server's limit reaches them without threading it
# through each call.
_DECODED_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar(
    "trajlake_decoded_limit", default=ServerLimits.max_decoded_bytes
)


def decoded_limit() -> int:
    """The decoded-size limit of the request being handled (the default outside one)."""
    return _DECODED_LIMIT.get()


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Any:
    from aiohttp import web

    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers=headers)


class _Budget:
    """Requests and body bytes in flight, against the limits."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits, self.requests, self.body_bytes = limits, 0, 0

    def take(self, size: int) -> bool:
        limits = self.limits
        if self.requests >= limits.max_inflight:
            return False
        if self.body_bytes + size > limits.max_inflight_body_bytes:
            return False
        self.requests, self.body_bytes = self.requests + 1, self.body_bytes + size
        return True

    def give(self, size: int) -> None:
        self.requests, self.body_bytes = self.requests - 1, self.body_bytes - size


def limits_middleware(limits: ServerLimits) -> Any:
    """The aiohttp middleware that enforces `limits` per request (put it first).

    Answers, as JSON errors: 413 for a body over `max_body_bytes` (at once when declared,
    else when read) or decoding past `max_decoded_bytes`; 429 + Retry-After past
    `max_inflight` / `max_inflight_body_bytes`; 400 for JSON nested too deeply to parse.
    Marks each request on its connection so the connection guard can time its body.
    """
    from aiohttp import web

    budget = _Budget(limits)

    @web.middleware
    async def bounded(request: web.Request, handler: Handler) -> web.StreamResponse:
        finished = request_started(request)
        try:
            response: web.StreamResponse = await _bounded(request, handler, budget)
            return response
        finally:
            finished()

    return bounded


async def _bounded(request: web.Request, handler: Handler, budget: _Budget) -> Any:
    from aiohttp import web

    limits = budget.limits
    declared = request.content_length
    if declared is not None and declared > limits.max_body_bytes:
        return await _refuse_unread(request, _too_large(BodyTooLarge(limits.max_body_bytes)))
    if request.method == "GET" and request.path in _OPEN_PATHS:
        return await handler(request)
    # A body of unknown length (chunked) may be the largest allowed.
    size = declared if declared is not None else limits.max_body_bytes * request.body_exists
    if not budget.take(size):
        return _too_many(budget)
    token = _DECODED_LIMIT.set(limits.max_decoded_bytes)
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        return _too_large(BodyTooLarge(limits.max_body_bytes))
    except BodyTooLarge as e:
        return _too_large(e)
    except RecursionError:
        message = "the body's JSON nests too deeply to parse; flatten it"
        return _error(400, "invalid_request", message)
    except ConnectionResetError:
        if request.transport is not None and not request.transport.is_closing():
            raise
        # The connection was closed (a slow client timed out, or shutdown): nobody reads an
        # answer, and this is no server error to log with a traceback.
        return _error(408, "request_timeout", "the connection closed before the request was read")
    finally:
        _DECODED_LIMIT.reset(token)
        budget.give(size)


def _too_many(budget: _Budget) -> Any:
    limits = budget.limits
    if budget.requests >= limits.max_inflight:
        message = f"the server is at its limit of {limits.max_inflight} requests in flight"
    else:
        message = f"the server holds its limit of {limits.max_inflight_body_bytes} bytes of bodies"
    retry = {"Retry-After": str(limits.retry_after_s)}
    return _error(429, "too_many_requests", message + "; retry later", retry)


def _too_large(e: BodyTooLarge) -> Any:
    option = "max_decoded_bytes" if "decoded" in e.what else "max_body_bytes"
    response = _error(413, "payload_too_large", f"{e} ({option})")
    # The rest of the body is not read: the connection cannot carry another request.
    response.force_close()
    return response


async def _refuse_unread(request: web.Request, response: Any) -> Any:
    """Send `response` and stop reading: a body declared too large is not drained (reading
    and dropping 100 MB costs the loop as much as keeping it)."""
    await response.prepare(request)
    await response.write_eof()
    if request.transport is not None:
        request.transport.close()  # the answer is flushed first; reading stops now
    return response


# --------------------------------------------------------------------------- connections

_TIMEOUT_ANSWER = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_BUSY_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
    b"Content-Length: 0\r\n\r\n"
)


class _Connection(asyncio.Protocol):
    """One client connection: aiohttp's handler behind a watchdog that knows its phase.

    Phases: sending a head (`head_since` set), sending a body (a request whose body has not
    all arrived), handled (a request whose body is in: no client timeout applies, however long
    the upstream takes), idle (keep-alive, aiohttp's `keepalive_timeout`).
    """

    def __init__(self, guard: ConnectionGuard, inner: Any) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.Transport | None = None
        self.request: web.BaseRequest | None = None
        self.head_since: float | None = None
        self.since = self.body_last = 0.0
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.head_since = self.since = self.guard.now()
        if not self.guard.admit(self):
            transport.write(_BUSY_ANSWER)  # type: ignore[attr-defined]
            transport.abort()  # type: ignore[attr-defined]
            return
        self.admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        now, request = self.guard.now(), self.request
        if request is not None and not request.content.is_eof():
            self.body_last = now
        elif self.head_since is None:
            self.head_since = now
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.discard(self)
        self.transport = None
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def started(self, request: web.BaseRequest) -> None:
        self.request, self.head_since = request, None
        self.since = self.body_last = self.guard.now()

    def finished(self) -> None:
        self.request, self.since = None, self.guard.now()
        if self.head_since is not None:  # a pipelined head arrived meanwhile: a fresh window
            self.head_since = self.since

    def overdue(self, now: float, limits: ServerLimits) -> bool:
        if self.request is None:
            return self.head_since is not None and now - self.head_since > limits.header_timeout_s
        if self.request.content.is_eof():
            return False
        return now - self.body_last > limits.body_idle_s or now - self.since > limits.body_timeout_s

    @property
    def evictable(self) -> bool:
        """Idle, or still sending its head: closing it loses no request."""
        return self.request is None

    def close(self, answer: bytes = b"") -> None:
        transport = self.transport
        if transport is None:
            return
        if answer:
            transport.write(answer)  # a few bytes: they go out before the reset
        transport.abort()


class ConnectionGuard:
    """The open connections of one server: admits (at most `max_connections`), times out slow
    heads and bodies, and closes the slow and idle ones at once on shutdown."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.max_connections = min(limits.max_connections, _file_limit() - 64)
        self.connections: dict[Any, _Connection] = {}  # by aiohttp's handler
        self.timed_out = self.evicted = self.refused = 0
        self._loop = asyncio.get_running_loop()
        self._sweeper: asyncio.Task[None] | None = None

    def now(self) -> float:
        return self._loop.time()

    def protocol_factory(self, server: Any) -> Any:
        """An asyncio protocol factory wrapping aiohttp's (`web.Server`, a handler factory)."""
        if self._sweeper is None:
            self._sweeper = self._loop.create_task(self._sweep())
        return lambda: _Connection(self, server())

    def admit(self, connection: _Connection) -> bool:
        if len(self.connections) >= self.max_connections:
            victims = [c for c in self.connections.values() if c.evictable]
            if not victims:
                self.refused += 1
                return False
            oldest = min(victims, key=lambda c: c.head_since or c.since)
            self.evicted += 1
            self.discard(oldest)
            oldest.close(_BUSY_ANSWER)
        self.connections[connection.inner] = _BY_HANDLER[connection.inner] = connection
        return True

    def discard(self, connection: _Connection) -> None:
        if self.connections.get(connection.inner) is connection:
            del self.connections[connection.inner]
        _BY_HANDLER.pop(connection.inner, None)

    async def _sweep(self) -> None:
        limits = self.limits
        tick = min(1.0, limits.header_timeout_s / 4, limits.body_idle_s / 4)
        while True:
            await asyncio.sleep(tick)
            now = self.now()
            for connection in [c for c in self.connections.values() if c.overdue(now, limits)]:
                self.timed_out += 1
                self.discard(connection)
                connection.close(_TIMEOUT_ANSWER)

    def close_waiting(self) -> int:
        """Close every connection not being answered (idle, slow head or slow body) at once."""
        waiting = [
            c
            for c in self.connections.values()
            if c.evictable or c.overdue(float("inf"), self.limits)
        ]
        for connection in waiting:
            self.discard(connection)
            connection.close()
        return len(waiting)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None


# aiohttp's handler -> its guarded connection, for every server in the process (a dict
# operation is atomic, so servers on several threads may share it).
_BY_HANDLER: dict[Any, _Connection] = {}


def request_started(request: web.BaseRequest) -> Any:
    """Tell the request's connection that its head is in; returns its `finished()`."""
    connection = _BY_HANDLER.get(request.protocol)
    if connection is None:
        return lambda: None
    connection.started(request)
    return connection.finished


def _file_limit() -> int:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return 1 << 16
    return soft if soft > 0 else 1 << 16
