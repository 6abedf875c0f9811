"""Test helper: a moto S3 server in a child process on loopback, for object-store tests.

Not a test module. Use ``with moto_s3_server() as (endpoint_url, storage_options): ...``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# Dummy credentials: moto accepts anything, but every client (delta-rs, s3fs, botocore)
# must be given *some* keys or it goes hunting in the environment and instance metadata.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
DEFAULT_BUCKET = "trajlake-test"


def storage_options_for(endpoint_url: str) -> dict[str, str]:
    """Storage options (delta-rs spelling) that reach the moto server at ``endpoint_url``."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",  # delta-rs refuses a plain-http endpoint without it
        # delta-rs 1.x already commits with If-None-Match puts on S3; say so explicitly.
        "conditional_put": "etag",
    }


@contextlib.contextmanager
def moto_s3_server(bucket: str = DEFAULT_BUCKET) -> Iterator[tuple[str, dict[str, str]]]:
    """Serve moto's S3 on 127.0.0.1:<free port> with an empty ``bucket``.

    Yields ``(endpoint_url, storage_options)``. The server runs in a child process because
    some deltalake calls (e.g. ``DeltaTable.is_deltatable``) hold the GIL while they wait
    for HTTP, which deadlocks against a server thread in the same process. It stops on
    exit, and by itself if this process dies (it exits when its stdin closes).
    """
    import botocore.session

    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"moto S3 server failed to start (exit code {proc.poll()})")
        endpoint_url = f"http://127.0.0.1:{port}"
        client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        client.create_bucket(Bucket=bucket)
        client.close()
        yield endpoint_url, storage_options_for(endpoint_url)
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()  # closing stdin is the server's signal to exit
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _SerializedApp:
    """Run one moto request at a time.

    moto implements ``If-None-Match: *`` as "look up the key, then store" without a lock, so
    a threaded server is not strictly atomic. Real S3 is; serializing requests makes moto
    behave like it while still accepting concurrent connections.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            return list(self._app(environ, start))  # finish the handler inside the lock


def _serve() -> None:
    """Child-process entry point: print the port, serve until stdin closes."""
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no per-request log lines
    app = _SerializedApp(DomainDispatcherApplication(create_backend_app))
    # Port 0: the kernel picks a free port. Loopback only, never 0.0.0.0.
    server = make_server("127.0.0.1", 0, app, threaded=True)

    def exit_when_parent_goes() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=exit_when_parent_goes, daemon=True).start()
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    _serve()
