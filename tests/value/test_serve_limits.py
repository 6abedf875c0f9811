"""The reranking server under hostile clients, over real sockets on loopback: deep JSON, slow
heads and bodies, oversized bodies, too many requests, and the `--limit` option."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from _slow_clients import closed_within, connect, dribbling, head
from click.testing import CliRunner

from trajlake.cli.value_cmds import serve as serve_command
from trajlake.serve import ServerLimits, serve_in_background

RERANK = "/v1/rerank"


class SlowScorer:
    """Scores every candidate 1.0 after `delay_s` (holds a batch in flight)."""

    model_id = "slow-v1"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def score(self, candidates: Sequence[Any]) -> list[float]:
        time.sleep(self.delay_s)
        return [1.0 for _ in candidates]

    def info(self) -> dict[str, Any]:
        return {"delay_s": self.delay_s}


CANDIDATES = {"candidates": [[{"role": "user", "content": "hi"}]]}


@pytest.fixture
def server() -> Iterator[Any]:
    with serve_in_background(SlowScorer()) as url:
        yield url


def test_deeply_nested_json_is_a_400_naming_the_problem(server: str) -> None:
    deep = b'{"candidates": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    response = requests.post(f"{server}{RERANK}", data=deep, timeout=10)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and "nest" in error["message"]
    assert requests.post(f"{server}{RERANK}", json=CANDIDATES, timeout=10).status_code == 200


def test_slow_head_and_slow_body_are_closed() -> None:
    limits = ServerLimits(header_timeout_s=1.0, body_idle_s=1.0)
    with serve_in_background(SlowScorer(), limits=limits) as url:
        with connect(url) as slow_head, connect(url) as slow_body:
            slow_head.sendall(b"POST /v1/rer")
            slow_body.sendall(head(url, RERANK, 1_000_000) + b'{"cand')
            for sock in (slow_head, slow_body):
                closed, answer = closed_within(sock, 3.0)
                assert closed and answer.startswith(b"HTTP/1.1 408"), answer
        assert requests.post(f"{url}{RERANK}", json=CANDIDATES, timeout=10).status_code == 200


def test_declared_oversized_body_is_refused_before_it_is_sent() -> None:
    with serve_in_background(SlowScorer(), limits=ServerLimits(max_body_bytes=4096)) as url:
        with connect(url) as sock:
            sock.sendall(head(url, RERANK, 1 << 30))
            closed, answer = closed_within(sock, 3.0)
        assert closed and answer.startswith(b"HTTP/1.1 413"), answer
        body = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert "4096 bytes" in body["error"]["message"]


def test_requests_past_max_inflight_get_429_with_retry_after() -> None:
    limits = ServerLimits(max_inflight=1, retry_after_s=2)
    with serve_in_background(SlowScorer(delay_s=1.0), limits=limits) as url:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(requests.post, f"{url}{RERANK}", json=CANDIDATES, timeout=10)
            time.sleep(0.3)
            second = requests.post(f"{url}{RERANK}", json=CANDIDATES, timeout=10)
            assert first.result().status_code == 200
        assert second.status_code == 429 and second.headers["Retry-After"] == "2"
        assert requests.get(f"{url}/health", timeout=5).status_code == 200


def test_stop_closes_slow_clients_at_once() -> None:
    with serve_in_background(SlowScorer()) as url, dribbling(url, 50, 0.5):
        time.sleep(0.5)
        started = time.monotonic()
    assert time.monotonic() - started < 3.0


def test_cli_limit_option_is_checked(tmp_path: Path) -> None:
    result = CliRunner().invoke(serve_command, [str(tmp_path), "--limit", "max_inflight=0"])
    assert result.exit_code == 2 and "max_inflight" in result.output, result.output
