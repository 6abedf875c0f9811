"""The recording proxy's HTTP server: forwards model calls unchanged and records each one.

Rollouts: a call names its rollout by the path prefix `/rollouts/{id}/v1/...` or the header
`X-Trajlake-Rollout`; a call naming none is a one-call rollout of its own, id
`auto-<run id>-<proxy start>-<n>`, finished (queued for commit) as soon as it is answered.
Auth: with a token, proxy clients send `X-Trajlake-Token: <token>`; `Authorization` and
`x-api-key` belong to the upstream, are forwarded unchanged and never stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, get_args

from trajlake._http_limits import ServerLimits
from trajlake._http_server import (
    check_port,
    is_loopback,
    limited_application,
    serve_until_stopped,
)
from trajlake.errors import missing_extra
from trajlake.proxy._forward import (
    Call,
    Forwarder,
    decode_body,
    header_meta,
    json_copy,
    json_error,
    upstream_root,
)
from trajlake.proxy.dialects import ENDPOINTS
from trajlake.proxy.recorder import CallTicket, Recorder
from trajlake.proxy.spool import SpoolError
from trajlake.schema import Status

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

    from trajlake.lake import LakeStore
    from trajlake.redact import AllowList

__all__ = [
    "ProxyThread",
    "ServerLimits",
    "create_proxy_app",
    "default_spool_dir",
    "require_aiohttp",
    "run_proxy",
]

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-Trajlake-Token"
ROLLOUT_HEADER = "X-Trajlake-Rollout"
_OPEN_PATHS = frozenset({"/health"})
_STATUSES = frozenset(get_args(Status)) | {"aborted"}  # aborted is stored as error
_OUTCOME_KEYS = ("resolved", "reward", "rewards", "details")


def require_aiohttp() -> None:
    """Raise MissingExtra when aiohttp (the `proxy` extra) is not installed."""
    try:
        import aiohttp  # noqa: F401
    except ImportError as e:
        raise missing_extra("aiohttp", "proxy") from e


class _Proxy:
    """The handlers, bound to one upstream, recorder and HTTP client session."""

    def __init__(
        self,
        upstream: str,
        recorder: Recorder,
        token: str | None,
        default_meta: Mapping[str, Any],
        timeout_s: float,
        finish_wait_s: float,
    ) -> None:
        self.recorder, self.token = recorder, token
        self.default_meta = dict(default_meta)
        self.finish_wait_s = finish_wait_s
        self.forwarder = Forwarder(upstream, timeout_s, self._record)

    @property
    def middlewares(self) -> list[Any]:
        from aiohttp import web

        @web.middleware
        async def proxy_token(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self.token is not None and request.path not in _OPEN_PATHS:
                # Constant-time compare: the token must not leak through response timing.
                given = request.headers.get(TOKEN_HEADER, "").encode()
                if not hmac.compare_digest(given, self.token.encode()):
                    return json_error(401, "unauthorized", f"missing or wrong {TOKEN_HEADER}")
            return await handler(request)

        return [proxy_token]

    async def health(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response({"status": "ok", **self.recorder.stats})

    async def housekeeping(self, app: web.Application) -> AsyncIterator[None]:
        """Runs `Recorder.tick` every few seconds (idle rollouts, spool rewrite) while serving."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.recorder.tick_seconds)
                try:
                    self.recorder.tick()
                except Exception:  # housekeeping never stops the proxy
                    log.exception("proxy housekeeping failed")

        task = asyncio.create_task(loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _refuse_finished(self, rollout_id: str) -> web.Response | None:
        if not self.recorder.is_finished(rollout_id) or self.recorder.has_calls(rollout_id):
            return None
        message = f"rollout {rollout_id!r} is finished: use a new id for the next rollout"
        return json_error(409, "rollout_finished", message)

    async def outcome(self, request: web.Request) -> web.Response:
        from aiohttp import web

        rollout_id = request.match_info["rollout_id"]
        body = await _admin_body(request)
        if isinstance(body, web.Response):
            return body
        problem = _outcome_problem(body)
        if problem:
            return json_error(400, "invalid_request", problem)
        outcome: dict[str, Any] = {k: v for k, v in body.items() if k in _OUTCOME_KEYS}
        refused = self._refuse_finished(rollout_id)
        if refused is not None:
            return refused
        await self.recorder.settled(rollout_id)  # spooled after the calls recorded so far
        try:
            self.recorder.set_outcome(rollout_id, outcome)
        except SpoolError as e:
            return _not_recorded("outcome", e)
        return web.json_response({"rollout_id": rollout_id, "outcome": outcome})

    async def finish(self, request: web.Request) -> web.Response:
        from aiohttp import web

        rollout_id = request.match_info["rollout_id"]
        body = await _admin_body(request)
        if isinstance(body, web.Response):
            return body
        status = body.get("status")
        if status is not None and status not in _STATUSES:
            allowed = ", ".join(sorted(_STATUSES))
            return json_error(400, "invalid_request", f"status must be one of {allowed}")
        # Calls still in flight (a disconnect not noticed yet) belong to the rollout too.
        waited = 0.0
        while self.recorder.inflight(rollout_id) and waited < self.finish_wait_s:
            await asyncio.sleep(0.01)
            waited += 0.01
        await self.recorder.settled(rollout_id)  # its calls' records are spooled first
        refused = self._refuse_finished(rollout_id)
        if refused is not None:
            return refused
        try:
            calls = self.recorder.finish(rollout_id, status)
        except SpoolError as e:  # still open: the finish can be sent again
            return _not_recorded("finish", e)
        except KeyError:
            return json_error(404, "not_found", f"rollout {rollout_id!r} has no recorded calls")
        return web.json_response({"rollout_id": rollout_id, "calls": calls, "queued": True})

    # ------------------------------------------------------------------ forwarding

    async def forward(self, request: web.Request) -> web.StreamResponse:
        path = "/v1/" + request.match_info["tail"]
        dialect = ENDPOINTS.get(path)
        raw = await request.read()
        if dialect is None or request.method != "POST":
            return await self.forwarder.passthrough(request, path, raw)
        rollout_id = request.match_info.get("rollout_id") or request.headers.get(ROLLOUT_HEADER)
        try:
            meta = header_meta(request.headers, self.default_meta)
        except ValueError as e:
            return json_error(400, "invalid_request", str(e))
        auto = not rollout_id
        rid = self.recorder.auto_rollout_id() if auto else str(rollout_id)
        if self.recorder.is_finished(rid):
            message = f"rollout {rid!r} is finished: send the next rollout's calls under a new id"
            return json_error(409, "rollout_finished", message)
        try:  # the request is spooled first: a failing spool refuses before the upstream bills
            ticket, body, stream = await self._begin(request, rid, meta, dialect, path, raw)
        except SpoolError as e:
            return _not_recorded("call", e)
        call = Call(ticket, dialect, path, body, stream, size=len(raw))
        try:
            return await self.forwarder.model_call(request, call, raw)
        except SpoolError as e:  # answered by the upstream, but not durable: never answered
            call.failed = True
            return _not_recorded("call", e)
        finally:
            if not call.recorded:  # cancelled (server shutdown) or an unexpected error
                call.recorded, call.failed = True, True
                with contextlib.suppress(SpoolError):
                    await self._record(
                        call, None, None, "the proxy stopped before the call completed"
                    )
            if auto and self.recorder.has_calls(rid):
                try:
                    self.recorder.finish(rid, "error" if call.failed else "completed")
                except SpoolError as e:  # stays open; the idle close commits it later
                    log.error("cannot finish %s: %s", rid, e)

    async def _begin(
        self,
        request: web.Request,
        rid: str,
        meta: Mapping[str, Any],
        dialect: str,
        path: str,
        raw: bytes,
    ) -> tuple[CallTicket, Any, bool]:
        """Spool the request (raises `SpoolError`): its ticket, recorded copy and stream flag.

        A big one is not parsed here (one `json.loads` of 16 MiB holds the loop for tens of
        ms): its decoded bytes go to the recording process, which says whether it streams.
        """
        encoding = request.headers.get("Content-Encoding")
        plain = _decoded(raw, encoding) if self.recorder.in_process(len(raw)) else None
        if plain is not None:
            ticket, spooled = await self.recorder.begin_big_call_async(
                rid, meta, body=plain, dialect=dialect, endpoint=path
            )
            return ticket, spooled, spooled.stream
        body, _ = json_copy(raw, encoding)
        stream = isinstance(body, dict) and bool(body.get("stream"))
        ticket = await self.recorder.begin_call_async(
            rid,
            meta,
            request=body,
            dialect=dialect,
            endpoint=path,
            stream=stream,
            size=len(raw),
        )
        return ticket, body, stream

    async def _record(
        self, call: Call, response: Any, status: int | None, error: str | None
    ) -> None:
        await self.recorder.end_call_async(
            call.ticket,
            dialect=call.dialect,
            endpoint=call.endpoint,
            stream=call.stream,
            request=call.request,
            response=response,
            status_code=status,
            error=error,
            size=call.size + call.response_bytes,
        )


def _decoded(raw: bytes, encoding: str | None) -> bytes | None:
    """The body decoded (None if it cannot be: then `json_copy` says why, as for any call).

    Raises:
        BodyTooLarge: Decoded, it would exceed the decoded-size limit.
    """
    try:
        return decode_body(raw, encoding)
    except ValueError:
        return None


def _not_recorded(what: str, error: SpoolError) -> web.Response:
    """503 for a call, outcome or finish the proxy cannot make durable (never answered)."""
    message = f"the proxy could not record the {what}, so it was not answered: {error}"
    return json_error(503, "proxy_not_recording", message)


async def _admin_body(request: web.Request) -> dict[str, Any] | web.Response:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        return json_error(400, "invalid_request", f"the body is not valid JSON: {e}")
    if not isinstance(body, dict):
        return json_error(400, "invalid_request", "the body must be a JSON object")
    return body


def _outcome_problem(body: Mapping[str, Any]) -> str | None:
    resolved, reward = body.get("resolved"), body.get("reward")
    if resolved is not None and not isinstance(resolved, bool):
        return "resolved must be true, false or null"
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        return "reward must be a number or null"
    rewards = body.get("rewards")
    if rewards is not None and not (
        isinstance(rewards, dict)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rewards.values())
    ):
        return "rewards must be an object of numbers"
    if body.get("details") is not None and not isinstance(body["details"], dict):
        return "details must be a JSON object"
    unknown = set(body) - set(_OUTCOME_KEYS)
    return f"unknown field(s): {', '.join(sorted(unknown))}" if unknown else None


