"""Big requests are spooled to body files of their own: the spool line names the file, the file
is private and redacted, it goes once its rollout is in the lake, and a killed proxy's bodies
are carried into the next one's folder (the dead writer's folder removed)."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import pytest
import requests
from _proxy_process import ProxyProcess, file_mode, spool_bytes
from stub_upstream import Reply, StubUpstream

import trajlake as tl
from trajlake.proxy.recorder import Recorder
from trajlake.proxy.server import ProxyThread
from trajlake.proxy.spool import Spool, SpooledJSON, replay

KEY = "sk-proj-" + "Q7v9XkL2mN4pR8sT1wY6zA3bC5dE0fGh"
CHAT = "/v1/chat/completions"


def _big_body(size: int) -> bytes:
    """A chat request past the 1 MiB recording-process threshold, with a key in it."""
    text = f"export OPENAI_API_KEY={KEY}\n" + "z" * size
    body = {"model": "stub-model", "messages": [{"role": "user", "content": text}]}
    return json.dumps(body).encode()


def _lines(spool: Path) -> list[dict[str, object]]:
    return [json.loads(line) for f in spool.glob("*.jsonl") for line in f.read_bytes().splitlines()]


def _body_files(spool: Path) -> list[Path]:
    return sorted(spool.glob("bodies/*/*.json"))


def test_a_big_request_is_spooled_to_a_private_redacted_body_file(
    lake: tl.Lake, tmp_path: Path
) -> None:
    stub = StubUpstream((Reply(text="ok"),)).start()  # refuses bodies past 1 MiB: 413
    spool = tmp_path / "spool"
    proxy = ProxyThread(lake, stub.url, spool_dir=spool, commit_seconds=0.05).start()
    try:
        url = f"{proxy.url}/rollouts/big{CHAT}"
        assert requests.post(url, data=_big_body(2 << 20), timeout=60).status_code == 413
        (request,) = [e for e in _lines(spool) if e["kind"] == "request"]
        (body,) = _body_files(spool)
        assert request["request@file"] == body.relative_to(spool).as_posix()
        assert "request" not in request
        assert sum(f.stat().st_size for f in spool.glob("*.jsonl")) < 4096  # short lines
        assert spool_bytes(spool) > 2 << 20  # and the body beside them
        assert file_mode(body) == 0o600 and file_mode(body.parent) == 0o700
        text = body.read_bytes()
        assert len(text) > 2 << 20 and KEY.encode() not in text and b"<SECRET:" in text

        assert requests.post(f"{proxy.url}/rollouts/big/finish", json={}, timeout=60).ok
        assert proxy.flush(60)
        assert _body_files(spool) == []  # in the lake: the body file went
        (stored,) = lake.sql("SELECT new_input::VARCHAR AS i FROM calls").to_dicts()
        assert len(stored["i"]) > 2 << 20 and KEY not in stored["i"]
    finally:
        proxy.stop()
        stub.stop()
    assert not (spool / "bodies").exists()  # nothing pending: the folder went with the spool


def test_a_killed_proxys_big_calls_are_replayed_with_their_bodies(tmp_path: Path) -> None:
    stub = StubUpstream((Reply(text="ok"),)).start()
    lake_dir, spool, log = tmp_path / "lake", tmp_path / "spool", tmp_path / "proxy.log"
    try:
        args = ["--commit-seconds", "30"]  # nothing reaches the lake before the kill
        with ProxyProcess(lake_dir, spool, stub.url, log, args) as proxy:
            url = f"{proxy.url}/rollouts/r{CHAT}"
            for size in (2 << 20, 3 << 20):
                assert requests.post(url, data=_big_body(size), timeout=60).status_code == 413
            small = {"model": "stub-model", "messages": [{"role": "user", "content": "hi"}]}
            assert requests.post(url, json=small, timeout=60).status_code == 200
            assert len(_body_files(spool)) == 2
            assert proxy.stop(signal.SIGKILL) == -signal.SIGKILL
        (dead,) = (spool / "bodies").iterdir()

        lake = tl.open_lake(lake_dir)
        with Recorder(lake, spool, max_seconds=0.05) as restarted:
            assert not dead.exists()  # its bodies were linked over, then the folder removed
            assert len(_body_files(spool)) == 2
            (rollout,) = restarted.open_rollouts()
            restarted.finish(rollout)
            assert restarted.flush(60)
            assert _body_files(spool) == []
        calls = lake.sql(
            "SELECT seq, status_code, length(new_input::VARCHAR) AS n FROM calls ORDER BY seq"
        ).rows()
        assert [(seq, status) for seq, status, _ in calls] == [(0, 413), (1, 413), (2, 200)]
        assert calls[0][2] > 2 << 20 and calls[1][2] > 3 << 20  # whole requests, replayed
    finally:
        stub.stop()
    assert not (spool / "bodies").exists()


def test_a_body_file_lost_before_replay_keeps_the_call_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = Spool(tmp_path)
    kept, lost = dead.body_path("c-kept"), dead.body_path("c-lost")
    for n, path in enumerate((kept, lost)):
        path.write_bytes(b'{"model":"m","messages":[]}')
        value = SpooledJSON(path, dead.bodies.ref(path))
        dead.append({"kind": "request", "rollout_id": "r", "call_id": path.stem, "request": value})
        dead.append({"kind": "call", "rollout_id": "r", "call_id": path.stem, "seq": n})
    dead.close()  # the writer is gone; its spool file and body folder stay for replay
    lost.unlink()

    starting = Spool(tmp_path)
    with caplog.at_level(logging.ERROR):
        (pending,) = replay(starting).pending
    calls = {c["call_id"]: c for c in pending.calls.values()}
    assert calls["c-lost"]["request"] is None  # answered, so kept; its request is gone
    adopted = calls["c-kept"]["request"]
    assert isinstance(adopted, SpooledJSON) and adopted.file.parent == starting.bodies.root
    assert adopted.value() == {"model": "m", "messages": []}
    assert str(lost) in caplog.text and "cannot be read" in caplog.text
    assert not kept.parent.exists()  # the dead writer's folder is gone
    starting.close(remove=True)


def test_rotation_carries_the_line_that_names_a_body_not_the_body(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    path = spool.body_path("c1")
    path.write_bytes(json.dumps({"pad": "x" * (1 << 20)}).encode())
    record = {"kind": "request", "rollout_id": "r", "call_id": "c1"}
    record["request"] = SpooledJSON(path, spool.bodies.ref(path))
    spool.append(record)
    assert spool.rotate(1, lambda: [record])
    assert spool.size < 512  # the short line, carried
    (line,) = spool.path.read_bytes().splitlines()
    assert json.loads(line)["request@file"] == spool.bodies.ref(path)
    assert path.exists()
    spool.close(remove=True)
    assert not path.exists()


def test_lone_surrogates_are_found_with_one_scan_of_the_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trajlake.proxy import _forward

    messages = [{"role": "user", "content": f"turn {i}"} for i in range(2000)]
    messages.append({"role": "user", "content": "odd \ud800 end"})
    raw = json.dumps({"messages": messages}).encode()
    scans: list[int] = []
    pattern = _forward._SURROGATE_ESCAPE

    class Counting:
        def search(self, text: bytes) -> object:
            scans.append(len(text))
            return pattern.search(text)

    monkeypatch.setattr(_forward, "_SURROGATE_ESCAPE", Counting())
    fixed = _forward.without_lone_surrogates(json.loads(raw), raw)
    # Once for the whole body, not once per string (2,000 scans of it: seconds per MiB).
    assert scans == [len(raw)]
    assert fixed["messages"][-1]["content"] == "odd \\ud800 end"
    assert fixed["messages"][0] == {"role": "user", "content": "turn 0"}
    emoji = json.dumps({"content": "ok 😀"}).encode()  # an escaped pair is whole: untouched
    assert _forward.without_lone_surrogates(json.loads(emoji), emoji) == {"content": "ok 😀"}
