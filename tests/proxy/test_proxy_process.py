"""Big requests recorded in the recording process: the spool and the lake hold the same as when
they are recorded in the proxy itself, a recording process that dies fails only the call it was
recording (503, nothing kept) and the next call starts a new one; a lone surrogate in a body is
recorded (escaped), not answered with a 500."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from stub_upstream import Reply, StubUpstream

import trajlake as tl
from trajlake.proxy._forward import json_copy
from trajlake.proxy.recorder import Recorder
from trajlake.proxy.server import ProxyThread

ENDPOINT = "/v1/chat/completions"
KEY = "sk-proj-" + "Q7v9XkL2mN4pR8sT1wY6zA3bC5dE0fGh"
PASSWORD = "Xy7!pQ2zW#9m"


def _response(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "stub-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }


def _conversation() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Three calls of one rollout: secrets, a password learnt later that an earlier (repeated)
    text also holds, a history repeated in every request, a big tool log, a lone surrogate."""
    log = "build step ok\n" * 20_000 + f"export OPENAI_API_KEY={KEY}\n"
    first = [
        {"role": "system", "content": "You fix builds."},
        {"role": "user", "content": f"The log:\n{log}and then mysql -p{PASSWORD} failed"},
    ]
    second = [*first, {"role": "assistant", "content": "Let me look."}]
    second.append({"role": "user", "content": f"DB_PASSWORD={PASSWORD} is in .env \ud800 odd"})
    third = [*second, {"role": "assistant", "content": f"Token {KEY} leaked"}]
    third.append({"role": "user", "content": "x" * (1 << 20)})
    bodies = [first, second, third]
    replies = ["Looking.", f"Try again with {PASSWORD}", "Done."]
    return [
        ({"model": "stub-model", "messages": m, "stream": i == 1}, _response(r))
        for i, (m, r) in enumerate(zip(bodies, replies, strict=True))
    ]


async def _record(recorder: Recorder, rollout: str, via_process: bool) -> None:
    for request, response in _conversation():
        raw = json.dumps(request).encode()
        if via_process:
            ticket, recorded = await recorder.begin_big_call_async(
                rollout, {"task_id": "t"}, body=raw, dialect="chat", endpoint=ENDPOINT
            )
            assert recorded.stream is bool(request["stream"])
        else:  # as the server reads a body it records here
            recorded, _ = json_copy(raw, None)
            ticket = await recorder.begin_call_async(
                rollout,
                {"task_id": "t"},
                request=recorded,
                dialect="chat",
                endpoint=ENDPOINT,
                stream=bool(request["stream"]),
                size=len(raw),
            )
        await recorder.end_call_async(
            ticket,
            dialect="chat",
            endpoint=ENDPOINT,
            stream=bool(request["stream"]),
            request=recorded,
            response=response,
            status_code=200,
            error=None,
            size=len(raw),
        )
    await recorder.settled(rollout)
    recorder.set_outcome(rollout, {"resolved": True, "details": {"note": f"pw {PASSWORD}"}})
    recorder.finish(rollout, "completed")


_BODY_FILE = re.compile(rb'"request@file":"([^"]+)"')


def _inlined(line: bytes, spool_dir: Path) -> bytes:
    """A spool line with the body file it names (a big request's) written in its place."""
    return _BODY_FILE.sub(lambda m: b'"request":' + (spool_dir / m[1].decode()).read_bytes(), line)


_VARYING = re.compile(rb'"(call_id|started_at|latency_ms)":("[^"]*"|[0-9.e+-]+)')


def _spooled(lake_dir: Path, via_process: bool) -> tuple[list[bytes], list[dict[str, Any]]]:
    """The spool's lines (call ids and times blanked) and the lake's messages and calls."""
    lake = tl.open_lake(lake_dir, create=True)
    # Nothing is committed before `flush` (which deletes the body files the lines name).
    recorder = Recorder(
        lake,
        lake_dir.parent / "spool",
        process_bytes=0 if via_process else None,
        batch_size=1000,
        max_seconds=600.0,
    )
    recorder.start()
    asyncio.run(_record(recorder, "r", via_process))
    lines = [
        _VARYING.sub(rb'"\1":0', _inlined(line, recorder.spool.directory))
        for line in recorder.spool.path.read_bytes().splitlines()
    ]
    assert recorder.flush(60)
    recorder.close()
    stored = lake.sql(
        "SELECT m.idx, m.role, m.content, t.n_redactions FROM messages m "
        "JOIN trajectories t USING (trajectory_id) ORDER BY m.idx"
    ).to_dicts()
    calls = lake.sql(
        "SELECT seq, request_params, new_input::VARCHAR AS i, response::VARCHAR AS r "
        "FROM calls ORDER BY seq"
    ).to_dicts()
    return lines, stored + calls


