"""The proxy spool starts a new file once everything in the old one is in the lake, and never
while a rollout still needs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trajlake as tl
from trajlake.proxy.recorder import Recorder

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSE = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _call(recorder: Recorder, rollout: str) -> None:
    ticket = recorder.begin_call(rollout, {})
    recorder.end_call(
        ticket,
        dialect="chat",
        endpoint="/v1/chat/completions",
        stream=False,
        request=REQUEST,
        response=RESPONSE,
        status_code=200,
        error=None,
    )


def _files(spool: Path) -> list[Path]:
    return sorted(spool.glob("*.jsonl"))


def test_spool_rotates_only_when_everything_is_committed(lake: tl.Lake, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    recorder = Recorder(lake, spool, max_seconds=0.05, rotate_bytes=1)
    recorder.start()
    first = recorder.spool.path
    _call(recorder, "r1")
    _call(recorder, "r2")
    recorder.finish("r1")
    assert recorder.flush(10)
    assert recorder.spool.path == first  # r2 is open: its call is only in this file
    recorder.finish("r2")
    assert recorder.flush(10)
    assert recorder.spool.path != first and not first.exists()
    assert _files(spool) == [recorder.spool.path]
    _call(recorder, "r3")  # open when the proxy stops: must survive in the new file
    recorder.close()
    rows: Any = lake.sql("SELECT trajectory_id FROM trajectories ORDER BY 1").rows()
    assert rows == [("r1",), ("r2",)]

    again = Recorder(lake, spool, max_seconds=0.05)
    assert again.start() == 1 and again.stats["open_rollouts"] == 1
    again.finish("r3")
    assert again.flush(10)
    again.close()
    rows = lake.sql("SELECT trajectory_id FROM trajectories ORDER BY 1").rows()
    assert rows == [("r1",), ("r2",), ("r3",)]
    assert _files(spool) == []
