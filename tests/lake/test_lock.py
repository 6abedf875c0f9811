"""Tests of the lake commit lock: local flock, and the S3 lease against a moto server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trajlake
from trajlake.errors import LockTimeout, UnsupportedStorage
from trajlake.lake._lock import LOCK_NAME, commit_lock

# tests/ holds the moto helper; it is not a package, so make it importable from here.
_TESTS_DIR = str(Path(__file__).resolve().parents[1])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
from s3_server import DEFAULT_BUCKET, moto_s3_server  # noqa: E402

# Worker run in a child process: waits for the "go" file so both workers start together,
# then increments a counter n times under the lock (read, pause, write: racy without it).
_COUNTER_WORKER = """
import json, os, sys, threading, time
from trajlake.lake._lock import commit_lock

root, n, threads, options = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
if root.startswith("s3://"):
    import botocore.session
    bucket, key = root[5:].split("/", 1)[0], root[5:].split("/", 1)[1] + "/counter"
    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name=options["AWS_REGION"],
        aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"])
    read = lambda: int(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    write = lambda v: client.put_object(Bucket=bucket, Key=key, Body=str(v).encode())
    go = lambda: "Contents" in client.list_objects_v2(Bucket=bucket, Prefix=key + ".go")
else:
    path = os.path.join(root, "counter")
    read = lambda: int(open(path).read())
    write = lambda v: open(path, "w").write(str(v))
    go = lambda: os.path.exists(path + ".go")
print("ready", flush=True)
while not go():
    time.sleep(0.005)

def work():
    for _ in range(n):
        with commit_lock(root, options, timeout_s=30):
            value = read()
            time.sleep(0.002)
            write(value + 1)

pool = [threading.Thread(target=work) for _ in range(threads)]
for t in pool:
    t.start()
for t in pool:
    t.join()
"""

_HOLDER = """
import sys, time
from trajlake.lake._lock import commit_lock
with commit_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    """Start a child Python that can import this checkout's trajlake."""
    repo = str(Path(next(iter(trajlake.__path__))).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, text=True
    )


def _run_counter_workers(
    root: str, options: dict[str, str], go: Any, n: int, threads: int, prelude: str = ""
) -> None:
    procs = [
        _python(prelude + _COUNTER_WORKER, root, str(n), str(threads), json.dumps(options))
        for _ in "ab"
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go()
        for p in procs:
            assert p.wait(timeout=60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


# Local -----------------------------------------------------------------------------------------


def test_local_two_processes_serialize(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    os.makedirs(root)
    counter = Path(root, "counter")
    counter.write_text("0")
    _run_counter_workers(root, {}, lambda: Path(root, "counter.go").touch(), n=50, threads=1)
    assert counter.read_text() == "100"
    assert Path(root, *LOCK_NAME.split("/")).exists()


def test_local_sigkilled_holder_releases(tmp_path: Path) -> None:
    root = str(tmp_path)
    holder = _python(_HOLDER, root)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockTimeout), commit_lock(root, timeout_s=0.2):
            pass
        holder.kill()
        holder.wait(timeout=10)
        start = time.monotonic()
        with commit_lock(root, timeout_s=5):
            assert time.monotonic() - start < 2
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


# Where there is no fcntl (Windows), `import trajlake` must still work and local commits lock
# through filelock. The lock is exercised with trajlake's fcntl switched off after import (so
# filelock itself still uses the OS lock, as it does with msvcrt on Windows).
_NO_FCNTL = "import trajlake.lake._lock as _lock\n_lock.fcntl = None\n"


def test_import_without_fcntl_works() -> None:
    script = (
        "import sys\nsys.modules['fcntl'] = None\nimport trajlake\n"
        "from trajlake.lake import _lock\nprint(_lock.fcntl is None)"
    )
    child = _python(script)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    assert out.strip() == "True"


def test_local_without_fcntl_two_processes_serialize(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    os.makedirs(root)
    counter = Path(root, "counter")
    counter.write_text("0")
    go = Path(root, "counter.go").touch
    _run_counter_workers(root, {}, go, n=40, threads=2, prelude=_NO_FCNTL)
    assert counter.read_text() == "160"


def test_local_without_fcntl_times_out_and_reenters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajlake.lake import _lock

    monkeypatch.setattr(_lock, "fcntl", None)
    holder = _python(_NO_FCNTL + _HOLDER, str(tmp_path))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with (
            pytest.raises(LockTimeout, match="held elsewhere"),
            commit_lock(str(tmp_path), timeout_s=0.2),
        ):
            pass
        holder.kill()
        holder.wait(timeout=10)
        with commit_lock(str(tmp_path), timeout_s=5), commit_lock(str(tmp_path), timeout_s=0.1):
            pass  # the OS released the killed holder's lock; nesting re-enters
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_local_threads_serialize_and_nesting_is_reentrant(tmp_path: Path) -> None:
    state = {"value": 0}

    def work() -> None:
        for _ in range(20):
            with commit_lock(str(tmp_path)):
                with commit_lock(str(tmp_path), timeout_s=1):  # same thread: no self-deadlock
                    value = state["value"]
                time.sleep(0.0005)
                state["value"] = value + 1

    pool = [threading.Thread(target=work) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert state["value"] == 80


def test_local_timeout_while_other_thread_holds(tmp_path: Path) -> None:
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with commit_lock(str(tmp_path)):
            held.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        with pytest.raises(LockTimeout), commit_lock(str(tmp_path), timeout_s=0.1):
            pass
    finally:
        done.set()
        t.join()
    with commit_lock(f"file://{tmp_path}", timeout_s=1):
        pass


def test_unsupported_scheme() -> None:
    with pytest.raises(UnsupportedStorage, match="gs://"):
        commit_lock("gs://bucket/lake")


# S3 (moto) -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, dict[str, str]]]:
    pytest.importorskip("moto.server", reason="needs moto[server] (dev extra)")
    pytest.importorskip("botocore", reason="needs boto3 (s3 extra)")
    with moto_s3_server() as server:
        yield server


def _client(options: dict[str, str]) -> Any:
    import botocore.session

    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=options["AWS_ENDPOINT_URL"],
        region_name=options["AWS_REGION"],
        aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
    )


def _lease(client: Any, prefix: str) -> dict[str, Any] | None:
    try:
        obj = client.get_object(Bucket=DEFAULT_BUCKET, Key=f"{prefix}/{LOCK_NAME}")
    except client.exceptions.NoSuchKey:
        return None
    return dict(json.loads(obj["Body"].read()))


@pytest.mark.long
@pytest.mark.s3
def test_s3_processes_and_threads_serialize(s3: tuple[str, dict[str, str]]) -> None:
    _, options = s3
    client = _client(options)
    client.put_object(Bucket=DEFAULT_BUCKET, Key="contend/counter", Body=b"0")
    go = lambda: client.put_object(Bucket=DEFAULT_BUCKET, Key="contend/counter.go", Body=b"")  # noqa: E731
    _run_counter_workers(f"s3://{DEFAULT_BUCKET}/contend", options, go, n=5, threads=2)
    assert client.get_object(Bucket=DEFAULT_BUCKET, Key="contend/counter")["Body"].read() == b"20"
    assert _lease(client, "contend") is None  # released


@pytest.mark.s3
def test_s3_stale_lease_is_broken_live_one_is_not(s3: tuple[str, dict[str, str]]) -> None:
    _, options = s3
    client, root, key = _client(options), f"s3://{DEFAULT_BUCKET}/stale", f"stale/{LOCK_NAME}"
    live = {"owner": "someone-else", "expires_at": time.time() + 60, "lease_s": 60}
    client.put_object(Bucket=DEFAULT_BUCKET, Key=key, Body=json.dumps(live).encode())
    with pytest.raises(LockTimeout), commit_lock(root, options, timeout_s=0.3):
        pass
    dead = {**live, "expires_at": time.time() - 5}
    client.put_object(Bucket=DEFAULT_BUCKET, Key=key, Body=json.dumps(dead).encode())
    start = time.monotonic()
    with commit_lock(root, options, timeout_s=5):
        assert time.monotonic() - start < 2
        lease = _lease(client, "stale")
        assert lease is not None and lease["owner"] != "someone-else"
        with commit_lock(root, options, timeout_s=0.5):  # re-entrant on S3 too
            pass
    assert _lease(client, "stale") is None


@pytest.mark.s3
def test_s3_lease_is_renewed_while_held(s3: tuple[str, dict[str, str]]) -> None:
    _, options = s3
    client = _client(options)
    # lease_s=1.2 renews every 0.4s: by 1.0s at least one renewal has happened, with slack.
    with commit_lock(f"s3://{DEFAULT_BUCKET}/renew", options, lease_s=1.2):
        first = _lease(client, "renew")
        time.sleep(1.0)
        renewed = _lease(client, "renew")
        assert first is not None and renewed is not None
        assert renewed["owner"] == first["owner"]
        assert renewed["expires_at"] > first["expires_at"] and renewed["expires_at"] > time.time()
    assert _lease(client, "renew") is None
