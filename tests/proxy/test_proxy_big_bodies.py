"""A large recorded body does not stall the proxy: while one client sends a 16 MiB chat request
(redacted and spooled before it is forwarded; the stub upstream refuses it, as its body limit
is 1 MiB), ordinary calls on a real proxy process are
answered in a fraction of the time recording the big one takes; the big call is still
recorded in full."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from _proxy_process import ProxyProcess
from stub_upstream import Reply, StubUpstream

import trajlake as tl
from trajlake.proxy.recorder import Recorder
from trajlake.proxy.spool import SpoolError

MakeStub = Callable[..., StubUpstream]
BIG_MIB = 16
SMALL: dict[str, Any] = {
    "model": "stub-model",
    "messages": [{"role": "user", "content": "Fix the failing test in src/app.py. " * 500}],
}


def _big_body() -> dict[str, Any]:
    """A chat request whose last message is a 16 MiB tool result (a huge log pasted back)."""
    log = "x" * (BIG_MIB << 20)
    return {
        "model": "stub-model",
        "messages": [
            {"role": "user", "content": "Why does the build fail? Here is its log."},
            {"role": "user", "content": log},
        ],
    }


def test_small_calls_are_not_held_behind_a_big_recording(
    make_stub: MakeStub, lake: tl.Lake, tmp_path: Path
) -> None:
    stub = make_stub(Reply(text="done"))
    raw = json.dumps(_big_body()).encode()
    spool, log = tmp_path / "spool", tmp_path / "proxy.log"
    with ProxyProcess(Path(lake.uri), spool, stub.url, log) as proxy, requests.Session() as session:
        for _ in range(5):  # warm: connections open, code paths imported
            assert session.post(f"{proxy.url}/v1/chat/completions", json=SMALL).status_code == 200
        big_status: list[int] = []

        def send_big() -> None:
            url = f"{proxy.url}/rollouts/big/v1/chat/completions"
            headers = {"Content-Type": "application/json"}
            big_status.append(requests.post(url, data=raw, headers=headers, timeout=60).status_code)

        sender = threading.Thread(target=send_big)
        sender.start()
        latencies = []
        while sender.is_alive():
            started = time.perf_counter()
            reply = session.post(f"{proxy.url}/v1/chat/completions", json=SMALL, timeout=60)
            latencies.append(time.perf_counter() - started)
            assert reply.status_code == 200
        sender.join()
        assert big_status == [413]  # the stub's own body limit (1 MiB): relayed as answered
        finished = session.post(f"{proxy.url}/rollouts/big/finish", json={}, timeout=60)
        assert finished.status_code == 200, finished.text
        proxy.wait_for("committed_rollouts", len(latencies) + 6, timeout=60)
    # Small calls are answered while the big one is being read, relayed and recorded. How long
    # they wait meanwhile is a speed figure: `benchmarks/bench_proxy.py --only hostile` measures
    # it (p99 beside the unloaded p99), not this test.
    assert len(latencies) >= 3, "the big call was answered before any small call overlapped it"
    stored = (
        tl.open_lake(lake.uri)
        .sql(
            "SELECT status_code, length(new_input::VARCHAR) AS n FROM calls "
            "WHERE trajectory_id = 'big'"
        )
        .to_dicts()
    )
    assert len(stored) == 1 and stored[0]["status_code"] == 413
    assert stored[0]["n"] > BIG_MIB << 20  # the whole request is in the lake


RESPONSE: dict[str, Any] = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "stub-model",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}


async def _call(recorder: Recorder, rollout: str, content: str) -> None:
    request = {"model": "stub-model", "messages": [{"role": "user", "content": content}]}
    size = len(content)
    ticket = await recorder.begin_call_async(
        rollout,
        {},
        request=request,
        dialect="chat",
        endpoint="/v1/chat/completions",
        stream=False,
        size=size,
    )
    await recorder.end_call_async(
        ticket,
        dialect="chat",
        endpoint="/v1/chat/completions",
        stream=False,
        request=request,
        response=RESPONSE,
        status_code=200,
        error=None,
        size=size,
    )


def test_a_rollouts_records_keep_their_order_behind_a_big_call(
    lake: tl.Lake, tmp_path: Path
) -> None:
    """A small call sent while the rollout's big call is still being recorded on the worker is
    queued behind it: the spool holds the big request first, then the small one, and the
    outcome and finish after both answers; the committed trajectory has both calls."""
    recorder = Recorder(lake, tmp_path / "spool", max_seconds=0.05)
    recorder.start()
    big = "a pasted log line\n" * (4 << 20 >> 4)  # 4 MiB: recorded on the worker

    async def scenario() -> None:
        first = asyncio.create_task(_call(recorder, "r", big))
        await asyncio.sleep(0)  # the big call's request is on the worker now
        assert recorder.stats["inflight_calls"] == 1
        await _call(recorder, "r", "a small follow-up")  # small, but queued behind it
        await first
        await recorder.settled("r")
        recorder.set_outcome("r", {"resolved": True})
        assert recorder.finish("r", "completed") == 2

    asyncio.run(scenario())
    lines = [json.loads(line) for line in recorder.spool.path.read_text().splitlines()]
    kinds = [(e["kind"], e.get("seq")) for e in lines if e.get("rollout_id") == "r"]
    # Issued in this order: both requests (the second while the first was on the worker), then
    # the answers, the outcome and the finish.
    assert kinds[:2] == [("request", 0), ("request", 1)]
    assert sorted(kinds[2:4]) == [("call", 0), ("call", 1)]
    assert kinds[4:] == [("outcome", None), ("finish", None)]
    assert recorder.flush(30)
    recorder.close()
    calls = lake.sql("SELECT seq FROM calls WHERE trajectory_id = 'r' ORDER BY seq").to_dicts()
    assert [c["seq"] for c in calls] == [0, 1]


def test_a_big_request_that_cannot_be_spooled_is_refused_and_forgotten(
    lake: tl.Lake, tmp_path: Path
) -> None:
    """The worker's SpoolError reaches the caller (the proxy answers 503) and the rollout it
    would have opened is not kept."""
    recorder = Recorder(lake, tmp_path / "spool")
    recorder.start()
    recorder.spool.close()  # every later write fails

    async def scenario() -> None:
        with pytest.raises(SpoolError):
            await _call(recorder, "gone", "x" * (1 << 20))

    asyncio.run(scenario())
    assert recorder.open_rollouts() == [] and recorder.stats["inflight_calls"] == 0
    recorder.close()
