"""The viewer's HTTP server and CLI: endpoints over real HTTP, the page and its static files, and
security (loopback unless a token, the token's header and cookie flows, read-only methods, path
traversal, the security headers on every response)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.view import SECURITY_HEADERS, STATIC_DIR, ViewData, view_in_background

TOKEN = "s3cret-token"


def _request(
    base: str, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One raw request (no redirects followed, the path sent as written)."""
    url = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.fixture
def server(sample_lake: tl.Lake) -> Iterator[str]:
    with view_in_background(sample_lake) as url:
        yield url


@pytest.fixture
def token_server(sample_lake: tl.Lake) -> Iterator[str]:
    with view_in_background(sample_lake, token=TOKEN) as url:
        yield url


def _json(base: str, path: str, **kw: Any) -> tuple[int, Any]:
    status, _, body = _request(base, path, **kw)
    return status, json.loads(body)


def test_http_payloads_equal_the_data_layer(sample_lake: tl.Lake, server: str) -> None:
    data = ViewData(sample_lake)
    try:
        for endpoint, params in [
            ("meta", {}),
            ("groups", {"by": "task_id", "where": "n_turns > 10"}),
            ("tasks", {"limit": "3"}),
            ("trajectory", {"id": "sample-0-0000002"}),
            ("candidates", {"task_id": "django__django-1000"}),
            ("lake", {}),
        ]:
            status, body = _json(server, f"/api/{endpoint}?{urllib.parse.urlencode(params)}")
            assert status == 200, body
            assert body == data.answer(endpoint, params)
        status, runs = _json(server, "/api/runs?where=n_turns%20%3E%2010&limit=7")
        expected = data.answer("runs", {"where": "n_turns > 10", "limit": "7"})
        assert runs | {"elapsed_ms": 0} == expected | {"elapsed_ms": 0}
    finally:
        data.close()


def test_errors_are_json_with_the_field(server: str) -> None:
    status, body = _json(server, "/api/runs?where=" + urllib.parse.quote("nope("))
    assert status == 400 and body["field"] == "where" and "error" in body
    status, body = _json(server, "/api/trajectory?id=unknown")
    assert status == 404 and body["field"] == "id"
    status, body = _json(server, "/api/unknown")
    assert status == 404 and "error" in body


def test_page_and_static_files(server: str) -> None:
    index = STATIC_DIR / "index.html"
    if not index.is_file():
        pytest.skip("the page is not in the static folder")
    status, headers, body = _request(server, "/")
    assert status == 200 and body == index.read_bytes()  # served unchanged
    assert headers["Content-Type"].startswith("text/html")
    scripts = sorted(p.name for p in STATIC_DIR.glob("*.js"))
    if scripts:
        status, headers, body = _request(server, f"/static/{scripts[0]}")
        assert status == 200 and body == (STATIC_DIR / scripts[0]).read_bytes()
        assert headers["Content-Type"].startswith("text/javascript")


@pytest.mark.parametrize(
    "path",
    [
        "/static/../_app.py",
        "/static/%2e%2e/_app.py",
        "/static/..%2f_app.py",
        "/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/static//etc/passwd",
    ],
)
def test_path_traversal_is_refused(server: str, path: str) -> None:
    status, _, body = _request(server, path)
    assert status == 404
    assert b"import" not in body and b"root:" not in body


def test_only_get_and_head(server: str) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = _request(server, "/api/meta", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, _, body = _request(server, "/api/meta", method="HEAD")
    assert status == 200 and body == b""


def test_security_headers_on_every_response(server: str, token_server: str) -> None:
    for base, path in [
        (server, "/api/meta"),
        (server, "/api/nope"),
        (server, "/static/x"),
        (token_server, "/api/meta"),
        (server, "/"),
    ]:
        _, headers, _ = _request(base, path)
        for name, value in SECURITY_HEADERS.items():
            assert headers[name] == value, (base, path, name)
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]


def test_token_is_required_by_header_or_cookie(token_server: str) -> None:
    status, headers, _ = _request(token_server, "/api/meta")
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    wrong = {"Authorization": "Bearer nope"}
    assert _request(token_server, "/api/meta", headers=wrong)[0] == 401
    right = {"Authorization": f"Bearer {TOKEN}"}
    assert _request(token_server, "/api/meta", headers=right)[0] == 200
    # ?token= once: a cookie, and a redirect to the URL without the token.
    status, headers, _ = _request(token_server, f"/api/runs?limit=2&token={TOKEN}")
    assert status == 303 and headers["Location"] == "/api/runs?limit=2"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    status, _, body = _request(token_server, "/api/runs?limit=2", headers=jar)
    assert status == 200 and len(json.loads(body)["rows"]) == 2
    assert _request(token_server, "/api/meta?token=wrong")[0] == 401
    assert (
        _request(token_server, "/api/meta", headers={"Cookie": "trajlake_view_token=no"})[0] == 401
    )


def test_cli_refuses_a_public_bind_without_token(tmp_path: Path) -> None:
    missing = tmp_path / "never-created"
    result = CliRunner().invoke(cli, ["view", "--lake", str(missing), "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "refusing to serve the viewer on non-loopback host '0.0.0.0' without a token" in (
        result.output
    )
    assert not missing.exists()  # refused before the lake was opened, nothing bound


@pytest.mark.long  # a fresh interpreter: ~5-10 s on 2 shared cores
def test_cli_serves_and_prints_the_url_with_token(sample_lake: tl.Lake) -> None:
    command = [
        sys.executable,
        "-m",
        "trajlake",
        "view",
        "--lake",
        sample_lake.uri,
        "--port",
        "0",
        "--token",
        TOKEN,
    ]
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "trajlake view: serving" in line, line
        url = line.split(" on ")[1].split()[0]
        assert url.endswith(f"/?token={TOKEN}")
        base = url.split("/?")[0]
        status, headers, _ = _request(base, f"/?token={TOKEN}")
        assert status == 303 and headers["Location"] == "/"
        assert _request(base, "/api/meta", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    finally:
        process.terminate()
        code = process.wait(30)
        assert process.stderr is not None
        process.stderr.close()
    assert code == 0
