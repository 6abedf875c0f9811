"""Test helper: an in-process moto S3 server on loopback, for object-store tests.

Not a test module. Use ``with moto_s3_server() as (endpoint_url, storage_options): ...``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# Dummy credentials: moto accepts anything, but every client (delta-rs, s3fs,
# botocore) must be given *some* keys or it goes hunting in env/IMDS.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
DEFAULT_BUCKET = "trajlake-test"


class _SerializedApp:
    """Run one moto request at a time.

    moto implements ``If-None-Match: *`` as "look up key, then store" without a
    lock, so a threaded server is not strictly atomic. Real S3 is; serializing
    requests makes moto behave like it while keeping concurrent connections.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            # Materialize the body inside the lock so the handler fully finishes.
            return list(self._app(environ, start_response))


def storage_options_for(endpoint_url: str) -> dict[str, str]:
    """Storage options (delta-rs spelling) that reach the moto server at ``endpoint_url``."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
        # moto honours If-None-Match on PutObject, so delta-rs can commit with
        # conditional puts instead of an (unsafe) copy+delete rename.
        "conditional_put": "etag",
    }


@contextlib.contextmanager
def moto_s3_server(bucket: str = DEFAULT_BUCKET) -> Iterator[tuple[str, dict[str, str]]]:
    """Serve moto's S3 on 127.0.0.1:<free port> with an empty ``bucket``.

    Yields ``(endpoint_url, storage_options)``. moto keeps its state per process, not per
    server, so a bucket left by an earlier server in this process is emptied first. The
    server stops on exit.
    """
    import botocore.session
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    # werkzeug logs every request at INFO on its own logger; keep test output clean.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    app = _SerializedApp(DomainDispatcherApplication(create_backend_app))
    # Port 0: the kernel picks a free port; loopback only, never 0.0.0.0.
    server = make_server("127.0.0.1", 0, app, threaded=True)
    host, port = server.server_address[:2]
    endpoint_url = f"http://{host!s}:{port}"
    thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
    thread.start()
    try:
        client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.close()
        yield endpoint_url, storage_options_for(endpoint_url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
