"""Forwarding for the proxy: relays bytes unchanged, reads decoded copies for the recorder.

Header filtering, body decoding (bounded by the server's decoded-size limit), end-of-stream
detection and the upstream client (aiohttp, imported lazily).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trajlake._http_limits import BodyTooLarge, decoded_limit
from trajlake.proxy.dialects import StreamAssembler
from trajlake.proxy.spool import SpoolError

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

    from trajlake.proxy.recorder import CallTicket

__all__ = [
    "Call",
    "Forwarder",
    "StreamDecoder",
    "StreamEnd",
    "decode_body",
    "error_body",
    "forwarded_request_headers",
    "header_meta",
    "json_copy",
    "json_error",
    "relayed_response_headers",
    "upstream_root",
    "without_lone_surrogates",
]

# RFC 9110 §7.6.1 connection-specific headers, plus those the HTTP client recomputes.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
OWN_HEADER_PREFIX = "x-trajlake-"


def _zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


DECODABLE = frozenset(
    {"gzip", "x-gzip", "deflate", "identity"} | ({"zstd"} if _zstd_available() else set())
)


def upstream_root(url: str) -> str:
    """The upstream's root URL: a trailing `/v1` (an SDK-style base URL) is dropped."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the upstream must be an http(s) URL, got {url!r}")
    root = url.rstrip("/")
    return root.removesuffix("/v1")


def _accept_encoding(value: str) -> str | None:
    """Only codings the recorder can read back: the client still decodes what it asked for."""
    kept = [p for p in value.split(",") if p.split(";")[0].strip().lower() in DECODABLE | {"*"}]
    return ",".join(kept).strip() or None


def forwarded_request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones, Host and the proxy's own `X-Trajlake-*`.

    Authorization, x-api-key, anthropic-*, openai-* and everything else pass unchanged.
    """
    out = []
    for name, value in headers:
        lower = name.lower()
        if lower in _HOP_BY_HOP or lower.startswith(OWN_HEADER_PREFIX):
            continue
        if lower == "accept-encoding":
            narrowed = _accept_encoding(value)
            if narrowed is None:
                continue
            value = narrowed
        out.append((name, value))
    return out


def relayed_response_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's response headers minus hop-by-hop ones (the body bytes stay encoded)."""
    return [(n, v) for n, v in headers if n.lower() not in _HOP_BY_HOP]


class _Decompressor(Protocol):
    def decompress(self, data: bytes) -> bytes: ...


def _decompressor(encoding: str | None) -> _Decompressor | None:
    coding = (encoding or "identity").strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()
    if coding == "zstd" and "zstd" in DECODABLE:
        import zstandard

        decompressor: _Decompressor = zstandard.ZstdDecompressor().decompressobj()
        return decompressor
    raise ValueError(f"cannot decode Content-Encoding {encoding!r}")


def decode_body(data: bytes, encoding: str | None, limit: int | None = None) -> bytes:
    """A decoded copy of a whole body (gzip, deflate, zstd or identity).

    Decoding stops past `limit` bytes (default: the decoded-size limit of the request being
    served, `ServerLimits.max_decoded_bytes`), so a small compressed bomb never inflates.

    Raises:
        BodyTooLarge: The decoded body would exceed `limit`.
        ValueError: The body is corrupt or in a coding that cannot be decoded.
    """
    decompressor = _decompressor(encoding)
    if decompressor is None:
        return data
    limit = decoded_limit() if limit is None else limit
    try:
        if isinstance(decompressor, type(zlib.decompressobj())):
            plain = decompressor.decompress(data, limit + 1)
        else:
            plain = _zstd_bounded(data, limit + 1)
    except Exception as e:  # zlib.error / zstandard.ZstdError: a corrupt body is bad data
        raise ValueError(f"cannot decode the {encoding} body: {e}") from e
    if len(plain) > limit:
        raise BodyTooLarge(limit, f"the decoded ({encoding}) body")
    return plain