def test_the_recording_process_spools_and_commits_what_the_proxy_would(tmp_path: Path) -> None:
    inline_lines, inline_rows = _spooled(tmp_path / "inline" / "lake", via_process=False)
    process_lines, process_rows = _spooled(tmp_path / "process" / "lake", via_process=True)
    assert len(inline_lines) == 8  # 3 requests, 3 answers, outcome, finish
    assert process_lines == inline_lines  # once the body files are read in
    text = b"\n".join(process_lines)
    assert KEY.encode() not in text and PASSWORD.encode() not in text
    assert b"<SECRET:" in text and b"\\\\ud800" in text  # the surrogate, escaped
    assert process_rows == inline_rows
    assert any("<SECRET:" in str(r.get("content")) for r in process_rows)


def _utime(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])


def _big(rollout: str, size: int) -> tuple[str, bytes]:
    body = {"model": "stub-model", "messages": [{"role": "user", "content": "y" * size}]}
    return f"/rollouts/{rollout}/v1/chat/completions", json.dumps(body).encode()


def test_a_dead_recording_process_fails_its_call_and_is_replaced(
    lake: tl.Lake, tmp_path: Path
) -> None:
    stub = StubUpstream((Reply(text="ok"),)).start()  # refuses bodies past 1 MiB: 413
    proxy = ProxyThread(lake, stub.url, spool_dir=tmp_path / "spool", commit_seconds=0.05)
    proxy.start()
    try:
        path, body = _big("first", 2 << 20)
        assert requests.post(proxy.url + path, data=body, timeout=60).status_code == 413
        pid = proxy.recorder.recording_pid
        assert pid is not None
        # Killed while it records a 16 MiB request: that call fails, nothing of it is kept.
        path, body = _big("killed", 16 << 20)
        answers: list[requests.Response] = []
        sender = threading.Thread(
            target=lambda: answers.append(requests.post(proxy.url + path, data=body, timeout=60))
        )
        idle = _utime(pid)
        sender.start()
        deadline = time.monotonic() + 30
        while _utime(pid) == idle and time.monotonic() < deadline:
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
        sender.join(60)
        assert answers[0].status_code == 503, answers[0].text
        assert "recording process died" in answers[0].json()["error"]["message"]
        # The next big call is recorded by a new process.
        path, body = _big("after", 2 << 20)
        assert requests.post(proxy.url + path, data=body, timeout=60).status_code == 413
        assert proxy.recorder.recording_pid not in (None, pid)
        for rollout in ("first", "after"):
            finished = requests.post(f"{proxy.url}/rollouts/{rollout}/finish", json={}, timeout=60)
            assert finished.status_code == 200, finished.text
        assert requests.post(f"{proxy.url}/rollouts/killed/finish", json={}).status_code == 404
        assert proxy.flush(60)
        stored = lake.sql(
            "SELECT trajectory_id, status_code, length(new_input::VARCHAR) AS n FROM calls "
            "ORDER BY trajectory_id"
        ).to_dicts()
        assert [(r["trajectory_id"], r["status_code"]) for r in stored] == [
            ("after", 413),
            ("first", 413),
        ]
        assert all(r["n"] > 2 << 20 for r in stored)  # the whole request is in the lake
    finally:
        proxy.stop()
        stub.stop()


def test_a_spool_folder_inside_the_lake_is_refused(lake: tl.Lake, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is inside the lake"):
        ProxyThread(lake, "http://127.0.0.1:9", spool_dir=Path(lake.uri) / "spool")
    assert not (Path(lake.uri) / "spool").exists()
