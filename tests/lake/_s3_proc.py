"""Run the moto S3 test server (tests/s3_server.py) in a child process.

delta-rs holds the GIL during some blocking calls (`DeltaTable.is_deltatable`), so a
server thread in the test process can starve and the call times out; a separate process
cannot. Usage: ``with s3_server_process() as (endpoint_url, storage_options): ...``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]

_SERVER = """
import json, sys
sys.path.insert(0, {tests!r})
from s3_server import moto_s3_server
with moto_s3_server({bucket!r}) as (endpoint_url, options):
    print(json.dumps([endpoint_url, options]), flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
"""


@contextlib.contextmanager
def s3_server_process(bucket: str = "trajlake-test") -> Iterator[tuple[str, dict[str, str]]]:
    """Start the moto server in a child process; yield (endpoint_url, storage_options)."""
    code = _SERVER.format(tests=str(_TESTS), bucket=bucket)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"moto S3 server did not start (exit code {proc.wait(10)})")
        endpoint_url, options = json.loads(line)
        yield endpoint_url, options
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
