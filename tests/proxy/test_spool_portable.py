"""The proxy spool where there is no `fcntl` (Windows): `import trajlake.proxy.spool` works, and
the writer's lock is a `filelock` beside each spool file, so a live proxy's file is left alone
and a dead one's (closed, or killed) is replayed, its lock file removed with it.

As in tests/lake/test_lock.py, the spool's `fcntl` is switched off after import, so filelock
itself still locks through the OS, as it does with msvcrt on Windows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajlake.proxy import spool as spool_module
from trajlake.proxy.spool import LOCK_SUFFIX, Spool, replay

_NO_FCNTL = "import trajlake.proxy.spool as _spool\n_spool.fcntl = None\n"

# Spools one answered call of rollout r-dead, says so, then waits to be killed.
_WRITER = """
import sys, time
from trajlake.proxy.spool import Spool
spool = Spool(sys.argv[1])
spool.append({"kind": "call", "rollout_id": "r-dead", "call_id": "c1", "seq": 0})
print(spool.path, flush=True)
time.sleep(600)
"""


def _call(rollout: str, call: str = "c1") -> dict[str, object]:
    return {"kind": "call", "rollout_id": rollout, "call_id": call, "seq": 0}


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env
    )


@pytest.fixture
def no_fcntl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_module, "fcntl", None)


def test_import_without_fcntl_works() -> None:
    script = (
        "import sys\nsys.modules['fcntl'] = None\nimport trajlake.proxy.spool as s\n"
        "print(s.fcntl is None)"
    )
    child = _python(script)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0 and out.strip() == "True"


@pytest.mark.usefixtures("no_fcntl")
def test_a_live_spool_is_left_alone_and_a_closed_one_replayed(tmp_path: Path) -> None:
    live = Spool(tmp_path)
    live.append(_call("r-live"))
    lock = live.path.with_name(live.path.name + LOCK_SUFFIX)
    assert lock.exists()  # the writer's lock file, beside its spool file

    starting = Spool(tmp_path)
    assert replay(starting).pending == []  # the live writer's file is not touched
    assert live.path.exists()

    live.close()  # kept for replay: its lock is released and removed
    assert live.path.exists() and not lock.exists()
    again = Spool(tmp_path)
    (pending,) = replay(again).pending
    assert pending.rollout_id == "r-live" and list(pending.calls) == ["c1"]
    assert not live.path.exists()
    lines = again.path.read_bytes().splitlines()
    assert [json.loads(line)["rollout_id"] for line in lines] == ["r-live"]  # copied over
    for spool in (starting, again):
        spool.close(remove=True)
    # No writer's lock file left behind (the one replay lock of the folder stays).
    assert sorted(p.name for p in tmp_path.iterdir()) == [".replay.lock"]


@pytest.mark.usefixtures("no_fcntl")
def test_rotation_moves_the_lock_to_the_new_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(_call("r1"))
    first = spool.path
    assert spool.rotate(1, lambda: [_call("r1")])
    assert not first.exists() and not first.with_name(first.name + LOCK_SUFFIX).exists()
    assert spool.path.with_name(spool.path.name + LOCK_SUFFIX).exists()
    assert replay(Spool(tmp_path)).pending == []  # the rotated-to file is still live
    spool.close(remove=True)


def test_a_killed_writer_without_fcntl_is_replayed(tmp_path: Path, no_fcntl: None) -> None:
    writer = _python(_NO_FCNTL + _WRITER, str(tmp_path))
    try:
        assert writer.stdout is not None
        path = Path(writer.stdout.readline().strip())
        assert path.exists()
        starting = Spool(tmp_path)
        assert replay(starting).pending == []  # alive: left alone
        writer.kill()
        writer.wait(timeout=30)
        (pending,) = replay(starting).pending  # the OS dropped the dead writer's lock
        assert pending.rollout_id == "r-dead" and not path.exists()
        starting.close(remove=True)
        # The dead writer's lock file went with its file (the folder's replay lock stays).
        assert [p.name for p in tmp_path.iterdir()] == [".replay.lock"]
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()


@pytest.mark.skipif(spool_module.fcntl is None, reason="flock only where there is fcntl")
def test_a_spool_file_is_never_visible_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fcntl = spool_module.fcntl
    assert fcntl is not None
    flock, visible_at_lock = fcntl.flock, []

    def recording_flock(fd: int, operation: int) -> None:
        visible_at_lock.append(sorted(p.name for p in tmp_path.glob("calls-*.jsonl")))
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", recording_flock)
    spool = Spool(tmp_path)
    # When the lock was taken no spool file was visible under a name replay reads; now it is,
    # locked, and nothing of its hidden creation is left.
    assert visible_at_lock[0] == []
    assert [p.name for p in tmp_path.glob("calls-*.jsonl")] == [spool.path.name]
    assert not list(tmp_path.glob(".*.new"))
    monkeypatch.undo()
    starting = Spool(tmp_path)
    assert replay(starting).pending == []  # a live writer's file is left alone
    assert spool.path.exists()
    for each in (starting, spool):
        each.close(remove=True)
