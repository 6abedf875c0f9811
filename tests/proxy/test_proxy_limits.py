"""The recording proxy under hostile clients, over real sockets on loopback: slow heads and
bodies, oversized and compressed-bomb bodies, deep JSON, too many calls or connections, and
SIGTERM with slow clients connected."""

from __future__ import annotations

import functools
import gzip
import json
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import openai
import pytest
import requests
import zstandard
from _slow_clients import closed_within, connect, dribbling, head, send_quietly
from click.testing import CliRunner
from stub_upstream import Hang, StubUpstream

import trajlake as tl
from trajlake.cli.proxy_cmd import proxy as proxy_command
from trajlake.proxy.server import ProxyThread, ServerLimits

StartProxy = Callable[..., ProxyThread]
CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

# `lake` (tests/conftest.py) and `start_proxy` (tests/proxy/conftest.py) are shared fixtures.


Sockets = Callable[[str], socket.socket]


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    """Connect raw sockets to a server: `sockets(url)`; all are closed after the test."""
    made: list[socket.socket] = []

    def make(url: str) -> socket.socket:
        made.append(connect(url))
        return made[-1]

    yield make
    for sock in made:
        sock.close()


class _Upstream(BaseHTTPRequestHandler):
    """A model server that takes any body size (the stub's aiohttp caps bodies at 1 MiB) and
    answers 400 to what it cannot parse, as real model servers do."""

    sizes: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.sizes.append(len(raw))
        try:
            json.loads(raw)
            status, body = 200, CHAT_ANSWER
        except (ValueError, RecursionError):
            status, body = 400, {"error": {"type": "invalid_request_error", "message": "bad"}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


CHAT_ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


@pytest.fixture
def upstream() -> Iterator[str]:
    """The URL of an `_Upstream` served from a background thread."""
    _Upstream.sizes = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def _fast(**changes: Any) -> ServerLimits:
    """Limits with short timeouts, so that a test sees them fire in about a second."""
    base = {"header_timeout_s": 1.0, "body_idle_s": 1.0, "body_timeout_s": 3.0}
    return ServerLimits(**(base | changes))


def _chat(url: str, **kw: Any) -> requests.Response:
    return requests.post(f"{url}{CHAT}", json=BODY, timeout=10, **kw)


def _calls(lake: tl.Lake) -> int:
    return int(lake.sql("SELECT count(*) AS n FROM calls").to_dicts()[0]["n"])


# --------------------------------------------------------------------------- slow clients


def test_slow_head_is_closed(
    stub_upstream: StubUpstream, start_proxy: StartProxy, sockets: Sockets
) -> None:
    proxy = start_proxy(stub_upstream.url, limits=_fast())
    sock = sockets(proxy.url)
    started = time.monotonic()
    line = head(proxy.url, CHAT, 2)
    for k in range(12):  # one byte of the head every 0.25 s: 3 s if never stopped
        if not send_quietly(sock, line[k : k + 1]):
            break
        time.sleep(0.25)
    closed, answer = closed_within(sock, 2.0)
    assert closed and time.monotonic() - started < 3.5
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert _chat(proxy.url).status_code == 200  # the proxy itself is fine


def test_silent_connection_is_closed(
    stub_upstream: StubUpstream, start_proxy: StartProxy, sockets: Sockets
) -> None:
    proxy = start_proxy(stub_upstream.url, limits=_fast())
    sock = sockets(proxy.url)
    closed, _ = closed_within(sock, 3.0)
    assert closed


def test_slow_body_is_closed(
    stub_upstream: StubUpstream, start_proxy: StartProxy, sockets: Sockets
) -> None:
    proxy = start_proxy(stub_upstream.url, limits=_fast())
    sock = sockets(proxy.url)
    sock.sendall(head(proxy.url, CHAT, 1_000_000) + b'{"model": "m"')  # 13 of 1 MB
    started = time.monotonic()
    closed, answer = closed_within(sock, 3.0)
    assert closed and time.monotonic() - started < 2.5
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert stub_upstream.requests == []  # nothing half-read went upstream


def test_dribbled_body_hits_the_total_body_timeout(
    stub_upstream: StubUpstream, start_proxy: StartProxy, sockets: Sockets
) -> None:
    proxy = start_proxy(stub_upstream.url, limits=_fast(body_timeout_s=1.5))
    sock = sockets(proxy.url)
    sock.sendall(head(proxy.url, CHAT, 1_000_000))
    started = time.monotonic()
    while send_quietly(sock, b" ") and time.monotonic() - started < 5:
        time.sleep(0.2)  # never idle for body_idle_s, but never done either
    assert time.monotonic() - started < 3.0


def test_a_long_model_call_is_not_a_slow_client(
    stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    # Timeouts bound what the client sends, never how long the upstream takes to answer.
    stub_upstream.inject(Hang(seconds=2.5))
    proxy = start_proxy(stub_upstream.url, limits=_fast())
    response = _chat(proxy.url)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "late answer"


# --------------------------------------------------------------------------- bodies


def test_declared_oversized_body_gets_413_json(
    stub_upstream: StubUpstream, start_proxy: StartProxy, sockets: Sockets
) -> None:
    proxy = start_proxy(stub_upstream.url, limits=ServerLimits(max_body_bytes=1 << 20))
    sock = sockets(proxy.url)
    sock.sendall(head(proxy.url, CHAT, 100 << 20))  # declares 100 MiB, sends none of it
    closed, answer = closed_within(sock, 3.0)
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 413"), answer
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["type"] == "payload_too_large" and "1048576" in error["message"]
    assert closed and stub_upstream.requests == []


def test_chunked_oversized_body_gets_413_json(
    stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    proxy = start_proxy(stub_upstream.url, limits=ServerLimits(max_body_bytes=1 << 20))

    def chunks() -> Any:
        for _ in range(40):
            yield b" " * 65536

    response = requests.post(f"{proxy.url}{CHAT}", data=chunks(), timeout=10)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "payload_too_large"


def test_default_body_limit_takes_a_large_real_request(
    upstream: str, start_proxy: StartProxy
) -> None:
    # 12 MB of transcript (an agent's long history with a screenshot) through the official SDK.
    proxy = start_proxy(upstream)
    image = "data:image/png;base64," + "iVBORw0KGgo" * ((8 << 20) // 11)
    messages: list[Any] = [{"role": "user", "content": "step " * 800_000}]
    messages.append(
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}
    )
    with openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0) as client:
        answer = client.chat.completions.create(model="m", messages=messages)
    assert answer.choices[0].message.content == "ok"
    assert _Upstream.sizes[0] > 12_000_000
    assert ServerLimits().max_body_bytes == 64 << 20


@functools.cache
def _bomb(coding: str, size: int) -> bytes:
    if coding == "zstd":
        return zstandard.ZstdCompressor().compress(b'{"pad": "' + bytes(size))
    return _gzip_bomb(size)


def _gzip_bomb(size: int) -> bytes:
    packer, zeros = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS), bytes(1 << 20)
    parts = [packer.compress(b'{"model": "m", "pad": "')]
    parts += [packer.compress(zeros) for _ in range(size >> 20)]
    return b"".join(parts) + packer.flush()


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_compressed_bomb_stops_at_the_decoded_limit(
    coding: str, stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    # 256 KiB that inflate to 256 MiB (the 1 MiB -> 1 GiB bomb scaled down 4x, to keep the
    # test fast), against a 16 MiB limit.
    limits = ServerLimits(max_decoded_bytes=16 << 20)
    proxy = start_proxy(stub_upstream.url, limits=limits)
    bomb = _bomb(coding, 256 << 20)
    assert len(bomb) < 300_000
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    response = requests.post(
        f"{proxy.url}{CHAT}", data=bomb, headers={"Content-Encoding": coding}, timeout=30
    )
    assert response.status_code == 413, response.text
    assert "16777216" in response.json()["error"]["message"]
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert grown_mib < 100, f"peak RSS grew {grown_mib:.0f} MiB"
    assert stub_upstream.requests == []


def test_compressed_request_under_the_limit_is_recorded(
    stub_upstream: StubUpstream, start_proxy: StartProxy, lake: tl.Lake
) -> None:
    proxy = start_proxy(stub_upstream.url)
    data = gzip.compress(json.dumps(BODY).encode())
    response = requests.post(
        f"{proxy.url}{CHAT}",
        data=data,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200
    assert proxy.flush() and _calls(lake) == 1


def _nested(depth: int) -> bytes:
    return b'{"model": "m", "messages": ' + b"[" * depth + b"]" * depth + b"}"


def test_deeply_nested_json_is_not_a_500(upstream: str, start_proxy: StartProxy) -> None:
    proxy = start_proxy(upstream)
    deep = _nested(200_000)
    # A model call is forwarded as sent: the upstream judges it (here: 400).
    model = requests.post(f"{proxy.url}{CHAT}", data=deep, timeout=10)
    assert model.status_code == 400 and _Upstream.sizes == [len(deep)], model.text
    for route in ("outcome", "finish"):
        admin = requests.post(f"{proxy.url}/rollouts/r1/{route}", data=deep, timeout=10)
        assert admin.status_code == 400, admin.text
        assert "nest" in admin.json()["error"]["message"]


# --------------------------------------------------------------------------- load bounds


def test_calls_past_max_inflight_get_429(
    stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    stub_upstream.inject(Hang(seconds=1.5), Hang(seconds=1.5))
    proxy = start_proxy(stub_upstream.url, limits=ServerLimits(max_inflight=2, retry_after_s=3))
    with ThreadPoolExecutor(2) as pool:
        slow = [pool.submit(_chat, proxy.url) for _ in range(2)]
        time.sleep(0.5)
        refused = _chat(proxy.url)
        assert [f.result().status_code for f in slow] == [200, 200]
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "3"
    assert refused.json()["error"]["type"] == "too_many_requests"
    assert requests.get(f"{proxy.url}/health", timeout=5).status_code == 200
    assert _chat(proxy.url).status_code == 200


def test_slow_sockets_cannot_starve_ordinary_calls(
    stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    # 200 sockets dribbling a head against a cap of 50 connections: each ordinary call's
    # connection evicts the oldest slow one instead of waiting behind them.
    limits = ServerLimits(max_connections=50, header_timeout_s=30.0)
    proxy = start_proxy(stub_upstream.url, limits=limits)
    with dribbling(proxy.url, 200, 0.5) as slow:
        time.sleep(1.0)
        answers = [_chat(proxy.url, headers={"Connection": "close"}) for _ in range(20)]
        assert [a.status_code for a in answers] == [200] * 20
        time.sleep(1.0)
        assert slow.closed_by_server >= 150


@pytest.mark.slow
def test_thousand_slow_sockets_and_aiohttp_calls(
    stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    proxy = start_proxy(stub_upstream.url)

    async def calls() -> list[int]:
        async with aiohttp.ClientSession() as session:
            out = []
            for _ in range(50):
                async with session.post(f"{proxy.url}{CHAT}", json=BODY) as r:
                    out.append(r.status)
            return out

    import asyncio

    with dribbling(proxy.url, 1000, 5.0):
        assert asyncio.run(calls()) == [200] * 50


# --------------------------------------------------------------------------- shutdown


def test_sigterm_with_300_slow_clients_exits_and_keeps_answered_calls(
    stub_upstream: StubUpstream, tmp_path: Path
) -> None:
    lake_dir, spool = tmp_path / "lake", tmp_path / "spool"
    args = [sys.executable, "-m", "trajlake", "proxy", "--lake", str(lake_dir)]
    args += ["--upstream", stub_upstream.url, "--port", "0", "--spool-dir", str(spool)]
    args += ["--commit-seconds", "30"]  # nothing is committed before the signal
    process = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "recording proxy on http://" in line, line
    url, logged = line.split()[3], []
    # Drained, so that no amount of logging can block the proxy on a full pipe.
    drain = threading.Thread(target=lambda: logged.append(process.stderr.read()), daemon=True)
    drain.start()
    try:
        for k in range(5):
            rollout = f"{url}/rollouts/r{k}/v1/chat/completions"
            assert requests.post(rollout, json=BODY, timeout=10).status_code == 200
            assert requests.post(f"{url}/rollouts/r{k}/finish", json={}, timeout=10).ok
        with dribbling(url, 150, 1.0), dribbling(url, 150, 1.0, body_after_head=True):
            time.sleep(1.0)
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            code = process.wait(20)
            took = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        drain.join(10)
        process.stderr.close()
    assert code == 0 and took < 10, f"exit {code} after {took:.1f} s"
    assert "Traceback" not in "".join(logged)
    assert _calls(tl.open_lake(lake_dir)) == 5


# --------------------------------------------------------------------------- options


def test_cli_limit_option_is_checked(lake: tl.Lake) -> None:
    runner = CliRunner()
    base = ["--lake", lake.uri, "--upstream", "http://127.0.0.1:9"]
    for bad, says in [
        ("max_body=1", "unknown limit"),
        ("max_body_bytes=lots", "max_body_bytes"),
        ("header_timeout_s=-1", "header_timeout_s"),
        ("max_inflight", "KEY=VALUE"),
    ]:
        result = runner.invoke(proxy_command, [*base, "--limit", bad])
        assert result.exit_code == 2, result.output
        assert says in result.output


def test_limits_parse_sizes_and_durations() -> None:
    limits = ServerLimits.parse(["max_body_bytes=128MiB", "body_idle_s=2.5", "max_inflight=8"])
    assert limits.max_body_bytes == 128 << 20 and limits.body_idle_s == 2.5
    assert limits.max_inflight == 8 and limits.header_timeout_s == ServerLimits().header_timeout_s
    with pytest.raises(ValueError, match="max_inflight_body_bytes"):
        ServerLimits(max_body_bytes=2 << 30)
