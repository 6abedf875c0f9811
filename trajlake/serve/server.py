"""HTTP server for best-of-N reranking: scores candidate trajectories with a value model.

Concurrent requests are coalesced into batches so the model runs once per batch, in one thread.
The server needs only a `Scorer` (a `trajlake.serve.Reranker` is one), so it never loads or
trains a model itself; request parsing and batching are in `_requests` and `_batching`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from trajlake._http_limits import ServerLimits
from trajlake._http_server import (
    check_port,
    is_loopback,
    limited_application,
    running_in_background,
    serve_until_stopped,
)
from trajlake.errors import missing_extra
from trajlake.serve._batching import Scorer, _Batcher, _Options, _ScoringFailed, _Stats
from trajlake.serve._requests import _parse_body, _ranked

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

__all__ = ["Scorer", "ServerLimits", "create_app", "run_server", "serve_in_background"]

_OPEN_PATHS = frozenset({"/health"})


# --------------------------------------------------------------------------- the application


def _require_aiohttp() -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError as e:
        raise missing_extra("aiohttp", "serve") from e


def _error(status: int, kind: str, message: str, **headers: str) -> web.Response:
    from aiohttp import web

    body = {"error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers=headers or None)


class _Service:
    """The request handlers, bound to one scorer and its batcher."""

    def __init__(self, scorer: Scorer, options: _Options) -> None:
        self.scorer, self.options = scorer, options
        self.max_body = options.max_body_bytes
        self.stats = _Stats()
        self.batcher: _Batcher | None = None

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        self.batcher = _Batcher(self.scorer, self.options, self.stats)
        yield
        batcher, self.batcher = self.batcher, None
        await batcher.close()

    async def health(self, request: web.Request) -> web.Response:
        from aiohttp import web

        info = self.scorer.info()
        return web.json_response({"status": "ok", "model": self.scorer.model_id, "info": info})

    async def stats_view(self, request: web.Request) -> web.Response:
        from aiohttp import web

        s, mean = self.stats, self.stats.scored / max(self.stats.batches, 1)
        out = {"model": self.scorer.model_id, "requests": s.requests, "candidates": s.candidates}
        out |= {"batches": s.batches, "failed_batches": s.failed_batches, "mean_batch_size": mean}
        return web.json_response(out)

    async def rerank(self, request: web.Request) -> web.Response:
        from aiohttp import web

        started = time.perf_counter()
        if request.content_length is not None and request.content_length > self.max_body:
            return self._too_large()
        try:
            body = json.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        except (ValueError, UnicodeDecodeError) as e:
            return _error(400, "invalid_request", f"the body is not valid JSON: {e}")
        except RecursionError:
            message = "the body's JSON nests too deeply to parse; flatten it"
            return _error(400, "invalid_request", message)
        try:
            groups, multi, return_scores = _parse_body(
                body, self.options.max_candidates_per_request
            )
        except ValueError as e:
            return _error(400, "invalid_request", str(e))
        if self.batcher is None:
            return _error(503, "unavailable", "the server is not running")
        flat = [c for g in groups for c in g.candidates]
        self.stats.requests += 1
        self.stats.candidates += len(flat)
        try:
            scores = await self.batcher.score(flat)
        except _ScoringFailed as e:
            return _error(e.status, e.kind, e.message)
        latency_ms = (time.perf_counter() - started) * 1000.0
        results, model, offset = [], self.scorer.model_id, 0
        for g in groups:
            part = scores[offset : offset + len(g.candidates)]
            offset += len(g.candidates)
            results.append({"model": model, **_ranked(g, part, return_scores)})
            results[-1]["latency_ms"] = latency_ms
        if multi:
            out = {"model": self.scorer.model_id, "results": results, "latency_ms": latency_ms}
            return web.json_response(out)
        return web.json_response(results[0])

    def _too_large(self) -> web.Response:
        limit = f"the request body exceeds {self.max_body} bytes (max_body_bytes)"
        return _error(413, "payload_too_large", limit)

    @property
    def middlewares(self) -> list[Any]:
        from aiohttp import web

        @web.middleware
        async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                return await handler(request)
            except web.HTTPException as e:
                if e.status < 400:
                    raise
                kind = e.reason.lower().replace(" ", "_")
                allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else {}
                return _error(
                    e.status, kind, f"{request.method} {request.path}: {e.reason}", **allow
                )

        @web.middleware
        async def bearer_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
            token = self.options.token
            if token is not None and request.path not in _OPEN_PATHS:
                # Constant-time compare: the token must not leak through response timing.
                given = request.headers.get("Authorization", "").encode()
                if not hmac.compare_digest(given, f"Bearer {token}".encode()):
                    headers = {"WWW-Authenticate": "Bearer"}
                    return _error(401, "unauthorized", "missing or wrong bearer token", **headers)
            return await handler(request)

        return [errors_as_json, bearer_auth]


def create_app(
    scorer: Scorer,
    *,
    max_batch_candidates: int = 32,
    max_wait_ms: float = 5.0,
    max_candidates_per_request: int = 256,
    max_body_bytes: int | None = None,
    token: str | None = None,
    limits: ServerLimits | None = None,
) -> web.Application:
    """Build the reranking application (routes `/health`, `/v1/rerank`, `/v1/stats`).

    Args:
        scorer: The model; `score` is only ever called from one worker thread.
        max_batch_candidates: Most candidates per `score` call; bigger requests are split.
        max_wait_ms: How long the first queued candidate waits for others to join its batch.
        max_candidates_per_request: Most candidates one request may carry (over all its tasks).
        max_body_bytes: Largest request body accepted; larger ones get 413 (overrides
            `limits.max_body_bytes`, 64 MiB by default).
        token: If set, every route but `/health` needs `Authorization: Bearer <token>`.
        limits: Body, timeout, in-flight and connection limits (`ServerLimits`).

    Returns:
        An `aiohttp.web.Application`; its batching worker starts and stops with the app.

    Raises:
        TypeError: `scorer` lacks `model_id`, `score` or `info`.
        ValueError: A limit is not positive, or `token` is empty.
        MissingExtra: aiohttp is not installed.
    """
    _require_aiohttp()
    if not (
        isinstance(getattr(scorer, "model_id", None), str)
        and callable(getattr(scorer, "score", None))
        and callable(getattr(scorer, "info", None))
    ):
        raise TypeError("scorer must have a str model_id and score() and info() methods")
    limits = limits if limits is not None else ServerLimits()
    if max_body_bytes is not None:
        limits = dataclasses.replace(limits, max_body_bytes=max_body_bytes)
    options = _Options(
        max_batch_candidates, max_wait_ms, max_candidates_per_request, limits.max_body_bytes, token
    )
    service = _Service(scorer, options)
    app: web.Application = limited_application(limits, service.middlewares)
    app.cleanup_ctx.append(service.lifecycle)
    app.router.add_get("/health", service.health)
    app.router.add_get("/v1/stats", service.stats_view)
    app.router.add_post("/v1/rerank", service.rerank)
    return app


# --------------------------------------------------------------------------- running it


def run_server(
    scorer: Scorer,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    ready: Callable[[str, int], None] | None = None,
    stop: threading.Event | None = None,
    **app_options: Any,
) -> None:
    """Serve `scorer` over HTTP until SIGTERM, Ctrl-C or `stop`; blocks, prints nothing.

    Each ends in a graceful shutdown (slow and idle connections closed at once, requests
    being answered get `limits.shutdown_s`, 10 s by default); Ctrl-C then re-raises
    `KeyboardInterrupt` for the caller.

    Args:
        scorer: The model to serve.
        host: Interface to bind; anything but loopback needs a `token`.
        port: TCP port; 0 picks a free one (passed to `ready`).
        token: Bearer token clients must send (see `create_app`).
        ready: Called as `ready(host, port)` once the server is listening.
        stop: Set it (from any thread) to shut the server down gracefully.
        **app_options: Passed on to `create_app` (batch size, wait, `limits`).

    Raises:
        ValueError: `host` is not loopback and no `token` is set, or a bad option.
        MissingExtra: aiohttp is not installed.
    """
    if not is_loopback(host) and not token:
        raise ValueError(
            f"refusing to serve on non-loopback host {host!r} without a token: "
            "pass --token so that clients must authenticate"
        )
    check_port(port)
    app = create_app(scorer, token=token, **app_options)
    asyncio.run(serve_until_stopped(app, host, port, ready=ready, stop=stop))


@contextlib.contextmanager
def serve_in_background(
    scorer: Scorer, *, timeout_s: float = 30.0, **options: Any
) -> Iterator[str]:
    """Serve `scorer` from a background thread; yields its base URL (`http://127.0.0.1:PORT`).

    For embedding the endpoint in a process that does other work (and for tests and
    benchmarks). `options` go to `run_server` (default port 0: a free one). The server stops
    when the block ends.
    """
    serve = functools.partial(run_server, scorer, **{"port": 0, **options})
    with running_in_background(serve, "reranking server", timeout_s=timeout_s) as url:
        yield url
