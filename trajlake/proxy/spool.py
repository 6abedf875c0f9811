"""The proxy's write-ahead spool: each call's request and answer, outcome and finish as a line.

A process writes `calls-<pid>-<start>.jsonl` (mode 0600, in a 0700 folder) under an exclusive
lock; on start-up, files whose writer is gone are replayed (`replay`) so a killed proxy loses
nothing it had answered. The lock is `flock` on the file where there is `fcntl`, and a
`filelock` on `<file>.lock` elsewhere (Windows): both are dropped by the OS when the writer dies,
which is what tells a live writer's file from an orphan. A write that fails is undone (the file
is cut back to its last whole line) and raised as `SpoolError`, so the caller can refuse the call
instead of answering it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from trajlake.errors import TrajlakeError
from trajlake.proxy._bodies import BodyStore, replay_lock

try:
    import fcntl
except ImportError:  # Windows: `_WriterLock` takes a lock file beside each spool file instead
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "Replay",
    "ReplayedRollout",
    "Spool",
    "SpoolError",
    "SpooledJSON",
    "batch_event",
    "replay",
]

log = logging.getLogger(__name__)

PREFIX = "calls-"
SUFFIX = ".jsonl"
LOCK_SUFFIX = ".lock"
_NEW = ".new"
"""Suffix of a spool file being created (hidden, not yet locked under its name)."""
"""Of the lock file beside a spool file, where there is no `fcntl`."""
_DIR_MODE, _FILE_MODE = 0o700, 0o600
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)  # not on Windows, whose handles are not inherited


class SpoolError(TrajlakeError):
    """The proxy's spool cannot be written (permissions, full disk, file size limit, I/O)."""


@dataclass
class ReplayedRollout:
    """What the spool files say about one rollout that is not committed yet."""

    rollout_id: str
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)  # call_id → call record
    outcome: dict[str, Any] | None = None
    finished: bool = False
    status: str | None = None
    closed: str | None = None
    """Why the proxy itself finished the rollout (idle), if it did."""
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Request events of calls with no answer spooled (in flight when the writer died)."""
    batch: str | None = None
    """The commit the writer had assigned the rollout to before it died (`batch_event`)."""

    def records(self) -> list[dict[str, Any]]:
        """The events to write again so this rollout survives the old files' removal."""
        out: list[dict[str, Any]] = sorted(self.calls.values(), key=lambda c: c.get("seq", 0))
        if self.batch is not None:
            out.append(batch_event(self.rollout_id, self.batch))
        if self.outcome is not None:
            out.append({"kind": "outcome", "rollout_id": self.rollout_id, "outcome": self.outcome})
        if self.finished:
            out.append(finish_event(self.rollout_id, self.status, self.closed))
        return out


def finish_event(rollout_id: str, status: str | None, closed: str | None) -> dict[str, Any]:
    """The spool event that finishes a rollout (`closed`: why the proxy closed it)."""
    event: dict[str, Any] = {"kind": "finish", "rollout_id": rollout_id, "status": status}
    if closed is not None:
        event["closed"] = closed
    return event


def batch_event(rollout_id: str, batch: str) -> dict[str, Any]:
    """The spool event that assigns a rollout to a named commit before it is made: a writer
    killed between the commit and its `committed` mark leaves the name for replay to reuse."""
    return {"kind": "batch", "rollout_id": rollout_id, "batch": batch}


def _private_directory(directory: Path) -> None:
    """Create the folder 0700, or tighten an existing one: it holds prompts and answers."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & 0o077:
            os.chmod(directory, _DIR_MODE)
            log.warning(
                "tightened the proxy spool folder %s from %04o to %04o: it holds the prompts "
                "and answers of every call",
                directory,
                mode,
                _DIR_MODE,
            )
    except OSError as e:
        raise SpoolError(f"cannot make the proxy spool folder {directory} private: {e}") from e


class SpooledJSON:
    """A value kept as JSON text in a body file of its own (a big request, encoded and written
    by the recording process): spool lines name the file, and it is parsed only when read.
    """

    __slots__ = ("file", "ref", "stream")

    def __init__(self, file: Path, ref: str, stream: bool = False) -> None:
        self.file = file
        self.ref = ref
        """The file as spool lines name it (relative to the spool folder)."""
        self.stream = stream
        """The request asked for a streamed answer (read from it when it was encoded)."""

    @property
    def raw(self) -> bytes:
        """The value's JSON text."""
        return self.file.read_bytes()

    def value(self) -> Any:
        """The value, parsed (a copy each time)."""
        return json.loads(self.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpooledJSON) and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]


