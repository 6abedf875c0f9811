"""The proxy loses nothing it answered: a call it cannot spool fails (5xx or an aborted stream)
instead of being answered unrecorded, a finished rollout stays finished across kill -9 and
restart, and the spool is private and bounded (committed data removed, idle rollouts closed)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
from _proxy_process import ProxyProcess, file_mode, spool_bytes
from stub_upstream import Reply, StubUpstream

import trajlake as tl
from trajlake.proxy.recorder import Recorder
from trajlake.proxy.spool import Spool, replay

MakeStub = Callable[..., StubUpstream]
LONG_ANSWER = "a long answer " * 150  # ~2 KB: the call record outgrows its request


def _ask(url: str, rollout: str, *, stream: bool) -> str:
    """One chat call through the OpenAI SDK: "ok" (a complete answer), "refused" (a 5xx) or
    "aborted" (the stream broke before its end)."""
    messages: Any = [{"role": "user", "content": f"task of {rollout}"}]
    base = f"{url}/rollouts/{rollout}/v1"
    with openai.OpenAI(base_url=base, api_key="k", max_retries=0) as client:
        try:
            if stream:
                chunks = list(
                    client.chat.completions.create(
                        model="stub-model", messages=messages, stream=True
                    )
                )
                assert any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)
            else:
                client.chat.completions.create(model="stub-model", messages=messages)
        except openai.InternalServerError as e:
            assert e.status_code == 503 and "could not record" in str(e), e
            return "refused"
        except openai.APIConnectionError:
            return "aborted"
    return "ok"


def _trajectory_ids(lake_dir: Path) -> set[str]:
    rows = tl.open_lake(lake_dir).sql("SELECT trajectory_id FROM trajectories").rows()
    return {r[0] for r in rows}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_full_spool_fails_calls_and_kill_9_loses_no_answered_call(
    stream: bool, make_stub: MakeStub, tmp_path: Path
) -> None:
    stub = make_stub(Reply(text=LONG_ANSWER))
    lake_dir, spool, log = tmp_path / "lake", tmp_path / "spool", tmp_path / "proxy.log"
    results: dict[str, str] = {}
    args = ["--commit-seconds", "30"]  # nothing reaches the lake before the kill
    with ProxyProcess(lake_dir, spool, stub.url, log, args, max_file_bytes=16 * 1024) as proxy:
        for n in range(12):
            rollout = f"r{n:02d}"
            results[rollout] = _ask(proxy.url, rollout, stream=stream)
        assert proxy.stop(signal.SIGKILL) == -signal.SIGKILL
    answered = {r for r, result in results.items() if result == "ok"}
    assert answered and len(answered) < len(results), results  # the limit was reached midway
    # The first call whose answer did not fit was forwarded, then failed: a stream is cut
    # before its final event, a plain call gets a 503. Later ones are refused before forwarding
    # once even their requests no longer fit.
    assert ("aborted" if stream else "refused") in results.values(), results
    assert set(results.values()) <= {"ok", "refused", "aborted"}
    assert len(stub.requests) > len(answered)

    lake = tl.open_lake(lake_dir)
    with Recorder(lake, spool, max_seconds=0.05) as restarted:  # what a restarted proxy runs
        for rollout in restarted.open_rollouts():
            restarted.finish(rollout)
    calls = lake.sql("SELECT trajectory_id, status_code, error FROM calls")
    by_rollout = {r[0]: r[1:] for r in calls.rows()}
    assert answered <= set(by_rollout)  # every answered call, replayed from the spool
    for rollout, (status, error) in by_rollout.items():
        if rollout in answered:
            assert (status, error) == (200, None)
        else:  # kept only as a failed call where its small failure record still fitted
            assert "could not record" in error, (rollout, error)
    assert "could not record" in log.read_text()


def test_a_finished_rollout_stays_finished_after_kill_9(
    make_stub: MakeStub, tmp_path: Path
) -> None:
    stub = make_stub(Reply(text="hi"))
    lake_dir, spool, log = tmp_path / "lake", tmp_path / "spool", tmp_path / "proxy.log"
    with ProxyProcess(lake_dir, spool, stub.url, log, ["--commit-seconds", "0.05"]) as proxy:
        assert _ask(proxy.url, "done", stream=False) == "ok"
        assert requests.post(f"{proxy.url}/rollouts/done/finish", json={}, timeout=10).ok
        proxy.wait_for("committed_rollouts", 1)  # in the lake; the spool holds nothing of it
        proxy.stop(signal.SIGKILL)
    with ProxyProcess(lake_dir, spool, stub.url, log, ["--commit-seconds", "0.05"]) as proxy:
        chat = f"{proxy.url}/rollouts/done/v1/chat/completions"
        ask = {"model": "stub-model", "messages": [{"role": "user", "content": "more"}]}
        late = requests.post(chat, json=ask, timeout=10)
        assert late.status_code == 409, late.text
        assert late.json()["error"]["type"] == "rollout_finished"
        for admin in ("outcome", "finish"):
            again = requests.post(f"{proxy.url}/rollouts/done/{admin}", json={}, timeout=10)
            assert again.status_code == 409, (admin, again.text)
        assert proxy.health()["open_rollouts"] == 0
        assert proxy.stop() == 0
    assert len(stub.requests) == 1  # the late call never reached the upstream
    lake = tl.open_lake(lake_dir)
    assert lake.sql("SELECT count(*) FROM calls").rows() == [(1,)]


def test_spool_folder_and_files_are_private(
    lake: tl.Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fresh = tmp_path / "fresh" / "spool"
    recorder = Recorder(lake, fresh)
    assert file_mode(fresh) == 0o700 and file_mode(recorder.spool.path) == 0o600
    recorder.close()
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with caplog.at_level(logging.WARNING, logger="trajlake.proxy.spool"):
        recorder = Recorder(lake, loose)
    assert file_mode(loose) == 0o700 and file_mode(recorder.spool.path) == 0o600
    assert "0755" in caplog.text and "0700" in caplog.text
    recorder.close()


def _call(recorder: Recorder, rollout: str, text: str) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": text}]}
    ticket = recorder.begin_call(
        rollout, {}, request=request, dialect="chat", endpoint="/v1/chat/completions"
    )
    response = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    }
    recorder.end_call(
        ticket,
        dialect="chat",
        endpoint="/v1/chat/completions",
        stream=False,
        request=request,
        response=response,
        status_code=200,
        error=None,
    )


def test_committed_data_leaves_the_spool_while_a_rollout_stays_open(
    lake: tl.Lake, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    recorder = Recorder(lake, spool, max_seconds=0.05, rotate_bytes=32 * 1024)
    recorder.start()
    _call(recorder, "keep", "the first call of the open rollout")
    for n in range(40):
        _call(recorder, f"done{n}", "x" * 2000)
        recorder.finish(f"done{n}")
    assert recorder.flush(10)
    assert spool_bytes(spool) > 80_000
    recorder.tick()  # the server runs it every few seconds
    assert spool_bytes(spool) < 2_000  # only the open rollout's call is left
    _call(recorder, "keep", "the second call of the open rollout")
    recorder.close()  # "keep" is unfinished: it stays spooled
    again = Recorder(lake, spool, max_seconds=0.05)
    assert again.start() == 1
    assert again.finish("keep") == 2
    assert again.flush(10)
    again.close()
    assert lake.sql("SELECT count(*) FROM calls WHERE trajectory_id = 'keep'").rows() == [(2,)]
    assert list(spool.glob("*.jsonl")) == []


def _big_ask(url: str, rollout: str) -> None:
    body = {"model": "stub-model", "messages": [{"role": "user", "content": "y" * 50_000}]}
    reply = requests.post(f"{url}/rollouts/{rollout}/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 200, reply.text


def test_an_idle_rollout_is_closed_and_the_spool_empties(
    make_stub: MakeStub, tmp_path: Path
) -> None:
    stub = make_stub(Reply(text="ok"))
    lake_dir, spool, log = tmp_path / "lake", tmp_path / "spool", tmp_path / "proxy.log"
    args = ["--commit-seconds", "0.05", "--idle-close", "1"]
    with ProxyProcess(lake_dir, spool, stub.url, log, args) as proxy:
        for rollout in ("finished", "forgotten"):
            for _ in range(3):
                _big_ask(proxy.url, rollout)
        assert requests.post(f"{proxy.url}/rollouts/finished/finish", json={}, timeout=10).ok
        assert spool_bytes(spool) > 300_000
        proxy.wait_for("committed_rollouts", 2, timeout=30)  # "forgotten" closed when idle
        deadline = time.monotonic() + 10
        while spool_bytes(spool) > 1_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spool_bytes(spool) <= 1_000
        late = requests.post(
            f"{proxy.url}/rollouts/forgotten/v1/chat/completions",
            json={"model": "stub-model", "messages": [{"role": "user", "content": "hello?"}]},
            timeout=10,
        )
        assert late.status_code == 409
        assert proxy.stop() == 0
    rows: Any = (
        tl.open_lake(lake_dir)
        .sql("SELECT trajectory_id, status, exit_reason, attrs FROM trajectories ORDER BY 1")
        .rows()
    )
    assert [(r[0], r[1]) for r in rows] == [("finished", None), ("forgotten", "error")]
    assert rows[1][2] == "idle_closed"
    assert "no call for 1 s" in json.loads(rows[1][3])["proxy"]["closed"]
    assert "closed idle rollout 'forgotten'" in log.read_text()


_FILL_SPOOL = """
import json, resource, signal, sys
from trajlake.proxy.spool import Spool, SpoolError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
spool = Spool(sys.argv[1])
written, failed = [], 0
for n in range(40):
    before = spool.path.stat().st_size
    try:
        spool.append({"kind": "outcome", "rollout_id": f"r{n}", "outcome": {"x": "y" * 300}})
        written.append(f"r{n}")
    except SpoolError:
        failed += 1
        assert spool.path.stat().st_size == before  # cut back: no partial line left
    if n == 29:  # the disk has room again
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
print(json.dumps({"written": written, "failed": failed}))
"""


def test_a_failed_write_leaves_no_partial_line_and_the_spool_resumes(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    child = subprocess.run(
        [sys.executable, "-c", _FILL_SPOOL, str(spool)], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["failed"] >= 10 and len(result["written"]) == 40 - result["failed"]
    found = replay(Spool(spool))
    assert [r.rollout_id for r in found.pending] == result["written"]  # every line parses