def _zstd_bounded(data: bytes, most: int) -> bytes:
    """At most `most` decoded bytes: zstd's one-shot decompressobj has no output bound."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    parts, size = [], 0
    while size < most:
        part = reader.read(min(most - size, 1 << 20))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def json_copy(data: bytes, encoding: str | None) -> tuple[Any, str | None]:
    """(the body parsed as JSON, None) or (its text / None, what went wrong).

    Raises:
        BodyTooLarge: Decoded, the body would exceed the decoded-size limit.
    """
    try:
        plain = decode_body(data, encoding)
    except ValueError as e:
        return None, str(e)
    try:
        return without_lone_surrogates(json.loads(plain), plain), None
    except ValueError as e:
        return plain.decode("utf-8", errors="replace"), f"the body is not JSON: {e}"
    except RecursionError:  # forwarded as sent; the upstream answers it
        return plain.decode("utf-8", errors="replace"), "the body's JSON nests too deeply"


def without_lone_surrogates(value: Any, raw: bytes) -> Any:
    """`value` (parsed from `raw`) with each lone surrogate (`"\\ud800"` in JSON) replaced by
    its escape as text: such a string cannot be written as UTF-8, so it is kept escaped.
    The text is searched once first; bodies without a surrogate escape (`\\uD800`-`\\uDFFF`)
    are returned as they are (an emoji sent as an escaped pair has one, and is whole)."""
    if _SURROGATE_ESCAPE.search(raw) is None:
        return value
    return _escape_lone(value)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _escape_lone(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode() if _lone(value) else value
    if isinstance(value, dict):
        return {_escape_lone(k): _escape_lone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_lone(v) for v in value]
    return value


def _lone(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


class StreamDecoder:
    """Decodes a streamed body piece by piece (for the recorder's copy), up to `limit` bytes
    in all (default: the decoded-size limit of the request being served)."""

    def __init__(self, encoding: str | None, limit: int | None = None) -> None:
        self._decompressor = _decompressor(encoding)
        self._left = decoded_limit() if limit is None else limit
        self._limit = self._left

    def feed(self, chunk: bytes) -> bytes:
        """The decoded bytes of the next piece.

        Raises:
            ValueError: The decoded stream exceeds its limit.
        """
        if self._decompressor is None:
            return chunk
        if isinstance(self._decompressor, type(zlib.decompressobj())):
            plain = self._decompressor.decompress(chunk, self._left + 1)
        else:
            plain = self._decompressor.decompress(chunk)
        self._left -= len(plain)
        if self._left < 0:
            raise ValueError(f"the decoded stream exceeds {self._limit} bytes (max_decoded_bytes)")
        return plain


# The event that ends a stream, per dialect, with or without an `event:` line.
_END_MARKERS: dict[str, tuple[bytes, ...]] = {
    "chat": (b"data: [DONE]", b"data:[DONE]"),
    "responses": tuple(
        m
        for kind in (b"response.completed", b"response.incomplete", b"response.failed")
        for m in (b"event: " + kind, b'"type":"' + kind + b'"', b'"type": "' + kind + b'"')
    ),
    "anthropic": (b"event: message_stop", b'"type":"message_stop"', b'"type": "message_stop"'),
}
_EVENT_ENDS = (b"\n\n", b"\r\n\r\n")


class StreamEnd:
    """Notices the end of a stream's final event, so the call is spooled before it is sent."""

    def __init__(self, dialect: str) -> None:
        self._markers = _END_MARKERS[dialect]
        self._window = b""
        self._armed = False
        self.reached = False

    def feed(self, plain: bytes) -> bool:
        """True once the final event is complete in what was fed (decoded bytes)."""
        if self.reached:
            return True
        buf = self._window + plain
        if not self._armed:
            found = [i for i in (buf.find(m) for m in self._markers) if i >= 0]
            if not found:
                self._window = buf[-64:]
                return False
            self._armed, buf = True, buf[min(found) :]
        if any(end in buf for end in _EVENT_ENDS):
            self.reached = True
        self._window = buf[-3:]
        return self.reached


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error body both SDK families read (`error.message`, `error.type`)."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def header_meta(headers: Mapping[str, str], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Rollout tags from `X-Trajlake-Task/-Generation/-Run/-Harness`, else the defaults.

    Raises:
        ValueError: `X-Trajlake-Generation` is not an integer.
    """
    meta = {k: defaults.get(k) for k in ("task_id", "generation", "run_id", "harness")}
    for key, header in (
        ("task_id", "X-Trajlake-Task"),
        ("run_id", "X-Trajlake-Run"),
        ("harness", "X-Trajlake-Harness"),
    ):
        if headers.get(header):
            meta[key] = headers[header]
    generation = headers.get("X-Trajlake-Generation")
    if generation:
        try:
            meta["generation"] = int(generation)
        except ValueError:
            raise ValueError(
                f"X-Trajlake-Generation must be an integer, got {generation!r}"
            ) from None
    return meta


@dataclass
class Call:
    """A recorded call in progress."""

    ticket: CallTicket
    dialect: str
    endpoint: str
    request: Any
    stream: bool
    recorded: bool = False
    failed: bool = False
    size: int = 0
    """Bytes of the request body (big calls are recorded off the event loop)."""
    response_bytes: int = 0
    """Bytes of the (decoded) response read so far."""


Record = Callable[[Call, Any, "int | None", "str | None"], Awaitable[None]]


def json_error(status: int, kind: str, message: str) -> web.Response:
    """A JSON error response (see `error_body`)."""
    from aiohttp import web

    return web.json_response(error_body(kind, message), status=status)


class Forwarder:
    """Relays requests to the upstream through one pooled session; reports each model call.

    `record(call, response, status, error)` is awaited once per model call, before the
    response's last event reaches the client.
    """

    def __init__(self, upstream: str, timeout_s: float, record: Record) -> None:
        self.upstream, self.timeout_s = upstream_root(upstream), timeout_s
        self._record_call = record
        self._session: aiohttp.ClientSession | None = None

    async def session(self, app: web.Application) -> AsyncIterator[None]:
        """The pooled client session's lifetime (an aiohttp cleanup context)."""
        import aiohttp

        # One pooled session for every forwarded call; bodies are relayed as the upstream
        # encoded them (auto_decompress off) and the recorder decodes a copy.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=min(self.timeout_s, 30.0), sock_read=self.timeout_s
        )
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )
        yield
        await self._session.close()

    async def _record(
        self, call: Call, response: Any, status: int | None, error: str | None
    ) -> None:
        call.recorded, call.failed = True, error is not None
        await self._record_call(call, response, status, error)

    def _url(self, request: web.Request, path: str) -> str:
        query = request.query_string
        return f"{self.upstream}{path}" + (f"?{query}" if query else "")

    async def model_call(self, request: web.Request, call: Call, raw: bytes) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        headers = forwarded_request_headers(request.headers.items())
        try:
            upstream = await self._session_or_fail().request(
                request.method,
                self._url(request, call.endpoint),
                data=_payload(raw),
                headers=headers,
            )
        except TimeoutError:
            message = f"the upstream did not answer within {self.timeout_s:g} s"
            await self._record(call, None, 504, "upstream timeout")
            return json_error(504, "upstream_timeout", message)
        except aiohttp.ClientError as e:
            await self._record(call, None, 502, f"upstream unreachable: {e}")
            return json_error(502, "upstream_unreachable", f"cannot reach the upstream: {e}")
        async with upstream:
            kind = upstream.headers.get("Content-Type", "")
            if upstream.status < 400 and kind.startswith("text/event-stream"):
                return await self._relay_stream(request, upstream, call)
            try:
                data = await upstream.read()
            except TimeoutError:
                await self._record(call, None, 504, "upstream timeout")
                return json_error(504, "upstream_timeout", "the upstream stopped answering")
            except aiohttp.ClientError as e:
                await self._record(call, None, 502, f"upstream connection lost: {e}")
                return json_error(502, "upstream_unreachable", f"upstream connection lost: {e}")
            try:
                parsed, _ = json_copy(data, upstream.headers.get("Content-Encoding"))
            except BodyTooLarge:  # relayed as it is; only the recorder's copy is dropped
                parsed = None
            failed = f"upstream returned HTTP {upstream.status}" if upstream.status >= 400 else None
            call.response_bytes = len(data)
            await self._record(call, parsed, upstream.status, failed)
            out_headers = relayed_response_headers(upstream.headers.items())
            return web.Response(status=upstream.status, body=data, headers=_multi(out_headers))

    async def _relay_stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, call: Call
    ) -> web.StreamResponse:
        """Relay SSE chunk by chunk; a copy feeds the assembler; spool before the last event."""
        import aiohttp
        from aiohttp import web

        out = web.StreamResponse(
            status=upstream.status,
            headers=_multi(relayed_response_headers(upstream.headers.items())),
        )
        assembler = StreamAssembler(call.dialect)  # type: ignore[arg-type]
        decoder = StreamDecoder(upstream.headers.get("Content-Encoding"))
        end = StreamEnd(call.dialect)
        error: str | None = None
        try:
            await out.prepare(request)
            async for chunk in upstream.content.iter_any():
                plain = decoder.feed(chunk)
                call.response_bytes += len(plain)
                assembler.feed(plain)
                if not call.recorded and end.feed(plain):
                    await self._record(call, _assembled(assembler), upstream.status, None)
                await out.write(chunk)
        except ConnectionResetError:
            error = "client disconnected"
        except TimeoutError:
            error = "upstream timeout mid-stream"
        except (aiohttp.ClientError, ValueError) as e:
            error = f"upstream stream broken: {e}"
        except SpoolError as e:  # not durable: cut before the final event, never answered
            error = f"not recorded: {e}"
        if not call.recorded:
            error = error or "the stream ended before its final event"
            with contextlib.suppress(SpoolError):  # failing anyway: the stream is cut
                await self._record(call, _assembled(assembler), upstream.status, error)
        if error is None:
            with contextlib.suppress(ConnectionResetError):
                await out.write_eof()
        elif request.transport is not None:
            request.transport.abort()  # the client must see a broken stream, not an ending
        return out

    async def passthrough(self, request: web.Request, path: str, raw: bytes) -> web.Response:
        """Other upstream routes (`GET /v1/models`, token counting, …): relayed, not recorded."""
        import aiohttp
        from aiohttp import web

        headers = forwarded_request_headers(request.headers.items())
        try:
            async with self._session_or_fail().request(
                request.method, self._url(request, path), data=_payload(raw), headers=headers
            ) as upstream:
                data = await upstream.read()
                out_headers = _multi(relayed_response_headers(upstream.headers.items()))
                return web.Response(status=upstream.status, body=data, headers=out_headers)
        except TimeoutError:
            return json_error(504, "upstream_timeout", "the upstream did not answer in time")
        except aiohttp.ClientError as e:
            return json_error(502, "upstream_unreachable", f"cannot reach the upstream: {e}")

    def _session_or_fail(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the proxy application is not running")
        return self._session


def _payload(raw: bytes) -> Any:
    """The body as the client library wants it: large ones sent in slices, uncopied (raw
    bytes past 1 MiB make aiohttp warn that the loop could block)."""
    from trajlake.proxy._sliced import SlicedBytes

    if not raw:
        return None
    return SlicedBytes(raw) if len(raw) > 1 << 20 else raw


def _multi(pairs: list[tuple[str, str]]) -> Any:
    from multidict import CIMultiDict

    return CIMultiDict(pairs)


def _assembled(assembler: StreamAssembler) -> Any:
    try:
        return assembler.body()
    except ValueError:
        return None