def create_proxy_app(
    upstream: str,
    recorder: Recorder,
    *,
    token: str | None = None,
    default_meta: Mapping[str, Any] | None = None,
    timeout_s: float = 600.0,
    finish_wait_s: float = 30.0,
    max_body_bytes: int | None = None,
    limits: ServerLimits | None = None,
) -> web.Application:
    """Build the proxy application.

    Routes: `POST /v1/chat/completions`, `/v1/responses`, `/v1/messages` (recorded), any other
    `/v1/...` (relayed only), the same under `/rollouts/{id}/v1/...`,
    `POST /rollouts/{id}/outcome`, `POST /rollouts/{id}/finish` and `GET /health`.

    Args:
        upstream: The model server's URL (`http://host:8000` or its `.../v1` base URL).
        recorder: Where calls go; started by the caller (`Recorder.start`).
        token: If set, every route but `/health` needs `X-Trajlake-Token: <token>`.
        default_meta: Tags for rollouts whose calls carry no `X-Trajlake-*` headers
            (`task_id`, `generation`, `run_id`, `harness`).
        timeout_s: Longest wait for the upstream's next bytes (then 504, recorded).
        finish_wait_s: Longest wait of `finish` for the rollout's calls in flight.
        max_body_bytes: Largest request body accepted (overrides `limits.max_body_bytes`).
        limits: Body, decoding, timeout, in-flight and connection limits (`ServerLimits`:
            64 MiB bodies, 256 MiB decoded, 20 s heads, 30 s body silence, 1024 in flight).

    Raises:
        ValueError: `upstream` is not an http(s) URL, or a limit is not positive.
        MissingExtra: aiohttp is not installed.
    """
    require_aiohttp()
    if timeout_s <= 0 or finish_wait_s < 0:
        raise ValueError("timeout_s must be > 0, finish_wait_s >= 0")
    limits = _limits(limits, max_body_bytes)
    if token is not None and not token:
        raise ValueError("token must not be empty")
    proxy = _Proxy(upstream, recorder, token, default_meta or {}, timeout_s, finish_wait_s)
    app: web.Application = limited_application(limits, proxy.middlewares)
    app.cleanup_ctx.append(proxy.forwarder.session)
    app.cleanup_ctx.append(proxy.housekeeping)
    app.router.add_get("/health", proxy.health)
    app.router.add_post("/rollouts/{rollout_id}/outcome", proxy.outcome)
    app.router.add_post("/rollouts/{rollout_id}/finish", proxy.finish)
    app.router.add_route("*", "/rollouts/{rollout_id}/v1/{tail:.*}", proxy.forward)
    app.router.add_route("*", "/v1/{tail:.*}", proxy.forward)
    return app


