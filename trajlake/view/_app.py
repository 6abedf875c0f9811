"""The viewer's HTTP server: the page, its static files and the JSON API, read-only.

Security (the page may be opened by anyone who can reach the port): loopback by default, and any
other bind needs a token; with a token every request carries it (`Authorization: Bearer T`, or
`?token=T` once, which sets an HttpOnly SameSite=Strict cookie and redirects to the URL without
it); only GET and HEAD; every response carries a strict Content-Security-Policy (the page loads
nothing from elsewhere), `nosniff` and `no-referrer`. Static files are only those under the
package's static folder. Lake queries run in worker threads (DuckDB releases the GIL).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import mimetypes
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake._http_limits import ServerLimits
from trajlake._http_server import (
    check_port,
    is_loopback,
    limited_application,
    running_in_background,
    serve_until_stopped,
)
from trajlake.errors import TrajlakeError, missing_extra
from trajlake.view._params import ViewRequestError
from trajlake.view._service import ViewData

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

    from trajlake.lake import LakeStore

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The page: index.html and its assets (vendored; no CDN)."""
COOKIE = "trajlake_view_token"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
VIEW_LIMITS = ServerLimits(max_body_bytes=64 * 1024, max_inflight=256)
"""GET requests carry no body worth the name; at most 256 requests are answered at once."""
_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def _require_aiohttp() -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError as e:
        raise missing_extra("aiohttp", "view") from e


def _json_error(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    from aiohttp import web

    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status, headers=headers)


