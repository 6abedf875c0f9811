"""Running an aiohttp application until asked to stop: shared by `trajlake serve` and the
recording proxy (bind checks, SIGTERM, stopping from another thread). aiohttp is imported by
the callers, lazily."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import threading
from collections.abc import Callable
from typing import Any


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
    Requests in flight get a few seconds to finish on shutdown; then they are cancelled.
    """
    from aiohttp import web

    runner = web.AppRunner(app, shutdown_timeout=5.0, **runner_options)
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
