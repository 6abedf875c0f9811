"""`POST /v1/traces`: the OTLP/HTTP trace receiver, answering only once a request is spooled.

Accepts what OpenTelemetry exporters send: `application/json` (OTLP/JSON) and
`application/x-protobuf` (the Python `OTLPSpanExporter`), plain or gzip. With a token, clients
send `Authorization: Bearer <token>` (`OTEL_EXPORTER_OTLP_HEADERS`) or `X-Trajlake-Token`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trajlake._http_limits import ServerLimits
from trajlake._http_server import check_port, is_loopback, limited_application, serve_until_stopped
from trajlake.errors import missing_extra
from trajlake.ingest import IngestOptions
from trajlake.otlp_receiver._batches import Batcher
from trajlake.otlp_receiver._decode import (
    PROTOBUF_TYPE,
    BadRequest,
    decompressed,
    export_request,
    protobuf_response,
)
from trajlake.proxy.spool import SpoolError

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

    from trajlake.lake import LakeStore

__all__ = ["create_receiver_app", "default_spool_dir", "run_receiver"]

log = logging.getLogger(__name__)
TOKEN_HEADER = "X-Trajlake-Token"
_OPEN_PATHS = frozenset({"/health"})


def default_spool_dir(lake_uri: str) -> Path:
    """Where a receiver for this lake spools by default (the same for every restart)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(lake_uri.encode()).hexdigest()[:16]
    return Path(cache) / "trajlake" / "otlp-spool" / key


def _authorised(request: web.Request, token: str) -> bool:
    given = request.headers.get(TOKEN_HEADER, "")
    bearer = request.headers.get("Authorization", "")
    if bearer.lower().startswith("bearer "):
        given = given or bearer[7:].strip()
    # Constant-time compare: the token must not leak through response timing.
    return hmac.compare_digest(given.encode(), token.encode())


def _error(status: int, message: str) -> web.Response:
    from aiohttp import web

    # OTLP/HTTP answers failures with a google.rpc.Status; its JSON form carries the message.
    return web.json_response({"code": status, "message": message}, status=status)


def create_receiver_app(
    batcher: Batcher, *, token: str | None = None, limits: ServerLimits | None = None
) -> web.Application:
    """The aiohttp application: `POST /v1/traces` and `GET /health`."""
    from aiohttp import web

    limits = limits or ServerLimits()

    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            token is not None
            and request.path not in _OPEN_PATHS
            and not _authorised(request, token)
        ):
            return _error(401, f"missing or wrong token (Authorization: Bearer or {TOKEN_HEADER})")
        return await handler(request)

    async def traces(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            plain = decompressed(
                body, request.headers.get("Content-Encoding"), limits.max_decoded_bytes
            )
            decoded = export_request(plain, request.content_type)
            # The write (and fsync) must finish before the answer: off the event loop.
            await asyncio.get_running_loop().run_in_executor(None, batcher.accept, decoded)
        except BadRequest as e:
            return _error(e.status, str(e))
        except SpoolError as e:
            log.error("otlp receiver: %s", e)
            return _error(503, f"the request could not be spooled: {e}")
        if request.content_type == PROTOBUF_TYPE:
            return web.Response(body=protobuf_response(), content_type=PROTOBUF_TYPE)
        return web.json_response({"partialSuccess": {}})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **batcher.stats})

    app = limited_application(limits, [check_token])
    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/health", health)
    application: web.Application = app
    return application


def run_receiver(
    lake: LakeStore,
    *,
    host: str = "127.0.0.1",
    port: int = 4318,
    token: str | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
    fsync: bool = False,
    commit_seconds: float = 1.0,
    idle_s: float = 30.0,
    options: IngestOptions | None = None,
    limits: ServerLimits | None = None,
    ready: Callable[[str, int], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Receive OTLP traces into `lake` until SIGTERM, Ctrl-C or `stop`; blocks, prints nothing.

    The spool is replayed first (traces a killed receiver had acknowledged are committed); on
    shutdown every spooled trace is committed.

    Args:
        lake: The lake receiving trajectories, messages, calls and quarantine rows.
        host: Interface to bind; anything but loopback needs a `token`.
        port: TCP port (4318 is OTLP/HTTP's); 0 picks a free one (passed to `ready`).
        token: Secret clients must send.
        spool_dir: Write-ahead spool folder (default: `default_spool_dir(lake.uri)`).
        fsync: fsync every spooled request (power-loss safe).
        commit_seconds: How long a trace whose root span arrived waits for late spans.
        idle_s: Commit a trace whose root span never arrives after this long without spans.
        options: Ingest options (run id, generation, redaction).
        limits: What clients may send (`ServerLimits`).
        ready: Called as `ready(host, port)` once listening.
        stop: Set it (from any thread) to shut the receiver down.

    Raises:
        ValueError: A non-loopback `host` without a token, or a bad port.
        MissingExtra: aiohttp is not installed.
        SpoolError: The spool folder cannot be written.
    """
    try:
        import aiohttp  # noqa: F401
    except ImportError as e:
        raise missing_extra("aiohttp", "otlp") from e
    if not is_loopback(host) and not token:
        raise ValueError(f"refusing to listen on non-loopback host {host!r} without --token")
    check_port(port)
    where = spool_dir if spool_dir is not None else default_spool_dir(lake.uri)
    batcher = Batcher(
        lake, where, fsync=fsync, commit_seconds=commit_seconds, idle_s=idle_s, options=options
    )
    batcher.start()
    try:
        app = create_receiver_app(batcher, token=token, limits=limits)
        asyncio.run(
            serve_until_stopped(
                app, host, port, ready=ready, stop=stop, access_log=None, auto_decompress=False
            )
        )
    finally:
        batcher.close()