FILE_KEY = "@file"
"""Suffix of a spool line's key naming the body file that holds the value of the key before it."""


def body_files(records: Iterable[Mapping[str, Any]]) -> list[Path]:
    """The body files `records` hold values in."""
    values = (r.get("request") for r in records)
    return [v.file for v in values if isinstance(v, SpooledJSON)]


def _encode(records: Iterable[Mapping[str, Any]], *, in_pieces: bool = False) -> bytes:
    dumps = _dumps_in_pieces if in_pieces else _dumps
    return b"".join(_line(r, dumps) for r in records)


def _line(record: Mapping[str, Any], dumps: Callable[[Any], str]) -> bytes:
    """One record's line; values kept in body files are named (`<key>@file`), last."""
    kept = [k for k, v in record.items() if isinstance(v, SpooledJSON)]
    if not kept:
        return _utf8(dumps(record)) + b"\n"
    head = _utf8(dumps({k: v for k, v in record.items() if k not in kept}))
    parts = [head[:-1]]
    for i, key in enumerate(kept):
        sep = b"," if i or len(head) > 2 else b""
        ref = record[key].ref
        parts += (sep, _utf8(_escape(key + FILE_KEY)), b":", _utf8(_escape(ref)))
    return b"".join(parts) + b"}\n"


def encode_value(value: Any) -> bytes:
    """A value's JSON text as spool lines hold it (compact, UTF-8, lone surrogates escaped)."""
    return _utf8(_dumps(value))


def _utf8(text: str) -> bytes:
    """UTF-8, with a lone surrogate (a JSON body may hold `\\ud800`) written as its JSON
    escape: the line stays valid UTF-8 and reads back as the same string."""
    return text.encode("utf-8", "backslashreplace")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


_PIECE = 1 << 20
_escape = json.encoder.encode_basestring  # what `json.dumps(..., ensure_ascii=False)` uses


def _dumps_in_pieces(value: Any) -> str:
    """`_dumps(value)`, with strings escaped a MiB at a time: one `json.dumps` of a 16 MiB
    string is one C call that holds the GIL (and so the proxy's event loop) for ~50 ms."""
    if isinstance(value, str):
        if len(value) <= _PIECE:
            return _escape(value)
        pieces = (_escape(value[i : i + _PIECE])[1:-1] for i in range(0, len(value), _PIECE))
        return '"' + "".join(pieces) + '"'
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        items = (_escape(k) + ":" + _dumps_in_pieces(v) for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dumps_in_pieces(v) for v in value) + "]"
    return _dumps(value)


