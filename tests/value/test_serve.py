"""The reranking HTTP server, run for real on a loopback port and called over TCP with requests."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from trajlake.errors import MissingExtra
from trajlake.serve import create_app, run_server


class PassScorer:
    """Scores a candidate by the fraction of its tool observations that say "passed".

    A candidate whose first message has content "raise-value" / "raise-runtime" makes score() raise,
    which is how the tests reach the server's error paths through the real HTTP stack.
    """

    model_id = "pass-fraction-v1"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: list[int] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def score(self, candidates: Sequence[Any]) -> list[float]:
        with self._lock:
            self.calls.append(len(candidates))
            self.threads.add(threading.current_thread().name)
        if self.delay_s:
            time.sleep(self.delay_s)
        return [expected_score(c) for c in candidates]

    def info(self) -> dict[str, Any]:
        return {"kind": "test", "delay_s": self.delay_s}


def expected_score(candidate: Any) -> float:
    messages = candidate["messages"] if isinstance(candidate, dict) else candidate
    first = messages[0].get("content") if messages else None
    if first == "raise-value":
        raise ValueError("candidate 0 has no assistant turn")
    if first == "raise-runtime":
        raise RuntimeError("CUDA out of memory (secret detail)")
    tools = [m for m in messages if m.get("role") == "tool"]
    return sum("passed" in m["content"] for m in tools) / len(tools) if tools else 0.0


def traj(*observations: str) -> list[dict[str, str]]:
    msgs = [{"role": "user", "content": "fix the bug"}]
    for obs in observations:
        msgs += [{"role": "assistant", "content": "run tests"}, {"role": "tool", "content": obs}]
    return msgs


class Server:
    def __init__(self, scorer: PassScorer, **options: Any) -> None:
        self.scorer = scorer
        self.stop = threading.Event()
        started = threading.Event()
        self.port = 0

        def ready(host: str, port: int) -> None:
            self.port = port
            started.set()

        self.thread = threading.Thread(
            target=run_server,
            args=(scorer,),
            kwargs={"host": "127.0.0.1", "port": 0, "ready": ready, "stop": self.stop, **options},
            daemon=True,
        )
        self.thread.start()
        assert started.wait(10), "server did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def post(self, body: Any, **kwargs: Any) -> requests.Response:
        return requests.post(f"{self.url}/v1/rerank", json=body, timeout=10, **kwargs)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "server did not shut down"


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(scorer: PassScorer | None = None, **options: Any) -> Server:
        servers.append(Server(scorer or PassScorer(), **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[Server]:
    server = Server(PassScorer())
    yield server
    server.close()


def error_of(resp: requests.Response, status: int) -> dict[str, str]:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    err: dict[str, str] = resp.json()["error"]
    return err


# --------------------------------------------------------------------------- happy paths


def test_health_reports_model_and_info(shared: Server) -> None:
    resp = requests.get(f"{shared.url}/health", timeout=10)
    assert resp.status_code == 200
    assert resp.json() == {
        "status": "ok",
        "model": "pass-fraction-v1",
        "info": {"kind": "test", "delay_s": 0.0},
    }


def test_rerank_orders_best_first_and_breaks_ties_by_input_index(shared: Server) -> None:
    candidates = [
        traj("failed", "failed"),  # 0.0
        traj("passed", "failed"),  # 0.5
        {"messages": traj("passed", "passed"), "task": "t", "final_output": "done"},  # 1.0
        traj("failed", "passed"),  # 0.5, ties with 1 and must come after it
        traj("passed"),  # 1.0, ties with 2
    ]
    resp = shared.post({"candidates": candidates, "task_id": "django-1", "top_k": 3})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["model"] == "pass-fraction-v1"
    assert out["task_id"] == "django-1"
    assert out["scores"] == [0.0, 0.5, 1.0, 0.5, 1.0]
    assert out["order"] == [2, 4, 1, 3, 0]
    assert out["best"] == 2
    assert out["top_k"] == [2, 4, 1]
    assert isinstance(out["latency_ms"], float) and out["latency_ms"] >= 0


def test_rerank_without_scores_or_top_k(shared: Server) -> None:
    resp = shared.post({"candidates": [traj("failed"), traj("passed")], "return_scores": False})
    out = resp.json()
    assert resp.status_code == 200
    assert "scores" not in out and "top_k" not in out
    assert out["task_id"] is None
    assert (out["order"], out["best"]) == ([1, 0], 1)
    big_k = shared.post({"candidates": [traj("failed"), traj("passed")], "top_k": 10}).json()
    assert big_k["top_k"] == [1, 0]  # clipped to the pool


def test_multi_task_body_ranks_each_group_separately(shared: Server) -> None:
    body = {
        "tasks": [
            {"task_id": "a", "candidates": [traj("failed"), traj("passed")]},
            {"task_id": "b", "candidates": [traj("passed", "passed"), traj("passed", "x"), []]},
        ],
        "top_k": 1,
    }
    resp = shared.post(body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["model"] == "pass-fraction-v1"
    a, b = out["results"]
    assert (a["task_id"], a["scores"], a["order"], a["best"], a["top_k"]) == (
        "a",
        [0.0, 1.0],
        [1, 0],
        1,
        [1],
    )
    assert (b["task_id"], b["scores"], b["order"], b["top_k"]) == (
        "b",
        [1.0, 0.5, 0.0],
        [0, 1, 2],
        [0],
    )


# --------------------------------------------------------------------------- batching


def test_concurrent_requests_are_coalesced_and_answered_correctly(serve: Any) -> None:
    scorer = PassScorer(delay_s=0.01)
    server = serve(scorer, max_batch_candidates=32, max_wait_ms=20)
    outcomes = ["passed", "failed", "error: passed?", "timeout"]
    bodies = [
        {
            "task_id": f"t{i}",
            "candidates": [
                traj(*[outcomes[(i + j + k) % 4] for k in range(1 + j % 3)]) for j in range(3)
            ],
        }
        for i in range(50)
    ]
    with ThreadPoolExecutor(max_workers=25) as pool:
        responses = list(pool.map(server.post, bodies))
    for body, resp in zip(bodies, responses, strict=True):
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["task_id"] == body["task_id"]
        assert out["scores"] == [expected_score(c) for c in body["candidates"]]
    assert sum(scorer.calls) == 150
    assert len(scorer.calls) < 50, scorer.calls
    assert max(scorer.calls) <= 32
    assert len(scorer.threads) == 1  # the model is only ever used from one thread
    stats = requests.get(f"{server.url}/v1/stats", timeout=10).json()
    assert (stats["requests"], stats["candidates"], stats["batches"]) == (
        50,
        150,
        len(scorer.calls),
    )
    assert stats["mean_batch_size"] == pytest.approx(150 / len(scorer.calls))


def test_request_larger_than_batch_is_split(serve: Any) -> None:
    scorer = PassScorer()
    server = serve(scorer, max_batch_candidates=4, max_wait_ms=0)
    candidates = [traj(*(["passed"] * (i % 5) + ["failed"])) for i in range(10)]
    out = server.post({"candidates": candidates}).json()
    assert scorer.calls == [4, 4, 2]
    assert out["scores"] == [expected_score(c) for c in candidates]
    assert out["best"] == 4  # 4 passed of 5; ties with 9, which comes later


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"{}", "exactly one of 'candidates' or 'tasks'"),
        (b'{"candidates": []}', "candidates must be a non-empty array"),
        (b'{"candidates": [[], "oops"]}', "candidates[1] must be a JSON array"),
        (b'{"candidates": [[]], "top_k": 0}', "top_k must be a positive integer"),
        (b'{"candidates": [[]], "topk": 2}', "unknown field(s) ['topk']"),
        (b'{"candidates": [[]], "task_id": 7}', "task_id must be a string"),
        (b'{"tasks": [{"candidates": [{}]}, {"candidates": [3]}]}', "tasks[1].candidates[0]"),
        (b'{"candidates": [[], [], [], [], [], []]}', "6 candidates in one request"),
    ],
)
def test_bad_requests_get_400_with_a_message(serve: Any, body: bytes, message: str) -> None:
    server = serve(max_candidates_per_request=5)
    resp = requests.post(f"{server.url}/v1/rerank", data=body, timeout=10)
    err = error_of(resp, 400)
    assert err["type"] == "invalid_request"
    assert message in err["message"]
    assert server.scorer.calls == []


def test_unknown_route_and_method_answer_json(shared: Server) -> None:
    assert error_of(requests.get(f"{shared.url}/nope", timeout=10), 404)["type"] == "not_found"
    resp = requests.get(f"{shared.url}/v1/rerank", timeout=10)
    assert error_of(resp, 405)["type"] == "method_not_allowed"
    assert "POST" in resp.headers["Allow"]


def test_scorer_errors_fail_only_their_batch(serve: Any) -> None:
    scorer = PassScorer()
    server = serve(scorer, max_wait_ms=0)
    err = error_of(server.post({"candidates": [traj("passed"), [{"content": "raise-value"}]]}), 400)
    assert err == {"type": "invalid_candidate", "message": "candidate 0 has no assistant turn"}
    err = error_of(server.post({"candidates": [[{"content": "raise-runtime"}]]}), 500)
    assert err["type"] == "internal_error"
    assert "secret" not in err["message"]
    ok = server.post({"candidates": [traj("passed"), traj("failed")]})
    assert ok.status_code == 200 and ok.json()["scores"] == [1.0, 0.0]


def test_bad_candidate_does_not_fail_requests_sharing_its_batch(serve: Any) -> None:
    scorer = PassScorer()
    server = serve(scorer, max_batch_candidates=8, max_wait_ms=300)
    bodies = [
        {"candidates": [traj("passed"), traj("failed")]},
        {"candidates": [[{"content": "raise-value"}]]},
        {"candidates": [traj("failed", "passed")]},
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        good1, bad, good2 = pool.map(server.post, bodies)
    assert scorer.calls[0] == 4, scorer.calls  # all three coalesced, then retried one by one
    assert sorted(scorer.calls[1:]) == [1, 1, 2]
    assert good1.json()["scores"] == [1.0, 0.0]
    assert good2.json()["scores"] == [0.5]
    assert "no assistant turn" in error_of(bad, 400)["message"]


def test_body_limit_answers_413(serve: Any) -> None:
    server = serve(max_body_bytes=1000)
    big = json.dumps({"candidates": [traj("x" * 2000)]}).encode()
    err = error_of(requests.post(f"{server.url}/v1/rerank", data=big, timeout=10), 413)
    assert "1000 bytes" in err["message"]
    # Chunked upload: no Content-Length, so the limit is enforced while reading.
    chunks = (big[i : i + 256] for i in range(0, len(big), 256))
    assert error_of(requests.post(f"{server.url}/v1/rerank", data=chunks, timeout=10), 413)
    assert server.post({"candidates": [traj("passed")]}).status_code == 200


# ------------------------------------------------------------------- auth, binding, lifecycle


def test_token_guards_everything_but_health(serve: Any) -> None:
    server = serve(token="s3cret")
    body = {"candidates": [traj("passed")]}
    assert requests.get(f"{server.url}/health", timeout=10).status_code == 200
    resp = server.post(body)
    assert error_of(resp, 401)["type"] == "unauthorized"
    assert resp.headers["WWW-Authenticate"] == "Bearer"
    error_of(server.post(body, headers={"Authorization": "Bearer wrong"}), 401)
    error_of(server.post(body, headers={"Authorization": "s3cret"}), 401)
    error_of(requests.get(f"{server.url}/v1/stats", timeout=10), 401)
    ok = server.post(body, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json()["scores"] == [1.0]
    assert server.scorer.calls == [1]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.org"])
def test_non_loopback_bind_needs_a_token(host: str) -> None:
    with pytest.raises(ValueError, match="--token"):
        run_server(PassScorer(), host=host, port=0)


def test_create_app_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="max_batch_candidates"):
        create_app(PassScorer(), max_batch_candidates=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        create_app(PassScorer(), max_wait_ms=-1)
    with pytest.raises(ValueError, match="token"):
        create_app(PassScorer(), token="")
    with pytest.raises(TypeError, match="model_id"):
        create_app(object())  # type: ignore[arg-type]


def test_shutdown_stops_the_worker_and_the_scoring_thread(serve: Any) -> None:
    before = set(threading.enumerate())
    server = serve()
    assert server.post({"candidates": [traj("passed")]}).status_code == 200
    assert any(t.name.startswith("trajlake-score") for t in set(threading.enumerate()) - before)
    server.close()
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before:
        assert time.monotonic() < deadline, "the scoring thread outlived the server"
        time.sleep(0.01)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{server.url}/health", timeout=2)


def test_missing_aiohttp_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # makes `import aiohttp` fail
    with pytest.raises(MissingExtra, match=r"trajlake\[serve\]"):
        create_app(PassScorer())
