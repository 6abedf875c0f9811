"""Running an aiohttp application until asked to stop: shared by `trajlake serve` and the
recording proxy (bind checks, SIGTERM, stopping from another thread, the `ServerLimits` of
`trajlake._http_limits` on every connection and request).

aiohttp is imported lazily because it is an optional extra (`serve`, `proxy`): importing this module
must not need it. Both servers use this one loop so they refuse, time out and shut down alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from trajlake._http_limits import ConnectionGuard, ServerLimits, limits_middleware

_BACKLOG = 1024  # bursts of connections (many clients starting at once) are queued, not reset


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(port: Any) -> None:
    """ValueError unless `port` is an int in 0..65535 (0: a free one)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in 0..65535, got {port!r}")


# Each application's limits, for serve_until_stopped (aiohttp's AppKey cannot be made lazily:
# it reads the module from the stack and fails outside an import).
_LIMITS: weakref.WeakKeyDictionary[Any, ServerLimits] = weakref.WeakKeyDictionary()


def limited_application(limits: ServerLimits, middlewares: Sequence[Any] = ()) -> Any:
    """A `web.Application` that enforces `limits`: body size, in-flight bounds, JSON errors
    (its middleware comes first); `serve_until_stopped` takes the connection limits from it."""
    from aiohttp import web

    app = web.Application(
        client_max_size=limits.max_body_bytes,
        middlewares=[limits_middleware(limits), *middlewares],
    )
    _LIMITS[app] = limits
    return app


async def serve_until_stopped(
    app: Any,
    host: str,
    port: int,
    *,
    ready: Callable[[str, int], None] | None = None,
    stop: threading.Event | None = None,
    **runner_options: Any,
) -> None:
    """Serve `app` on host:port until SIGTERM (on the main thread), Ctrl-C or `stop` is set.

    `ready(host, port)` is called once listening, with the real port when `port` is 0.
    Connections are guarded by the app's `ServerLimits` (see `limited_application`; the
    defaults otherwise). On shutdown the listener closes, connections not being answered
    (idle, slow heads, slow bodies) are closed at once, and requests being answered get
    `shutdown_s` to finish; then they are cancelled.
    """
    from aiohttp import web

    limits = _LIMITS.get(app) or ServerLimits()
    # A refused body is read (and dropped) for 1 s so the client sees the answer, not a reset.
    options = {"keepalive_timeout": limits.keepalive_s, "lingering_time": 1.0, **runner_options}
    runner = web.AppRunner(app, shutdown_timeout=limits.shutdown_s, **options)
    await runner.setup()
    guard = ConnectionGuard(limits)
    listener = None
    try:
        listener = await asyncio.get_running_loop().create_server(
            guard.protocol_factory(runner.server), host, port, backlog=_BACKLOG
        )
        if ready is not None:
            ready(host, int(listener.sockets[0].getsockname()[1]))
        await _wait_for_stop(stop)
    finally:
        if listener is not None:
            listener.close()  # not wait_closed(): it would wait for every connection
        guard.close_waiting()
        await runner.cleanup()
        await guard.stop()


async def _wait_for_stop(stop: threading.Event | None) -> None:
    loop, done = asyncio.get_running_loop(), asyncio.Event()
    # SIGINT is handled by asyncio.run; SIGTERM (container stop) should end just as cleanly.
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, done.set)
    try:
        while not done.is_set() and not (stop is not None and stop.is_set()):
            # A threading.Event cannot wake the loop, so it is polled.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.05 if stop is not None else None)
    finally:
        if on_main:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGTERM)


@contextlib.contextmanager
def running_in_background(
    serve: Callable[..., None], what: str, *, timeout_s: float = 30.0
) -> Iterator[str]:
    """Run `serve(ready=..., stop=...)` (a blocking `serve_until_stopped` loop) in a daemon
    thread; yields its base URL (`http://HOST:PORT`) once listening, and stops it when the
    block ends. A failure to start is raised here, naming `what`."""
    bound: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()

    def ready(host: str, port: int) -> None:
        bound.update(host=host, port=port)
        started.set()

    def run() -> None:
        try:
            serve(ready=ready, stop=stop)
        except BaseException as e:  # surfaced to the caller below
            bound["error"] = e
            started.set()

    thread = threading.Thread(target=run, name=f"trajlake-{what}", daemon=True)
    thread.start()
    try:
        if not started.wait(timeout_s) or "error" in bound:
            raise RuntimeError(f"the {what} did not start: {bound.get('error')}")
        yield f"http://{bound['host']}:{bound['port']}"
    finally:
        stop.set()
        thread.join(timeout_s)
