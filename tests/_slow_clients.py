"""Hostile HTTP clients over raw sockets, for the servers' limit tests and the proxy
benchmark: slow heads (slowloris), slow bodies, declared-but-unsent bodies, and a wait for a
socket to close."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

HEAD = "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"


def address(url: str) -> tuple[str, int]:
    """(host, port) of an `http://host:port` URL."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    return parts.hostname, parts.port


def connect(url: str, timeout: float = 5.0) -> socket.socket:
    """A connected TCP socket to the server at `url`."""
    sock = socket.create_connection(address(url), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def head(url: str, path: str, content_length: int | None = None, extra: str = "") -> bytes:
    """A request head for POST `path`, ending in the blank line."""
    host, port = address(url)
    text = HEAD.format(path=path, host=f"{host}:{port}") + extra
    if content_length is not None:
        text += f"Content-Length: {content_length}\r\n"
    return (text + "\r\n").encode()


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """(whether the server closed `sock` within `seconds`, what it sent before closing)."""
    deadline, got = time.monotonic() + seconds, b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except (ConnectionResetError, BrokenPipeError):
            return True, got
        if not data:
            return True, got
        got += data
    return False, got


def send_quietly(sock: socket.socket, data: bytes) -> bool:
    """Send `data`; False once the server has closed the connection."""
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


class Dribblers:
    """`count` sockets that each send one byte of a request head (or of a declared body) every
    `every_s` seconds from one background thread, until stopped or closed by the server
    (with `reconnect`, a closed socket is replaced by a new one, as a persistent attacker does)."""

    def __init__(
        self,
        url: str,
        count: int,
        every_s: float,
        *,
        path: str = "/v1/chat/completions",
        reconnect: bool = False,
    ) -> None:
        self.url, self.count, self.every_s, self.path = url, count, every_s, path
        self.reconnect, self.body_after_head = reconnect, False
        self.sockets: list[socket.socket] = []
        self.closed_by_server = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dribblers", daemon=True)

    def open(self, body_after_head: bool = False) -> Dribblers:
        """Connect every socket; with `body_after_head`, send a whole head declaring 1 MB first."""
        self.body_after_head = body_after_head
        for _ in range(self.count):
            if not self._connect():
                break  # the listen backlog is full: the server refuses more
        self._thread.start()
        return self

    def _connect(self) -> bool:
        try:
            sock = connect(self.url)
        except OSError:
            return False
        if self.body_after_head:
            send_quietly(sock, head(self.url, self.path, 1_000_000))
        self.sockets.append(sock)
        return True

    def _run(self) -> None:
        line = head(self.url, self.path, 1_000_000)
        k = 0
        while not self._stop.wait(self.every_s):
            alive = []
            for sock in self.sockets:
                if send_quietly(sock, line[k % len(line) : k % len(line) + 1] or b"x"):
                    alive.append(sock)
                else:
                    self.closed_by_server += 1
                    sock.close()
            self.sockets = alive
            while self.reconnect and len(self.sockets) < self.count and self._connect():
                pass
            k += 1

    def close(self) -> None:
        """Stop sending and close every socket still open."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self.sockets = []


@contextlib.contextmanager
def dribbling(url: str, count: int, every_s: float, **options: bool) -> Iterator[Dribblers]:
    """`Dribblers` opened for the block and closed after it."""
    clients = Dribblers(url, count, every_s).open(**options)
    try:
        yield clients
    finally:
        clients.close()