class Spool:
    """One process's spool file: appended line by line with unbuffered writes, locked while open.

    Args:
        directory: Where spool files live (created 0700 if missing, tightened to 0700 if not).
        fsync: Also fsync every line (survives power loss, not only a killed process).
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self._fsync = fsync
        self._mutex = threading.Lock()
        self._torn = False
        """A failed write could not be cut back: the next write starts on a new line."""
        _private_directory(self.directory)
        self._fd: int | None
        self._fd, self.path, self._lock = self._open_new()
        self._size = 0
        self.bodies = BodyStore(self.directory, self.path.stem, _WriterLock, fsync=fsync)

    def _open_new(self) -> tuple[int, Path, _WriterLock]:
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time_ns() % 1_000_000_000:09d}"
        path = self.directory / f"{PREFIX}{os.getpid()}-{stamp}{SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _O_CLOEXEC
        # The lock tells a proxy starting later that this file's writer is alive, so the file
        # must never be seen unlocked (a replaying proxy would take it, find it empty and delete
        # it under the writer). A lock file is taken before the spool file exists; a flock is
        # taken on the file under a name replay does not read, which is then renamed.
        lock = _WriterLock(path)
        hidden = path if fcntl is None else path.with_name(f".{path.name}{_NEW}")
        try:
            if fcntl is None:
                lock.take(None)
            fd = os.open(hidden, flags, _FILE_MODE)
        except OSError as e:
            lock.release()
            raise SpoolError(f"cannot write the proxy spool in {self.directory}: {e}") from e
        try:
            if hasattr(os, "fchmod"):  # not on Windows, where the folder's ACL is what counts
                os.fchmod(fd, _FILE_MODE)  # whatever the umask
            if fcntl is not None:
                lock.take(fd)
                os.rename(hidden, path)
        except OSError as e:
            os.close(fd)
            lock.release()
            with contextlib.suppress(OSError):
                hidden.unlink()
            raise SpoolError(f"cannot lock the proxy spool {path}: {e}") from e
        return fd, path, lock

    def body_path(self, call_id: str) -> Path:
        """Where call `call_id`'s big request is written (`trajlake.proxy._bodies`).

        Raises:
            SpoolError: The body folder cannot be made.
        """
        try:
            return self.bodies.path(call_id)
        except OSError as e:
            raise SpoolError(f"cannot make the proxy's body folder in {self.directory}: {e}") from e

    @property
    def fsync(self) -> bool:
        """Whether every line (and body file) is fsynced."""
        return self._fsync

    @property
    def size(self) -> int:
        """Bytes in the current file."""
        return self._size

    def rotate(self, min_bytes: int, carry: Callable[[], list[dict[str, Any]] | None]) -> bool:
        """Continue in a new file holding only `carry()`'s events, and delete this one.

        Only once this file holds `min_bytes`; `carry()` returns the events still needed (every
        rollout not committed yet), or None when the file must stay. It is called under the
        spool's lock, so no event can be appended between the check and the switch; events that
        wait for the lock go to the new file.

        Raises:
            SpoolError: The new file cannot be written (the old one is kept).
        """
        with self._mutex:
            if self._fd is None or self._size < min_bytes:
                return False
            records = carry()
            if records is None:
                return False
            fd, path, lock = self._open_new()
            data = _encode(records)
            try:
                _write_all(fd, data)
                if data:
                    os.fsync(fd)  # the copy must be on disk before the original goes
            except OSError as e:
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
                lock.release()
                raise SpoolError(f"cannot write the proxy spool {path}: {e}") from e
            old_fd, old_path, old_lock = self._fd, self.path, self._lock
            self._fd, self.path, self._lock = fd, path, lock
            self._size, self._torn = len(data), False
            os.close(old_fd)
            with contextlib.suppress(FileNotFoundError):
                old_path.unlink()
            old_lock.release()
            return True

    def append(
        self, record: Mapping[str, Any], *, sync: bool = True, in_pieces: bool = False
    ) -> None:
        """Write one event and hand it to the OS before returning (see `append_many`)."""
        self.append_many([record], sync=sync, in_pieces=in_pieces)

    def append_many(
        self, records: Iterable[Mapping[str, Any]], *, sync: bool = True, in_pieces: bool = False
    ) -> None:
        """Write several events at once; with `fsync` (and `sync`), fsync them too.

        `in_pieces` encodes long strings a piece at a time (the same bytes, slower, but other
        threads run in between): for big records written off the event loop.

        Raises:
            SpoolError: They could not be written; the file is cut back to what it held before
                (or, if even that fails, the next write starts on a new line), so a failed
                write never leaves a line that replay would take for a record.
        """
        self.append_encoded(_encode(records, in_pieces=in_pieces), sync=sync)

    def append_encoded(self, data: bytes, *, sync: bool = True) -> None:
        """Write whole lines encoded already (by another process); as `append_many`."""
        with self._mutex:
            if self._fd is None:
                raise SpoolError(f"the spool {self.path} is closed")
            if self._torn:
                data = b"\n" + data
            try:
                _write_all(self._fd, data)
                if self._fsync and sync:
                    os.fsync(self._fd)
            except OSError as e:
                self._cut_back()
                raise SpoolError(f"cannot write the proxy spool {self.path}: {e}") from e
            self._size += len(data)
            self._torn = False

    def _cut_back(self) -> None:
        """Undo a failed write: truncate to the last whole line."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._torn = True

    def sync(self) -> None:
        """fsync what was written so far."""
        with self._mutex:
            if self._fd is not None:
                os.fsync(self._fd)

    def mark_committed(self, rollout_ids: Iterable[str]) -> None:
        """Record that these rollouts are in the lake: replay skips them."""
        self.append_many({"kind": "committed", "rollout_id": r} for r in rollout_ids)

    def close(self, *, remove: bool = False) -> None:
        """Close the file; `remove` deletes it and the body folder (nothing is still needed)."""
        with self._mutex:
            if self._fd is None:
                return
            os.close(self._fd)
            self._fd = None
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            self._lock.release()  # a file kept is now an orphan, for the next proxy to replay
            self.bodies.close(remove=remove)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _WriterLock:
    """The lock that says a spool file's writer is alive; the OS drops it when that process dies.

    `flock` on the file's own descriptor where there is `fcntl` (released when it is closed);
    elsewhere (Windows) a `filelock` on `<file>.lock`, released and removed by `release`. Never
    waits: a lock held elsewhere means a live writer.
    """

    def __init__(self, path: Path) -> None:
        self.side_path = path.with_name(path.name + LOCK_SUFFIX)
        self._side: Any = None

    def take(self, fd: int | None) -> None:
        """Take the lock (`fd`: the spool file's descriptor, used by flock only).

        Raises:
            OSError: Another process holds it (BlockingIOError) or it cannot be taken.
        """
        if fcntl is not None:
            assert fd is not None
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        import filelock

        side = filelock.FileLock(self.side_path, mode=_FILE_MODE, thread_local=False)
        try:
            side.acquire(timeout=0)
        except filelock.Timeout as e:
            raise BlockingIOError(f"{self.side_path} is held by a live writer") from e
        self._side = side

    def release(self) -> None:
        """Release a lock file taken (flock goes with the descriptor)."""
        if self._side is not None:
            self._side.release()
            self._side = None
            with contextlib.suppress(OSError):
                self.side_path.unlink()


