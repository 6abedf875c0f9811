"""A tiny OpenAI-compatible chat-completions stub on 127.0.0.1 for judge tests, and the setup
the judge tests share (a judge pointed at it, the CLI options naming it).

It answers deterministically from the prompt (the number of turns T it states), counts requests,
and can be told to fail or to answer with garbage. The judge reaches it through the real
`openai` SDK over real HTTP, so what the tests see is what a server sees.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import trajlake as tl
from trajlake.credit.judge import JudgeValues

Mode = Literal["ok", "fenced", "malformed"]

N_JUDGED = 4
"""Trajectories in the `judged_lake` fixture (conftest.py): two resolved, two not."""


def stub_estimates(n_turns: int) -> list[dict[str, float]]:
    """The stub's answer for a trajectory of T turns: 0.2 before turn 1, 0.7 after turn T // 2."""
    estimates = [{"turn": 0, "value": 0.2}]
    if n_turns // 2 > 0:
        estimates.append({"turn": n_turns // 2, "value": 0.7})
    return estimates


@dataclass
class StubJudge:
    """State of the stub: what it answers and what it received."""

    mode: Mode = "ok"
    fail_first: int = 0
    """Answer this many requests with HTTP 500 before answering normally."""
    fail_status: int = 500
    retry_after: str | None = None
    """Sent as the Retry-After header of each failure, when set."""
    reply: Callable[[dict[str, Any]], str] | None = None
    """When set, the answer's content is `reply(request body)` (mode and T are ignored)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """Request headers, names lower-cased (HTTP names are case-insensitive; the SDK sends
    them lower-case)."""
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def count(self) -> int:
        """Requests received so far."""
        return len(self.requests)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append(body)
            if self.fail_first > 0:
                self.fail_first -= 1
                return self.fail_status, {"error": {"message": "stub failure"}}
        prompt = body["messages"][-1]["content"]
        match = re.search(r"T = (\d+) turns", prompt)
        n_turns = int(match.group(1)) if match else 0
        payload = json.dumps({"estimates": stub_estimates(n_turns)})
        if self.reply is not None:
            content = self.reply(body)
        elif self.mode == "fenced":
            content = f"Here is my estimate.\n```json\n{payload}\n```\nDone."
        elif self.mode == "malformed":
            content = "I think the agent did fine, roughly seventy percent."
        else:
            content = payload
        return 200, {
            "id": f"stub-{self.count}",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 20},
        }


@contextmanager
def judge_stub(**kwargs: Any) -> Iterator[StubJudge]:
    """Run a stub server on 127.0.0.1 (a free port) for the duration of the block."""
    stub = StubJudge(**kwargs)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            with stub.lock:
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
            status, payload = stub.answer(body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status != 200 and stub.retry_after is not None:
                self.send_header("Retry-After", stub.retry_after)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def stub_judge(lake: tl.Lake, url: str, **kwargs: Any) -> JudgeValues:
    """A judge of the stub's model at `url`, with a test key and millisecond backoff."""
    options: dict[str, Any] = {"api_key": "test-key", "backoff_s": 0.01, **kwargs}
    return JudgeValues(lake, url, "stub-judge", **options)


def credit_cli_args(lake: tl.Lake, stub: StubJudge, estimator: str) -> list[str]:
    """`trajlake credit` arguments that value `lake` with `estimator` against the stub."""
    return [
        "credit", "--lake", lake.uri, "--estimator", estimator, "--output", "json",
        "--source-option", f"base_url={stub.url}", "--source-option", "model=stub-judge",
        "--source-option", "api_key=test-key", "--source-option", "backoff_s=0.01",
    ]  # fmt: skip
