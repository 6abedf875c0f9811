"""The recording proxy under stress and faults: rewritten histories, 100 concurrent rollouts,
upstream errors, timeouts and disconnects, kill -9 and restart, bind and token rules."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest
import requests
import zstandard
from click.testing import CliRunner
from stub_upstream import Disconnect, Fail, Hang, Reply, StubUpstream

import trajlake as tl
from trajlake.cli.proxy_cmd import proxy as proxy_command
from trajlake.proxy.server import ProxyThread

KEY = "upstream-key-Q7wZ3pLk9"
TOOL = [("bash", {"command": "ls"})]
MakeStub = Callable[..., StubUpstream]
StartProxy = Callable[..., ProxyThread]

# `lake` (tests/conftest.py) and `start_proxy` (tests/proxy/conftest.py) are shared fixtures.


def _sql(lake: tl.Lake, query: str) -> list[dict[str, Any]]:
    return lake.sql(query).to_dicts()


def _client(proxy: ProxyThread, rollout: str, **options: Any) -> openai.OpenAI:
    base = f"{proxy.url}/rollouts/{rollout}/v1"
    return openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, **options)


def _chat(
    client: openai.OpenAI, history: list[dict[str, Any]], *, stream: bool = False
) -> dict[str, Any]:
    messages: Any = history
    if stream:
        with client.chat.completions.stream(model="stub-model", messages=messages) as events:
            completion: Any = events.get_final_completion()
    else:
        completion = client.chat.completions.create(model="stub-model", messages=messages)
    exclude = {"refusal", "parsed"}
    return dict(completion.choices[0].message.model_dump(exclude_none=True, exclude=exclude))


def _finish(proxy: ProxyThread, rollout: str, status: str = "completed") -> requests.Response:
    return requests.post(f"{proxy.url}/rollouts/{rollout}/finish", json={"status": status})


def _calls(lake: tl.Lake, rollout: str) -> list[dict[str, Any]]:
    return _sql(
        lake,
        "SELECT seq, status_code, error, stream, response FROM calls "
        f"WHERE trajectory_id = '{rollout}' ORDER BY seq",
    )


def test_rewritten_history_starts_a_flagged_thread(
    make_stub: MakeStub, start_proxy: StartProxy, lake: tl.Lake
) -> None:
    proxy = start_proxy(make_stub(Reply(text="step", tool_calls=TOOL), Reply(text="ok")).url)
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
    with _client(proxy, "compact") as client:
        history.append(_chat(client, history))
        history.append({"role": "tool", "tool_call_id": history[1]["tool_calls"][0]["id"]})
        history[-1]["content"] = "a.py"
        history.append(_chat(client, history))
        # The harness compacts: the history is replaced by a summary, then goes on.
        compacted = [{"role": "user", "content": "fix the bug"}]
        compacted.append({"role": "user", "content": "Summary: ran ls, saw a.py."})
        _chat(client, compacted)
    assert _finish(proxy, "compact").ok and proxy.flush()
    rows = _sql(
        lake,
        "SELECT thread, role, content, is_copied_context FROM messages "
        "WHERE trajectory_id = 'compact' ORDER BY thread, idx",
    )
    assert [(r["thread"], r["role"]) for r in rows] == [
        ("main", "user"),
        ("main", "assistant"),
        ("main", "tool"),
        ("main", "assistant"),
        ("t1", "user"),
        ("t1", "user"),
        ("t1", "assistant"),
    ]
    assert [r["is_copied_context"] for r in rows if r["thread"] == "t1"] == [True, False, False]
    (attrs,) = _sql(lake, "SELECT attrs FROM trajectories WHERE trajectory_id = 'compact'")
    proxy_attrs = json.loads(attrs["attrs"])["proxy"]
    assert proxy_attrs["threads"] == 2 and proxy_attrs["history_rewritten"] is True


def test_100_concurrent_rollouts_lose_and_cross_nothing(
    make_stub: MakeStub, start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(Reply(text="look", tool_calls=TOOL), Reply(text="more", tool_calls=TOOL))
    stub.script.append(Reply(text="done"))
    proxy = start_proxy(stub.url, batch_size=16, commit_seconds=0.2)

    def rollout(n: int) -> list[str]:
        rid = f"r{n:03d}"
        history: list[dict[str, Any]] = [{"role": "user", "content": f"task of {rid}"}]
        with _client(proxy, rid) as client:
            for _ in range(3):
                message = _chat(client, history)
                history.append(message)
                for call in message.get("tool_calls", []):
                    history.append({"role": "tool", "tool_call_id": call["id"], "content": rid})
        requests.post(f"{proxy.url}/rollouts/{rid}/outcome", json={"reward": n / 100})
        assert _finish(proxy, rid).json()["calls"] == 3
        return [m.get("content") or "" for m in history]

    with ThreadPoolExecutor(32) as pool:
        sent = dict(zip(range(100), pool.map(rollout, range(100)), strict=True))
    assert proxy.flush(60)
    rows = _sql(
        lake,
        "SELECT trajectory_id, list(content ORDER BY idx) AS texts, count(*) AS n "
        "FROM messages GROUP BY 1 ORDER BY 1",
    )
    assert [r["trajectory_id"] for r in rows] == [f"r{n:03d}" for n in range(100)]
    for n, row in enumerate(rows):
        assert [t or "" for t in row["texts"]] == sent[n]  # nothing crossed between rollouts
    counts = _sql(lake, "SELECT trajectory_id, count(*) AS n, max(seq) AS s FROM calls GROUP BY 1")
    assert {(c["n"], c["s"]) for c in counts} == {(3, 2)} and len(counts) == 100
    rewards = _sql(lake, "SELECT trajectory_id, reward FROM trajectories ORDER BY 1")
    assert [r["reward"] for r in rewards] == [n / 100 for n in range(100)]


def test_upstream_error_and_timeout_reach_the_client_and_are_recorded(
    make_stub: MakeStub, start_proxy: StartProxy, lake: tl.Lake, tmp_path: Path
) -> None:
    stub = make_stub(Reply(text="fine"))
    proxy = start_proxy(stub.url, timeout_s=0.5)
    stub.inject(Fail(500, body={"error": {"message": "boom", "type": "server_error"}}))
    history = [{"role": "user", "content": "hi"}]
    with _client(proxy, "faults") as client:
        with pytest.raises(openai.InternalServerError) as failed:
            _chat(client, history)
        assert failed.value.status_code == 500
        assert failed.value.body == {"message": "boom", "type": "server_error"}
        stub.inject(Hang(3.0))
        with pytest.raises(openai.APIStatusError) as timed_out:
            _chat(client, history)
        assert timed_out.value.status_code == 504
        assert _chat(client, history)["content"] == "fine"
    dead = ProxyThread(lake, "http://127.0.0.1:9", spool_dir=tmp_path / "spool2").start()
    try:
        with _client(dead, "faults") as client, pytest.raises(openai.APIStatusError) as refused:
            _chat(client, history)
        assert refused.value.status_code == 502
    finally:
        dead.stop()
    assert _finish(proxy, "faults").ok and proxy.flush()
    calls = _calls(lake, "faults")
    assert [(c["status_code"], c["error"]) for c in calls] == [
        (500, "upstream returned HTTP 500"),
        (504, "upstream timeout"),
        (200, None),
    ]
    assert json.loads(calls[0]["response"]) == {
        "error": {"message": "boom", "type": "server_error"}
    }
    texts = _sql(lake, "SELECT role, content FROM messages WHERE trajectory_id = 'faults'")
    assert [t["content"] for t in texts if t["role"] == "assistant"] == ["fine"]


def test_disconnects_mid_stream_are_recorded_as_failed(
    make_stub: MakeStub, start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(Reply(text="word " * 200), chunk_delay_s=0.01)
    proxy = start_proxy(stub.url)
    body = {"model": "stub-model", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    url = f"{proxy.url}/rollouts/cut/v1/chat/completions"
    with requests.post(url, json=body, stream=True, timeout=10) as response:
        first = next(response.iter_content(256))
        assert first.startswith(b"data: ")
    # The upstream drops the connection after 3 events: the client must see a broken stream.
    stub.inject(Disconnect(after_chunks=3))
    with _client(proxy, "cut") as client, pytest.raises(openai.APIError):
        _chat(client, body["messages"], stream=True)
    assert _finish(proxy, "cut", "error").ok and proxy.flush()
    calls = _calls(lake, "cut")
    assert calls[0]["error"] == "client disconnected"
    assert calls[1]["error"].startswith(("upstream stream broken", "the stream ended"))
    partial = json.loads(calls[0]["response"])["choices"][0]["message"]["content"]
    assert partial and ("word " * 200).startswith(partial) and len(partial) < 1000
    assert _sql(lake, "SELECT count(*) AS n FROM messages WHERE trajectory_id = 'cut'")[0]["n"] == 0


class _RawUpstream(BaseHTTPRequestHandler):
    """Keeps request bodies byte for byte (no decoding) and answers a fixed Responses body."""

    bodies: ClassVar[list[tuple[str | None, bytes]]] = []
    answer: ClassVar[dict[str, Any]] = {
        "id": "resp_raw",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "stub-model",
        "output": [
            {
                "id": "msg_raw",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
    }

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append((self.headers.get("Content-Encoding"), data))
        out = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_compressed_request_bodies_are_forwarded_as_sent(
    start_proxy: StartProxy, lake: tl.Lake
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RawUpstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proxy = start_proxy(f"http://127.0.0.1:{server.server_address[1]}/v1")
        body = {"model": "stub-model", "input": [{"role": "user", "content": "zipped"}]}
        raw = json.dumps(body).encode()
        sent = {"zstd": zstandard.ZstdCompressor().compress(raw), "gzip": gzip.compress(raw)}
        for coding, data in sent.items():
            headers = {"Content-Encoding": coding, "Content-Type": "application/json"}
            url = f"{proxy.url}/rollouts/{coding}/v1/responses"
            assert requests.post(url, data=data, headers=headers).json()["id"] == "resp_raw"
            assert _finish(proxy, coding).ok
    finally:
        server.shutdown()
        server.server_close()
    assert _RawUpstream.bodies == list(sent.items())  # the exact bytes, still compressed
    assert proxy.flush()
    rows = _sql(lake, "SELECT trajectory_id, role, content FROM messages ORDER BY 1, idx")
    assert [(r["trajectory_id"], r["content"]) for r in rows] == [
        ("gzip", "zipped"),
        ("gzip", "ok"),
        ("zstd", "zipped"),
        ("zstd", "ok"),
    ]


def test_bind_and_token_rules(
    stub_upstream: StubUpstream, start_proxy: StartProxy, lake: tl.Lake, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="non-loopback"):
        ProxyThread(lake, stub_upstream.url, host="0.0.0.0", spool_dir=tmp_path / "s")
    args = ["--lake", str(tmp_path / "lake"), "--upstream", stub_upstream.url, "--host", "0.0.0.0"]
    result = CliRunner().invoke(proxy_command, args)
    assert isinstance(result.exception, ValueError) and "--token" in str(result.exception)
    proxy = start_proxy(stub_upstream.url, token="s3cret-proxy-token")
    body = {"model": "stub-model", "messages": [{"role": "user", "content": "hi"}]}
    url = f"{proxy.url}/rollouts/tok/v1/chat/completions"
    upstream_auth = {"Authorization": f"Bearer {KEY}"}
    assert requests.post(url, json=body, headers=upstream_auth).status_code == 401
    wrong = upstream_auth | {"X-Trajlake-Token": "nope"}
    assert requests.post(url, json=body, headers=wrong).status_code == 401
    assert requests.post(f"{proxy.url}/rollouts/tok/finish", json={}).status_code == 401
    good = upstream_auth | {"X-Trajlake-Token": "s3cret-proxy-token"}
    assert requests.post(url, json=body, headers=good).json()["choices"][0]["message"]["content"]
    received = stub_upstream.requests[-1].headers
    assert received["Authorization"] == f"Bearer {KEY}" and "X-Trajlake-Token" not in received
    assert len(stub_upstream.requests) == 1  # refused calls never reached the upstream


# --------------------------------------------------------------------------- kill -9


def _command() -> list[str]:
    return [sys.executable, "-m", "trajlake", "proxy"]


def _spawn(lake_dir: Path, spool: Path, upstream: str) -> tuple[subprocess.Popen[str], str]:
    args = ["--lake", str(lake_dir), "--upstream", upstream, "--port", "0"]
    args += ["--spool-dir", str(spool), "--run-id", "k9", "--commit-seconds", "30"]
    process = subprocess.Popen(_command() + args, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "recording proxy on http://" in line, line
    return process, line.split()[3]


def _end(process: subprocess.Popen[str], sig: int) -> int:
    process.send_signal(sig)
    code = process.wait(30)
    if process.stderr is not None:
        process.stderr.close()
    return code


def test_kill_9_loses_nothing_answered(make_stub: MakeStub, tmp_path: Path) -> None:
    stub = make_stub(Reply(text="look", tool_calls=TOOL), Reply(text="more", tool_calls=TOOL))
    stub.script.append(Reply(text="done"))
    lake_dir, spool = tmp_path / "lake", tmp_path / "spool"
    process, url = _spawn(lake_dir, spool, stub.url)
    histories: dict[str, list[dict[str, Any]]] = {}
    try:
        for rid, turns in (("finished", 3), ("open", 2), ("streamed", 1)):
            history = histories[rid] = [{"role": "user", "content": f"task {rid}"}]
            with openai.OpenAI(base_url=f"{url}/rollouts/{rid}/v1", api_key=KEY) as client:
                for _ in range(turns):
                    message = _chat(client, history, stream=rid == "streamed")
                    history.append(message)
                    for call in message.get("tool_calls", []):
                        history.append({"role": "tool", "tool_call_id": call["id"]})
                        history[-1]["content"] = "out"
        assert requests.post(f"{url}/rollouts/finished/finish", json={}).ok  # not committed yet
    finally:
        _end(process, signal.SIGKILL)
    assert len(list(spool.glob("*.jsonl"))) == 1
    process, url = _spawn(lake_dir, spool, stub.url)
    try:
        with openai.OpenAI(base_url=f"{url}/rollouts/open/v1", api_key=KEY) as client:
            histories["open"].append(_chat(client, histories["open"]))
        for rid in ("open", "streamed"):
            assert requests.post(f"{url}/rollouts/{rid}/finish", json={}).ok
    finally:
        assert _end(process, signal.SIGTERM) == 0  # a clean stop commits what is finished
    lake = tl.open_lake(lake_dir)
    calls = _sql(lake, "SELECT trajectory_id, count(*) AS n FROM calls GROUP BY 1 ORDER BY 1")
    assert [(c["trajectory_id"], c["n"]) for c in calls] == [
        ("finished", 3),
        ("open", 3),
        ("streamed", 1),
    ]
    for rid, history in histories.items():
        rows = _sql(
            lake,
            f"SELECT thread, content FROM messages WHERE trajectory_id = '{rid}' ORDER BY idx",
        )
        expected = [m for m in history if m["role"] != "tool" or rid != "streamed"]
        assert [r["content"] or "" for r in rows] == [m.get("content") or "" for m in expected]
        assert {r["thread"] for r in rows} == {"main"}
    assert list(spool.glob("*.jsonl")) == []  # everything committed: the spool is gone
    assert os.path.isdir(spool)