def _orphans(
    directory: Path, current: Path | None
) -> Iterator[tuple[Path, IO[bytes], _WriterLock]]:
    """Spool files whose writer is gone, each opened and locked (skips live writers' files)."""
    for path in sorted(directory.glob(f"{PREFIX}*{SUFFIX}")):
        if path == current:
            continue
        lock = _WriterLock(path)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed by the caller)
        except FileNotFoundError:  # replayed and removed by another proxy meanwhile
            continue
        try:
            lock.take(f.fileno())
        except OSError:  # another live proxy owns it
            f.close()
            continue
        yield path, f, lock


def _discard(path: Path, f: IO[bytes]) -> None:
    """Delete a replayed file, under its lock. Windows deletes no open file: there the file is
    closed first (its lock file still keeps other proxies off)."""
    if fcntl is None:
        f.close()
    path.unlink()


def _events(path: Path, f: IO[bytes], bodies: BodyStore) -> Iterator[dict[str, Any]]:
    for n, line in enumerate(f, 1):
        if not line.endswith(b"\n"):  # a write cut short by a kill: it was never answered
            log.warning("%s:%d: ignoring a truncated last line", path, n)
            return
        if not line.strip():  # the line break that ends a failed write
            continue
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("%s:%d: ignoring a line that is not JSON", path, n)
            continue
        if isinstance(event, dict) and isinstance(event.get("rollout_id"), str):
            yield _with_bodies(event, bodies, f"{path}:{n}")