class _Site:
    """The request handlers and middlewares of one viewer."""

    def __init__(self, data: ViewData, token: str | None, static_dir: Path) -> None:
        self.data, self.token, self.static_dir = data, token, static_dir.resolve()

    async def index(self, request: web.Request) -> web.StreamResponse:
        return self._file(self.static_dir / "index.html")

    async def static(self, request: web.Request) -> web.StreamResponse:
        relative = request.match_info["path"]
        path = (self.static_dir / relative).resolve()
        # Only files inside the static folder: `..`, absolute paths and links out are refused.
        if not path.is_relative_to(self.static_dir) or not path.is_file():
            return _json_error(404, f"no static file {relative!r}", "path")
        return self._file(path)

    def _file(self, path: Path) -> web.StreamResponse:
        from aiohttp import web

        if not path.is_file():
            return _json_error(404, f"{path.name} is missing from the viewer's static folder")
        kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
        headers = {"Cache-Control": "no-cache"}
        return web.Response(
            body=path.read_bytes(), content_type=kind or "application/octet-stream", headers=headers
        )

    async def api(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        endpoint = request.match_info["endpoint"]
        params = {k: request.query.getone(k) for k in request.query if k != "token"}
        try:
            payload = await asyncio.to_thread(self.data.answer, endpoint, params)
        except ViewRequestError as e:
            return web.json_response(e.payload(), status=e.status)
        except TrajlakeError as e:
            return _json_error(500, str(e))
        except Exception as e:  # a bug: the page still gets JSON it can show
            log.exception("GET %s failed", request.path_qs)
            return _json_error(500, f"{type(e).__name__}: {e}")
        return web.json_response(payload)

    @property
    def middlewares(self) -> list[Any]:
        from aiohttp import web

        @web.middleware
        async def read_only(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method not in ("GET", "HEAD"):
                message = f"{request.method} is not allowed: the viewer is read-only"
                return _json_error(405, message, headers={"Allow": "GET, HEAD"})
            return await handler(request)

        @web.middleware
        async def authenticated(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self.token is None:
                return await handler(request)
            given = request.query.get("token")
            if given is not None:
                if not _same(given, self.token):
                    return _json_error(401, "wrong token", "token")
                return _redirect_with_cookie(request, self.token)
            header = request.headers.get("Authorization", "")
            cookie = request.cookies.get(COOKIE, "")
            if _same(header, f"Bearer {self.token}") or _same(cookie, self.token):
                return await handler(request)
            message = "this viewer needs its token: open the URL it printed (with ?token=…)"
            return _json_error(401, message, headers={"WWW-Authenticate": "Bearer"})

        @web.middleware
        async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                return await handler(request)
            except web.HTTPException as e:
                if e.status < 400:
                    raise
                return _json_error(e.status, f"{request.method} {request.path}: {e.reason}")

        return [errors_as_json, read_only, authenticated]


def _same(given: str, expected: str) -> bool:
    # Constant-time: the token must not leak through response timing.
    return hmac.compare_digest(given.encode(), expected.encode())


def _redirect_with_cookie(request: web.Request, token: str) -> web.StreamResponse:
    from aiohttp import web

    query = [(k, v) for k, v in request.query.items() if k != "token"]
    target = request.path + ("?" + urllib.parse.urlencode(query) if query else "")
    response = web.Response(status=303, headers={"Location": target})
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
    return response


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value


def create_app(
    data: ViewData, *, token: str | None = None, static_dir: Path | None = None
) -> web.Application:
    """The viewer application over `data`: `/`, `/static/…` and `/api/<endpoint>`.

    Raises:
        ValueError: `token` is empty.
        MissingExtra: aiohttp is not installed.
    """
    _require_aiohttp()
    if token is not None and not token:
        raise ValueError("token must not be empty")
    site = _Site(data, token, static_dir or STATIC_DIR)
    app: web.Application = limited_application(VIEW_LIMITS, site.middlewares)
    app.on_response_prepare.append(_security_headers)
    app.router.add_get("/", site.index)
    app.router.add_get("/index.html", site.index)
    app.router.add_get("/static/{path:.+}", site.static)
    app.router.add_get("/api/{endpoint}", site.api)
    return app


def check_bind(host: str, token: str | None) -> None:
    """ValueError unless `host` is loopback or a token is set."""
    if not is_loopback(host) and not token:
        raise ValueError(
            f"refusing to serve the viewer on non-loopback host {host!r} without a token: "
            "pass --token so that only people with it can read the lake"
        )


def run_view(
    store: LakeStore,
    *,
    at: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    ready: Callable[[str, int], None] | None = None,
    stop: threading.Event | None = None,
    static_dir: Path | None = None,
) -> None:
    """Serve the viewer over `store` until SIGTERM, Ctrl-C or `stop`; blocks, prints nothing.

    Args:
        store: The lake (opened by the caller, read only).
        at: Default snapshot of requests without `at` (a tag or number; None: the latest).
        host: Interface to bind; anything but loopback needs a `token`.
        port: TCP port; 0 picks a free one (passed to `ready`).
        token: Secret every request must carry (see the module docstring).
        ready: Called as `ready(host, port)` once listening.
        stop: Set it (from any thread) to shut the server down.
        static_dir: The page's folder (default: the package's).

    Raises:
        ValueError: A non-loopback `host` without `token`, or a bad port.
        ViewRequestError: `at` names no snapshot or tag.
        MissingExtra: aiohttp is not installed.
    """
    check_bind(host, token)
    check_port(port)
    data = ViewData(store, at=at, mode="server")
    try:
        app = create_app(data, token=token, static_dir=static_dir)
        asyncio.run(serve_until_stopped(app, host, port, ready=ready, stop=stop))
    finally:
        data.close()


@contextlib.contextmanager
def view_in_background(
    store: LakeStore, *, timeout_s: float = 30.0, **options: Any
) -> Iterator[str]:
    """Serve the viewer from a background thread; yields its base URL (`http://HOST:PORT`).

    `options` go to `run_view` (default port 0: a free one). The server stops when the block
    ends. For tests, benchmarks and notebooks.
    """
    serve = functools.partial(run_view, store, **{"port": 0, **options})
    with running_in_background(serve, "viewer", timeout_s=timeout_s) as url:
        yield url
