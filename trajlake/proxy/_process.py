"""Big calls recorded in a separate process, away from the proxy's interpreter lock.

Parsing, redacting and encoding a 16 MiB request are long C calls that hold the lock for tens
of milliseconds each; in a thread they still stall the event loop for as long. The recorder
hands such a request's decoded bytes to one worker process (`RecordingProcess.request`), which
parses, redacts and encodes it with the rollout's redactor and writes it to its body file
(`trajlake/proxy/_bodies.py`); the proxy spools a short line naming that file. A finished
rollout holding such requests is reconstructed and redacted there too (`RecordingProcess.build`,
reading the body files itself), returned as Arrow tables. Only the request's bytes, one way,
and small objects cross: the proxy never turns the big body into Python strings.

The worker keeps, per rollout, the redaction cache (original → redacted text) of what the proxy
sent it and of the big strings it redacted itself, so a request repeating a history reads the
same as it would have in the proxy. If the worker dies, the call in progress fails with
`RecordingProcessError` (a `SpoolError`: the proxy refuses it) and the next call starts a
fresh one.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake.proxy._bodies import write_body
from trajlake.proxy.spool import SpoolError, encode_value

if TYPE_CHECKING:
    import pyarrow as pa

    from trajlake.proxy._committer import FinishedRollout
    from trajlake.redact import Redactor

__all__ = ["RecordedRequest", "RecordingProcess", "RecordingProcessError", "parse_body"]

log = logging.getLogger(__name__)


class RecordingProcessError(SpoolError):
    """The process recording big calls died or failed: the call cannot be recorded."""


def parse_body(plain: bytes) -> Any:
    """A decoded request body as the recorder keeps it (as `json_copy` reads it)."""
    from trajlake.proxy._forward import without_lone_surrogates

    try:
        return without_lone_surrogates(json.loads(plain), plain)
    except ValueError:
        return plain.decode("utf-8", errors="replace")
    except RecursionError:  # forwarded as sent; the upstream answers it
        return plain.decode("utf-8", errors="replace")


@dataclass
class RecordedRequest:
    """What the worker sends back for a request it wrote to its body file: whether it
    streams, and the redactor's new state."""

    stream: bool
    redactor: Redactor
    found: int
    new_cache: dict[str, str] = field(default_factory=dict)
    """Cache entries to keep in the proxy (texts under the big-string size)."""
    generation: int = 0
    """The worker that holds the rollout's cache now."""


# --------------------------------------------------------------------------- worker side

_caches: dict[str, dict[str, str]] = {}
"""The worker's redaction cache per rollout (all it was sent plus the big strings it saw)."""


def _request(header: dict[str, Any], plain: bytes) -> RecordedRequest:
    from trajlake.redact import redact_json

    rid, redactor = header["rollout_id"], header["redactor"]
    for gone in header["forget"]:
        _caches.pop(gone, None)
    cache = _caches.setdefault(rid, {})
    if header["reset"]:
        cache.clear()
    cache.update(header["cache"])
    body = parse_body(plain)
    before = len(cache)
    redacted, found = redact_json(body, redactor, cache)
    big = header["big_string"]
    new = dict(itertools.islice(cache.items(), before, None))
    small = {k: v for k, v in new.items() if len(k) < big}
    stream = isinstance(body, dict) and bool(body.get("stream"))
    text = encode_value(redacted)
    write_body(Path(header["body"]), text, fsync=header["fsync"])
    return RecordedRequest(stream, redactor, found, small)


def _build(item: FinishedRollout) -> tuple[dict[str, bytes], int]:
    import pyarrow as pa

    from trajlake.proxy._committer import build_rollout
    from trajlake.records import rows_for_table, trajectories_to_tables

    _caches.pop(item.rollout_id, None)
    trajectory, rows = build_rollout(item)
    tables = trajectories_to_tables([trajectory])
    tables["calls"] = rows_for_table("calls", rows)
    out = {}
    for name, table in tables.items():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        out[name] = sink.getvalue().to_pybytes()
    return out, len(rows)