def _with_bodies(event: dict[str, Any], bodies: BodyStore, where: str) -> dict[str, Any]:
    """`event` with each value its line names a body file for (`<key>@file`) read lazily."""
    for key in [k for k in event if k.endswith(FILE_KEY)]:
        ref = event.pop(key)
        file = bodies.resolve(ref) if isinstance(ref, str) else None
        if file is None:
            log.warning("%s: ignoring %s=%r: not a body file of this spool", where, key, ref)
            continue
        event[key.removesuffix(FILE_KEY)] = SpooledJSON(file, ref, bool(event.get("stream")))
    return event


def _apply(rollouts: dict[str, ReplayedRollout], committed: set[str], e: dict[str, Any]) -> None:
    rid = e["rollout_id"]
    kind = e.get("kind")
    if kind == "committed":
        committed.add(rid)
        return
    rollout = rollouts.setdefault(rid, ReplayedRollout(rid))
    call_id = e.get("call_id")
    if kind == "request" and isinstance(call_id, str):
        rollout.requests[call_id] = e
    elif kind == "call" and isinstance(call_id, str):
        sent = rollout.requests.pop(call_id, None)  # spooled before its answer, always
        if "request" not in e and sent is not None:  # spooled before the call was forwarded
            e = {**e, "request": sent.get("request")}
        rollout.calls[call_id] = e
    elif kind == "outcome":
        rollout.outcome = e.get("outcome")
    elif kind == "finish":
        rollout.finished, rollout.status = True, e.get("status")
        rollout.closed = e.get("closed")
    elif kind == "batch" and isinstance(e.get("batch"), str):
        rollout.batch = e["batch"]


class Replay(NamedTuple):
    """What `replay` found: rollouts still to commit, and those the files say are committed."""

    pending: list[ReplayedRollout]
    committed: set[str]


def replay(spool: Spool) -> Replay:
    """Read every orphaned spool file into `spool`'s own file and delete the old files.

    Pending rollouts (not committed yet, finished or not, in first-seen order) have their
    events copied into `spool.path`, and their body files linked into `spool`'s body folder,
    so the old files and folders can go. Events seen twice (a replay interrupted between
    writing and deleting) count once: calls by id, commits by rollout id. A request whose
    answer was never spooled was never answered, and is dropped.
    """
    rollouts: dict[str, ReplayedRollout] = {}
    committed: set[str] = set()
    opened: list[tuple[Path, IO[bytes], _WriterLock]] = []
    with replay_lock(spool.directory):
        try:
            for path, f, lock in _orphans(spool.directory, spool.path):
                opened.append((path, f, lock))
                for event in _events(path, f, spool.bodies):
                    _apply(rollouts, committed, event)
            pending = [
                r
                for rid, r in rollouts.items()
                if rid not in committed and (r.calls or r.outcome is not None)
            ]
            for r in pending:
                _adopt_bodies(r, spool.bodies)
            spool.bodies.sync()
            spool.append_many(e for r in pending for e in r.records())
            if opened:
                spool.sync()  # the copy must be on disk before the originals go
            for path, f, _ in opened:
                _discard(path, f)
        finally:
            for _, f, lock in opened:
                f.close()
                lock.release()
        folders = spool.bodies.remove_orphans()
    if opened or folders:
        log.info(
            "replayed %d spool file(s) and %d body folder(s): %d rollout(s) pending",
            len(opened),
            folders,
            len(pending),
        )
    return Replay(pending, committed)


def _adopt_bodies(rollout: ReplayedRollout, bodies: BodyStore) -> None:
    """Link the rollout's body files into `bodies`; a call whose body is gone keeps no request
    (it was answered, so it stays, and reconstruction reports the request as unreadable)."""
    for call in rollout.calls.values():
        value = call.get("request")
        if not isinstance(value, SpooledJSON):
            continue
        try:
            adopted = bodies.adopt(value.file)
        except OSError as e:
            log.error(
                "rollout %s, call %s: its request body %s cannot be read (%s): the call is "
                "kept without its request",
                rollout.rollout_id,
                call.get("call_id"),
                value.file,
                e,
            )
            call["request"] = None
            continue
        call["request"] = SpooledJSON(adopted, bodies.ref(adopted), value.stream)
