"""The recording proxy's HTTP server: forwards model calls unchanged and records each one.

This module builds the application (`create_proxy_app`) and runs it (`run_proxy`, or
`ProxyThread` in a background thread), with the spool folder and bind checks that go with it.
The routes themselves (auth, rollout identification, outcome and finish, forwarded calls) are
`_handlers`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from trajlake._http_limits import ServerLimits
from trajlake._http_server import (
    check_port,
    is_loopback,
    limited_application,
    serve_until_stopped,
)
from trajlake.errors import missing_extra
from trajlake.proxy._forward import upstream_root
from trajlake.proxy._handlers import ROLLOUT_HEADER as ROLLOUT_HEADER  # beside TOKEN_HEADER
from trajlake.proxy._handlers import TOKEN_HEADER, Handlers
from trajlake.proxy.recorder import Recorder

if TYPE_CHECKING:
    from aiohttp import web

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


def require_aiohttp() -> None:
    """Raise MissingExtra when aiohttp (the `proxy` extra) is not installed."""
    try:
        import aiohttp  # noqa: F401
    except ImportError as e:
        raise missing_extra("aiohttp", "proxy") from e


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
    proxy = Handlers(upstream, recorder, token, default_meta or {}, timeout_s, finish_wait_s)
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