def _serve(conn: Connection) -> None:
    """The worker's loop: one job at a time until the proxy closes the pipe."""
    while True:
        try:
            kind, header = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if kind == "request":
                conn.send(("ok", _request(header, conn.recv_bytes())))
            elif kind == "build":
                conn.send(("ok", _build(header)))
            else:
                conn.send(("error", f"unknown job {kind!r}"))
        except (EOFError, OSError):  # the proxy is gone (killed): nothing to answer
            return
        except Exception as e:  # reported to the proxy, which refuses the call
            log.exception("recording job failed")
            try:
                conn.send(("error", f"{type(e).__name__}: {e}"))
            except OSError:
                return


# --------------------------------------------------------------------------- proxy side


class RecordingProcess:
    """The proxy's handle on its worker process (started on first use, again after a death).

    Jobs run one at a time (a lock); callers are the recorder's worker thread and the
    committer thread, which wait for the answer without holding the interpreter lock.

    Args:
        big_string: Texts at least this long stay in the worker's cache only.
    """

    def __init__(self, big_string: int) -> None:
        self.big_string = big_string
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self.generation = 0
        """Counts worker starts: a rollout's cache must be sent again to a new worker."""
        self._forget: list[str] = []

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it starts)."""
        return None if self._process is None else self._process.pid

    def _ensure(self) -> Connection:
        if self._process is not None and self._process.poll() is None and self._conn is not None:
            return self._conn
        self._stop()
        # Its own interpreter, started as a module: not a fork of a threaded process, and not
        # multiprocessing's spawn, which would import the embedding program's main module.
        ours, theirs = socket.socketpair()
        with ours, theirs:
            command = [sys.executable, "-m", __name__, str(theirs.fileno())]
            process = subprocess.Popen(
                command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL
            )
            self._process, self._conn = process, Connection(ours.detach())
        self.generation += 1
        log.info("started the recording process (pid %s)", process.pid)
        return self._conn

    def forget(self, rollout_id: str) -> None:
        """Drop a finished rollout's cache in the worker (sent with the next job)."""
        self._forget.append(rollout_id)

    def request(
        self,
        rollout_id: str,
        plain: bytes,
        body: Path,
        redactor: Redactor,
        cache: dict[str, str],
        shipped: tuple[int, int],
        *,
        fsync: bool,
    ) -> RecordedRequest:
        """Parse, redact and encode a request in the worker, which writes it to `body` (a new
        body file; with `fsync`, durably).

        `cache` is the rollout's whole redaction cache here; `shipped` says how much of it
        (which worker, how many first entries) the worker holds already: only the rest is sent.

        Raises:
            RecordingProcessError: The worker died or failed (a fresh one is started next).
        """
        with self._lock:
            conn = self._ensure()
            reset = shipped[0] != self.generation
            skip = 0 if reset else shipped[1]
            header = {
                "rollout_id": rollout_id,
                "body": str(body),
                "fsync": fsync,
                "redactor": redactor,
                "cache": dict(itertools.islice(cache.items(), skip, None)),
                "reset": reset,
                "forget": self._forget,
                "big_string": self.big_string,
            }
            reply: RecordedRequest = self._job(conn, "request", header, plain)
            self._forget = []
            reply.generation = self.generation
            return reply

    def build(self, item: FinishedRollout) -> tuple[dict[str, pa.Table], int]:
        """Reconstruct and redact a finished rollout in the worker: its tables and calls.

        Raises:
            RecordingProcessError: The worker died or failed.
        """
        import pyarrow as pa

        with self._lock:
            conn = self._ensure()
            encoded, n_calls = self._job(conn, "build", item, None)
        tables = {name: pa.ipc.open_stream(data).read_all() for name, data in encoded.items()}
        return tables, n_calls

    def _job(self, conn: Connection, kind: str, header: Any, payload: bytes | None) -> Any:
        try:
            conn.send((kind, header))
            if payload is not None:
                conn.send_bytes(payload)
            status, reply = conn.recv()
        except (EOFError, OSError) as e:
            self._stop()
            raise RecordingProcessError(f"the recording process died: {e!r}") from e
        if status != "ok":
            raise RecordingProcessError(f"the recording process failed: {reply}")
        return reply

    def _stop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()  # the worker sees the end of its input and exits
        if self._process is not None:
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process, self._conn = None, None

    def close(self) -> None:
        """Stop the worker (after the job in progress)."""
        with self._lock:
            self._stop()


if __name__ == "__main__":
    # Served by the module under its own name, so what it pickles can be read by the proxy.
    from trajlake.proxy import _process

    _process._serve(Connection(int(sys.argv[1])))
