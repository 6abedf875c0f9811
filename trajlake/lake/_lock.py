"""Cross-process commit lock of a lake: ``flock`` for local roots, a renewed lease object on S3.

Where ``fcntl`` does not exist (Windows) local roots use ``filelock`` instead (``msvcrt``
locking, also released by the OS when the holder dies), so ``import trajlake`` works there.

Usage: ``with commit_lock(root, storage_options): ...`` serializes lake commits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from trajlake.errors import LockTimeout, UnsupportedStorage, missing_extra

try:
    import fcntl
except ImportError:  # Windows: _PortableLock below
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

LOCK_NAME = "_trajlake/commit.lock"
DEFAULT_LEASE_S = 60.0


class _Holder:
    """In-process state of one lock: threads queue here instead of hammering flock/S3."""

    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self.depth = 0  # only touched by the thread that owns ``rlock``


_holders: dict[str, _Holder] = {}
_holders_guard = threading.Lock()
_open_fds: set[int] = set()
_clients: dict[frozenset[tuple[str, str]], Any] = {}  # botocore clients are thread-safe


def _after_fork_in_child() -> None:
    # A forked child is not the holder: forget the parent's state, and close inherited flock
    # fds so the lock is still released when the parent dies, whatever the child does.
    global _holders_guard
    _holders.clear()
    _clients.clear()  # connection pools must not be shared across processes
    _holders_guard = threading.Lock()
    for fd in _open_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _open_fds.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def commit_lock(
    root: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    timeout_s: float = 120.0,
    lease_s: float = DEFAULT_LEASE_S,
) -> contextlib.AbstractContextManager[None]:
    """Hold the lake's commit lock (``<root>/_trajlake/commit.lock``) for a ``with`` body.

    Re-entrant in the holding thread; other threads and processes wait up to ``timeout_s``,
    then get ``LockTimeout``. On S3 the lease lasts ``lease_s`` and is renewed while held, so
    a crashed holder blocks others for at most ``lease_s`` (assumes roughly synced clocks).
    """
    scheme = urlparse(root).scheme.lower() if "://" in root else ""
    backend: _Flock | _PortableLock | _S3Lease
    if scheme in ("", "file"):
        path = urlparse(root).path if scheme else root
        lock_path = os.path.join(os.path.abspath(path), *LOCK_NAME.split("/"))
        backend = _Flock(lock_path) if fcntl is not None else _PortableLock(lock_path)
    elif scheme in ("s3", "s3a"):
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")
        backend = _S3Lease(root, storage_options or {}, lease_s)
    else:
        raise UnsupportedStorage(
            f"commit locks are not implemented for {scheme}:// lakes; use a local path or an "
            "s3:// root (S3-compatible stores with conditional writes work via AWS_ENDPOINT_URL)"
        )
    return _held(backend, timeout_s)


@contextlib.contextmanager
def _held(backend: _Flock | _PortableLock | _S3Lease, timeout_s: float) -> Iterator[None]:
    deadline = time.monotonic() + timeout_s
    with _holders_guard:
        holder = _holders.setdefault(backend.ident, _Holder())
    if not holder.rlock.acquire(timeout=max(timeout_s, 0.0)):
        raise LockTimeout(f"commit lock {backend.ident} is held by another thread ({timeout_s}s)")
    try:
        if holder.depth == 0 and not backend.acquire(deadline):
            raise LockTimeout(f"commit lock {backend.ident} is held elsewhere ({timeout_s}s)")
        holder.depth += 1
        try:
            yield
        finally:
            holder.depth -= 1
            if holder.depth == 0:
                backend.release()
    finally:
        holder.rlock.release()


def _wait(deadline: float, attempt: Callable[[], bool], first_s: float, max_s: float) -> bool:
    """Retry ``attempt`` with exponential backoff; jitter keeps waiters out of lockstep."""
    delay = first_s
    while not attempt():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(remaining, random.uniform(first_s / 2, delay)))
        delay = min(max_s, delay * 2)
    return True


class _Flock:
    """flock on a local file: the kernel drops it when the holder dies, even on SIGKILL."""

    def __init__(self, path: str) -> None:
        self.ident = path
        self._fd = -1

    def _try(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def acquire(self, deadline: float) -> bool:
        os.makedirs(os.path.dirname(self.ident), exist_ok=True)
        self._fd = os.open(self.ident, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        _open_fds.add(self._fd)
        # Non-blocking attempts in a loop, because a blocking flock cannot honour the timeout.
        try:
            if _wait(deadline, self._try, 0.002, 0.1):
                return True
        except BaseException:  # e.g. KeyboardInterrupt while waiting: don't leak the fd
            self.release()
            raise
        self.release()
        return False

    def release(self) -> None:
        # After a fork the child's copy is already closed (and the number maybe reused): skip.
        if self._fd in _open_fds:
            _open_fds.discard(self._fd)
            # Unlock explicitly too: a child forked behind our back may share this open file.
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
        self._fd = -1


class _PortableLock:
    """`filelock` on a local file, where there is no `flock` (Windows); also released by the
    OS when the holder dies."""

    def __init__(self, path: str) -> None:
        self.ident = path
        self._lock: Any = None

    def acquire(self, deadline: float) -> bool:
        import filelock

        os.makedirs(os.path.dirname(self.ident), exist_ok=True)
        lock = filelock.FileLock(self.ident, thread_local=False)
        try:
            lock.acquire(timeout=max(0.0, deadline - time.monotonic()), poll_interval=0.01)
        except filelock.Timeout:
            return False
        self._lock = lock
        return True

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _status(exc: BaseException) -> int:
    # HTTP status of a botocore ClientError; 0 for anything else (e.g. network errors).
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _opt(options: Mapping[str, str], *names: str) -> str | None:
    """First non-empty storage option among ``names`` (delta-rs keys are case-insensitive)."""
    lower = {k.lower(): v for k, v in options.items()}
    return next((lower[n] for n in names if lower.get(n)), None)


def _s3_client(options: Mapping[str, str]) -> Any:
    """A botocore S3 client for delta-rs style storage options, cached: creating one costs ~0.2s."""
    try:
        import botocore.session
        from botocore.config import Config
    except ImportError as exc:
        raise missing_extra("boto3", "s3") from exc
    cache_key = frozenset(options.items())
    with _holders_guard:
        if cache_key in _clients:
            return _clients[cache_key]
        endpoint = _opt(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
        virtual = _opt(options, "aws_virtual_hosted_style_request", "virtual_hosted_style_request")
        # delta-rs (object_store) uses path-style URLs with a custom endpoint unless told not to.
        style = "virtual" if (virtual or "").lower() == "true" else ("path" if endpoint else "auto")
        session = botocore.session.Session(profile=_opt(options, "aws_profile", "profile"))
        client = _clients[cache_key] = session.create_client(
            "s3",
            region_name=_opt(options, "aws_region", "region", "aws_default_region"),
            endpoint_url=endpoint,
            aws_access_key_id=_opt(options, "aws_access_key_id", "access_key_id"),
            aws_secret_access_key=_opt(options, "aws_secret_access_key", "secret_access_key"),
            aws_session_token=_opt(options, "aws_session_token", "aws_token", "session_token"),
            config=Config(s3={"addressing_style": style}, retries={"mode": "standard"}),
        )
        return client


class _S3Lease:
    """Lease object created with ``If-None-Match: *``, renewed and deleted with ``If-Match``."""

    def __init__(self, root: str, options: Mapping[str, str], lease_s: float) -> None:
        url = urlparse(root)
        prefix = url.path.strip("/")
        self.bucket = url.netloc
        self.key = f"{prefix}/{LOCK_NAME}" if prefix else LOCK_NAME
        endpoint = _opt(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
        self.ident = f"s3://{self.bucket}/{self.key}@{endpoint or 'aws'}"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self._options, self._lease_s = options, lease_s
        self._client: Any = None
        self._etag: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _put(self, **condition: str) -> None:
        lease = {"owner": self.owner, "expires_at": time.time() + self._lease_s}
        body = json.dumps({**lease, "lease_s": self._lease_s}).encode()
        resp = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **condition)
        self._etag = str(resp["ETag"])

    def acquire(self, deadline: float) -> bool:
        self._client = _s3_client(self._options)
        if not _wait(deadline, self._try_create, 0.02, 1.0):
            return False
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="trajlake-lease", daemon=True)
        self._renewer.start()
        logger.debug("acquired commit lease %s as %s", self.ident, self.owner)
        return True

    def _try_create(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._put(IfNoneMatch="*")
            return True
        except ClientError as exc:
            # 412: a lease exists. 409: a concurrent conditional put on the key won the race.
            if _status(exc) not in (409, 412):
                raise
        self._break_if_stale()
        return False

    def _break_if_stale(self) -> None:
        from botocore.exceptions import ClientError

        try:
            obj = self._client.get_object(Bucket=self.bucket, Key=self.key)
            body = obj["Body"].read()
        except ClientError as exc:
            if _status(exc) == 404:  # released meanwhile: the next create attempt may win
                return
            raise
        try:
            lease = json.loads(body)
            expires_at, holder = float(lease["expires_at"]), str(lease.get("owner"))
        except (ValueError, KeyError, TypeError):
            # Unreadable lease (foreign tool, manual edit): age it from its write time instead.
            expires_at, holder = obj["LastModified"].timestamp() + self._lease_s, "?"
        if expires_at <= time.time():
            ago = time.time() - expires_at
            logger.warning(
                "breaking stale commit lease %s of %s, %.1fs expired", self.ident, holder, ago
            )
            # If-Match: delete the lease judged stale, never one renewed or re-taken since.
            self._delete(str(obj["ETag"]))

    def _delete(self, etag: str) -> bool:
        """Delete the lease if its ETag is still ``etag``; False if it changed or vanished."""
        from botocore.exceptions import ClientError

        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=etag)
        except ClientError as exc:
            if _status(exc) in (404, 412):
                return False
            if _status(exc) != 501:
                raise
            # The store lacks conditional deletes: a plain delete, with a small race window.
            self._client.delete_object(Bucket=self.bucket, Key=self.key)
        return True

    def _renew(self) -> None:
        while not self._stop.wait(self._lease_s / 3):
            try:
                self._put(IfMatch=self._etag or "")
            except Exception as exc:
                if _status(exc) in (404, 412):
                    # Broken as stale by another writer: this holder stalled past lease_s. Its
                    # work cannot be stopped from here, so make the lost exclusivity loud.
                    logger.error("commit lease %s was lost to another writer", self.ident)
                    self._etag = None
                    return
                # Two more ticks remain before expiry, so a transient error is only a warning.
                logger.warning("renewing commit lease %s failed, will retry: %s", self.ident, exc)

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self._etag is not None and not self._delete(self._etag):
            logger.error("commit lease %s was lost before release", self.ident)
        logger.debug("released commit lease %s", self.ident)
