"""HTTP server for best-of-N reranking: scores candidate trajectories with a value model.

Concurrent requests are coalesced into batches so the model runs once per batch, in one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import math
import signal
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from trajlake.errors import missing_extra

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

__all__ = ["Scorer", "create_app", "run_server"]

logger = logging.getLogger(__name__)

_OPEN_PATHS = frozenset({"/health"})


class Scorer(Protocol):
    """What the server needs from a value model (a `trajlake.rerank.Reranker` fits)."""

    model_id: str

    def score(self, candidates: Sequence[Any]) -> list[float]:
        """Score candidates (blocking); one float per candidate, higher is better."""
        ...

    def info(self) -> dict[str, Any]:
        """Describe the model as a JSON-able dict."""
        ...


class _ScoringFailed(Exception):
    """A batch failed; carries the HTTP answer for every request in it."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass(eq=False)
class _Job:
    candidates: Sequence[Any]
    future: asyncio.Future[list[float]]
    enqueued: float
    scores: list[float] = field(default_factory=list)
    taken: int = 0  # candidates already handed to a batch

    @property
    def remaining(self) -> int:
        return len(self.candidates) - self.taken


_Batch = list[tuple[_Job, int, int]]  # (job, start, end) slices, in queue order


@dataclass(frozen=True)
class _Options:
    max_batch_candidates: int = 32
    max_wait_ms: float = 5.0
    max_candidates_per_request: int = 256
    max_body_bytes: int = 64 * 1024 * 1024
    token: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch_candidates", "max_candidates_per_request", "max_body_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < math.inf:
            raise ValueError(f"max_wait_ms must be a finite number >= 0, got {wait!r}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise ValueError("token must be a non-empty string or None")


@dataclass
class _Stats:
    requests: int = 0
    candidates: int = 0
    batches: int = 0
    scored: int = 0
    failed_batches: int = 0


class _Batcher:
    """Queue plus the single worker that coalesces queued candidates into score() calls."""

    def __init__(self, scorer: Scorer, options: _Options, stats: _Stats) -> None:
        self._scorer, self._stats = scorer, stats
        self._max_batch, self._max_wait = options.max_batch_candidates, options.max_wait_ms / 1e3
        self._queue: deque[_Job] = deque()
        self._arrived = asyncio.Event()
        self._inflight: _Batch = []
        # One thread: the model is never called concurrently (torch modules are not re-entrant).
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajlake-score")
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def score(self, candidates: Sequence[Any]) -> list[float]:
        loop = asyncio.get_running_loop()
        job = _Job(candidates, loop.create_future(), loop.time())
        self._queue.append(job)
        self._arrived.set()
        return await job.future

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        gone = _ScoringFailed(503, "unavailable", "the server is shutting down")
        for job in [*self._queue, *(job for job, _, _ in self._inflight)]:
            if not job.future.done():
                job.future.set_exception(gone)
        self._queue.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        while True:
            await self._collect()
            batch = self._take()
            if batch:
                self._inflight = batch
                try:
                    await self._score_batch(batch)
                finally:
                    self._inflight = []

    def _pending(self) -> int:
        return sum(job.remaining for job in self._queue if not job.future.done())

    async def _collect(self) -> None:
        """Wait for work, then until a full batch is pending or max_wait passed since the first."""
        loop = asyncio.get_running_loop()
        while not self._pending():
            self._arrived.clear()
            await self._arrived.wait()
        deadline = next(j for j in self._queue if not j.future.done()).enqueued + self._max_wait
        while self._pending() < self._max_batch:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                return

    def _take(self) -> _Batch:
        batch: _Batch = []
        room = self._max_batch
        while self._queue and room > 0:
            job = self._queue[0]
            if job.future.done():  # the client went away, or an earlier slice failed
                self._queue.popleft()
                continue
            n = min(room, job.remaining)
            batch.append((job, job.taken, job.taken + n))
            job.taken += n
            room -= n
            if not job.remaining:
                self._queue.popleft()
        return batch

    async def _score_batch(self, batch: _Batch) -> None:
        try:
            self._deliver(batch, await self._call(batch))
        except _ScoringFailed as exc:
            if exc.status != 400 or len(batch) == 1:
                _fail(batch, exc)
                return
            # One bad candidate must not fail the requests it happened to share a batch with.
            for part in batch:
                try:
                    self._deliver([part], await self._call([part]))
                except _ScoringFailed as part_exc:
                    _fail([part], part_exc)

    async def _call(self, batch: _Batch) -> list[float]:
        candidates = [c for job, start, end in batch for c in job.candidates[start:end]]
        loop = asyncio.get_running_loop()
        self._stats.batches += 1
        self._stats.scored += len(candidates)
        try:
            raw = await loop.run_in_executor(self._executor, self._scorer.score, candidates)
        except (ValueError, TypeError) as exc:
            self._stats.failed_batches += 1
            raise _ScoringFailed(400, "invalid_candidate", str(exc) or type(exc).__name__) from exc
        except Exception as exc:
            self._stats.failed_batches += 1
            logger.exception("scorer failed on a batch of %d candidates", len(candidates))
            raise _ScoringFailed(500, "internal_error", "the scorer failed; see the log") from exc
        try:
            scores = [float(s) for s in raw]
        except (TypeError, ValueError):
            scores = []
        if len(scores) != len(candidates) or not all(map(math.isfinite, scores)):
            self._stats.failed_batches += 1
            logger.error("scorer returned no %d finite scores: %.200r", len(candidates), raw)
            raise _ScoringFailed(500, "internal_error", "the scorer returned invalid scores")
        return scores

    @staticmethod
    def _deliver(batch: _Batch, scores: list[float]) -> None:
        offset = 0
        for job, start, end in batch:
            job.scores.extend(scores[offset : offset + end - start])
            offset += end - start
            if len(job.scores) == len(job.candidates) and not job.future.done():
                job.future.set_result(job.scores)


def _fail(batch: _Batch, exc: _ScoringFailed) -> None:
    for job, _, _ in batch:
        if not job.future.done():
            job.future.set_exception(exc)


# --------------------------------------------------------------------------- request parsing


@dataclass(frozen=True)
class _Group:
    task_id: str | None
    candidates: list[Any]
    top_k: int | None


def _parse_body(body: Any, max_candidates: int) -> tuple[list[_Group], bool, bool]:
    """Validate a rerank body; returns (groups, is_multi_task, return_scores). Raises ValueError."""
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    allowed = {"candidates", "tasks", "task_id", "top_k", "return_scores"}
    if unknown := sorted(set(body) - allowed):
        raise ValueError(f"unknown field(s) {unknown}; allowed: {sorted(allowed)}")
    return_scores = body.get("return_scores", True)
    if not isinstance(return_scores, bool):
        raise ValueError("return_scores must be true or false")
    top_k = _top_k(body.get("top_k"), "top_k")
    if ("candidates" in body) == ("tasks" in body):
        raise ValueError("give exactly one of 'candidates' or 'tasks'")
    if "candidates" in body:
        groups = [_group(body, "", top_k)]
    else:
        tasks = body["tasks"]
        if not isinstance(tasks, list) or not tasks:
            raise ValueError("tasks must be a non-empty array of {task_id, candidates} objects")
        groups = [_group(t, f"tasks[{i}].", top_k) for i, t in enumerate(tasks)]
    total = sum(len(g.candidates) for g in groups)
    if total > max_candidates:
        raise ValueError(
            f"{total} candidates in one request; this server accepts at most "
            f"{max_candidates} (max_candidates_per_request)"
        )
    return groups, "tasks" in body, return_scores


def _group(obj: Any, where: str, default_top_k: int | None) -> _Group:
    if not isinstance(obj, dict):
        raise ValueError(f"{where.rstrip('.')} must be a JSON object")
    if where and (extra := sorted(set(obj) - {"task_id", "candidates", "top_k"})):
        raise ValueError(f"{where}: unknown field(s) {extra}")
    task_id = obj.get("task_id")
    if task_id is not None and not isinstance(task_id, str):
        raise ValueError(f"{where}task_id must be a string")
    candidates = obj.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise ValueError(f"{where}candidates must be a non-empty array")
    for i, c in enumerate(candidates):
        if not isinstance(c, (list, dict)):
            raise ValueError(
                f"{where}candidates[{i}] must be a JSON array (chat messages) or "
                f"object (trajectory), got {type(c).__name__}"
            )
    top_k = _top_k(obj.get("top_k"), f"{where}top_k") if where else None
    return _Group(task_id, candidates, top_k if top_k is not None else default_top_k)


def _top_k(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer")
    return value


def _ranked(group: _Group, scores: list[float], return_scores: bool) -> dict[str, Any]:
    # Stable on ties: the earlier candidate wins, so answers do not depend on batch composition.
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out: dict[str, Any] = {"task_id": group.task_id}
    if return_scores:
        out["scores"] = scores
    out["order"] = order
    out["best"] = order[0]
    if group.top_k is not None:
        out["top_k"] = order[: group.top_k]
    return out


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
    max_body_bytes: int = 64 * 1024 * 1024,
    token: str | None = None,
) -> web.Application:
    """Build the reranking application (routes `/health`, `/v1/rerank`, `/v1/stats`).

    Args:
        scorer: The model; `score` is only ever called from one worker thread.
        max_batch_candidates: Most candidates per `score` call; bigger requests are split.
        max_wait_ms: How long the first queued candidate waits for others to join its batch.
        max_candidates_per_request: Most candidates one request may carry (over all its tasks).
        max_body_bytes: Largest request body accepted; larger ones get 413.
        token: If set, every route but `/health` needs `Authorization: Bearer <token>`.

    Returns:
        An `aiohttp.web.Application`; its batching worker starts and stops with the app.

    Raises:
        TypeError: `scorer` lacks `model_id`, `score` or `info`.
        ValueError: A limit is not positive, or `token` is empty.
        MissingExtra: aiohttp is not installed.
    """
    _require_aiohttp()
    from aiohttp import web

    if not (
        isinstance(getattr(scorer, "model_id", None), str)
        and callable(getattr(scorer, "score", None))
        and callable(getattr(scorer, "info", None))
    ):
        raise TypeError("scorer must have a str model_id and score() and info() methods")
    options = _Options(
        max_batch_candidates, max_wait_ms, max_candidates_per_request, max_body_bytes, token
    )
    service = _Service(scorer, options)
    app = web.Application(client_max_size=max_body_bytes, middlewares=service.middlewares)
    app.cleanup_ctx.append(service.lifecycle)
    app.router.add_get("/health", service.health)
    app.router.add_get("/v1/stats", service.stats_view)
    app.router.add_post("/v1/rerank", service.rerank)
    return app


# --------------------------------------------------------------------------- running it


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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

    Each ends in a graceful shutdown (requests in flight get 5 s); Ctrl-C then re-raises
    `KeyboardInterrupt` for the caller.

    Args:
        scorer: The model to serve.
        host: Interface to bind; anything but loopback needs a `token`.
        port: TCP port; 0 picks a free one (passed to `ready`).
        token: Bearer token clients must send (see `create_app`).
        ready: Called as `ready(host, port)` once the server is listening.
        stop: Set it (from any thread) to shut the server down gracefully.
        **app_options: Passed on to `create_app` (batch size, wait, limits).

    Raises:
        ValueError: `host` is not loopback and no `token` is set, or a bad option.
        MissingExtra: aiohttp is not installed.
    """
    if not _is_loopback(host) and not token:
        raise ValueError(
            f"refusing to serve on non-loopback host {host!r} without a token: "
            "pass --token so that clients must authenticate"
        )
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
    app = create_app(scorer, token=token, **app_options)
    asyncio.run(_serve(app, host, port, ready, stop))


async def _serve(
    app: web.Application,
    host: str,
    port: int,
    ready: Callable[[str, int], None] | None,
    stop: threading.Event | None,
) -> None:
    from aiohttp import web

    # Requests in flight get a few seconds to finish on shutdown; then they are cancelled.
    runner = web.AppRunner(app, shutdown_timeout=5.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        if ready is not None:
            ready(host, int(runner.addresses[0][1]))
        await _wait_for_stop(stop)
    finally:
        await runner.cleanup()


async def _wait_for_stop(stop: threading.Event | None) -> None:
    loop, done = asyncio.get_running_loop(), asyncio.Event()
    # SIGINT is handled by asyncio.run; SIGTERM (container stop) should shut down just as cleanly.
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, done.set)
    try:
        while not done.is_set() and not (stop is not None and stop.is_set()):
            # A threading.Event cannot wake the loop, so it is polled.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), 0.05 if stop is not None else None)
    finally:
        if on_main:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGTERM)