def _limits(limits: ServerLimits | None, max_body_bytes: int | None) -> ServerLimits:
    limits = limits if limits is not None else ServerLimits()
    if max_body_bytes is None:
        return limits
    return replace(limits, max_body_bytes=max_body_bytes)


# --------------------------------------------------------------------------- running it


def default_spool_dir(lake_uri: str) -> Path:
    """Where a proxy for this lake spools by default (the same for every restart)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(lake_uri.encode()).hexdigest()[:16]
    return Path(cache) / "trajlake" / "proxy-spool" / key


def _check_bind(host: str, port: int, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise ValueError(
            f"refusing to listen on non-loopback host {host!r} without a token: pass --token "
            f"so that clients must send {TOKEN_HEADER}"
        )
    check_port(port)


@dataclass(frozen=True)
class _Options:
    upstream: str
    host: str
    port: int
    token: str | None
    default_meta: dict[str, Any]
    timeout_s: float
    limits: ServerLimits


def _recorder(
    lake: LakeStore, spool_dir: str | os.PathLike[str] | None, run_id: str | None, **kw: Any
) -> Recorder:
    where = spool_dir if spool_dir is not None else default_spool_dir(lake.uri)
    _check_spool_outside(Path(where), lake.uri)
    return Recorder(lake, where, run_id=run_id, **kw)


def _check_spool_outside(spool: Path, lake_uri: str) -> None:
    """Refuse a spool inside the lake's folder: it would sit among the lake's own files."""
    if "://" in lake_uri:
        return
    lake_dir, where = Path(lake_uri).resolve(), spool.resolve()
    if where == lake_dir or lake_dir in where.parents:
        raise ValueError(
            f"the spool folder {spool} is inside the lake {lake_uri}: pass a --spool-dir "
            "outside it (the default is under ~/.cache/trajlake/proxy-spool)"
        )


def run_proxy(
    lake: LakeStore,
    upstream: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    generation: int | None = None,
    run_id: str | None = None,
    harness: str | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = 600.0,
    batch_size: int = 64,
    commit_seconds: float = 1.0,
    fsync: bool = False,
    redact_personal: bool = False,
    allow_list: AllowList | None = None,
    limits: ServerLimits | None = None,
    idle_close_s: float | None = 1800.0,
    ready: Callable[[str, int], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Record every model call through the proxy into `lake` until SIGTERM, Ctrl-C or `stop`.

    The spool is replayed first (rollouts a killed proxy had answered are committed or
    restored); on shutdown, finished rollouts are committed and unfinished ones stay spooled.
    Blocks and prints nothing.

    Args:
        lake: The lake that receives `trajectories`, `messages` and `calls`.
        upstream: The model server's URL.
        host: Interface to bind; anything but loopback needs a `token`.
        port: TCP port; 0 picks a free one (passed to `ready`).
        token: Secret clients send as `X-Trajlake-Token`.
        generation, run_id, harness: Tags of rollouts whose calls carry no such headers.
        spool_dir: Write-ahead spool directory (default: `default_spool_dir(lake.uri)`).
        timeout_s: Longest wait for the upstream's next bytes.
        batch_size: Most rollouts per commit.
        commit_seconds: How long a finished rollout waits for others to share its commit.
        fsync: fsync every spooled line (power-loss safe; without it a killed process still
            loses nothing already answered).
        redact_personal: also redact personal data (e-mail addresses, phone numbers); secrets
            are always redacted, in the lake and in the spool.
        allow_list: values never redacted.
        limits: What clients may send and hold (`ServerLimits`; its defaults if None).
        idle_close_s: Close (commit, status error) a rollout without a call for this long.
        ready: Called as `ready(host, port)` once the proxy is listening.
        stop: Set it (from any thread) to shut the proxy down.

    Raises:
        ValueError: Non-loopback `host` without a token, a bad port or upstream URL.
        MissingExtra: aiohttp is not installed.
        SpoolError: The spool directory cannot be written.
    """
    require_aiohttp()
    _check_bind(host, port, token)
    meta = {"generation": generation, "run_id": run_id, "harness": harness}
    options = _Options(upstream, host, port, token, meta, timeout_s, limits or ServerLimits())
    upstream_root(upstream)  # fail before replaying anything
    with _recorder(
        lake,
        spool_dir,
        run_id,
        batch_size=batch_size,
        max_seconds=commit_seconds,
        fsync=fsync,
        redact_personal=redact_personal,
        allow_list=allow_list,
        idle_close_s=idle_close_s,
    ) as recorder:
        asyncio.run(_serve(recorder, options, ready, stop))


async def _serve(
    recorder: Recorder,
    options: _Options,
    ready: Callable[[str, int], None] | None,
    stop: threading.Event | None,
) -> None:
    app = create_proxy_app(
        options.upstream,
        recorder,
        token=options.token,
        default_meta=options.default_meta,
        timeout_s=options.timeout_s,
        limits=options.limits,
    )
    # auto_decompress off: a compressed request body (Codex sends zstd) is forwarded as sent.
    await serve_until_stopped(
        app,
        options.host,
        options.port,
        ready=ready,
        stop=stop,
        access_log=None,
        auto_decompress=False,
    )


class ProxyThread:
    """The proxy served from a background thread (a training driver embedding it; tests).

    Args:
        lake, upstream: As for `run_proxy`.
        spool_dir: As for `run_proxy`.
        **options: `host`, `port` (default 0: a free one), `token`, `generation`, `run_id`,
            `harness`, `timeout_s`, `batch_size`, `commit_seconds`, `limits` (`ServerLimits`).
    """

    def __init__(
        self,
        lake: LakeStore,
        upstream: str,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> None:
        require_aiohttp()
        host, port, token = options.get("host", "127.0.0.1"), options.get("port", 0), None
        token = options.get("token")
        _check_bind(host, port, token)
        meta = {k: options.get(k) for k in ("generation", "run_id", "harness")}
        limits = options.get("limits") or ServerLimits()
        timeout_s = options.get("timeout_s", 600.0)
        self._options = _Options(upstream, host, port, token, meta, timeout_s, limits)
        upstream_root(upstream)
        commit = {"batch_size": options.get("batch_size", 64)}
        commit["max_seconds"] = options.get("commit_seconds", 1.0)
        commit["redact_personal"] = options.get("redact_personal", False)
        commit["allow_list"] = options.get("allow_list")
        commit["idle_close_s"] = options.get("idle_close_s", 1800.0)
        self.recorder = _recorder(lake, spool_dir, meta["run_id"], **commit)
        self.url = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ProxyThread:
        """Replay the spool, start serving and return once the proxy listens."""
        self.recorder.start()
        listening, failure = threading.Event(), []

        def ready(host: str, port: int) -> None:
            self.url = f"http://{host}:{port}"
            listening.set()

        def serve() -> None:
            try:
                asyncio.run(_serve(self.recorder, self._options, ready, self._stop))
            except BaseException as e:  # re-raised by start() in the caller's thread
                failure.append(e)
                listening.set()

        self._thread = threading.Thread(target=serve, name="trajlake-proxy", daemon=True)
        self._thread.start()
        listening.wait()
        if failure:
            self.recorder.close()
            raise failure[0]
        return self

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Commit every finished rollout now (see `Recorder.flush`)."""
        return self.recorder.flush(timeout)

    def stop(self) -> None:
        """Stop serving, commit finished rollouts, keep unfinished ones spooled."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(30)
            self._thread = None
        self.recorder.close()

    def __enter__(self) -> ProxyThread:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
