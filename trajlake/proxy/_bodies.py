"""Big request bodies spooled beside the spool file, one file each.

Every call appends its events to one spool file under one lock. Writing a 16 MiB request
line into it takes tens of milliseconds (≈ 44 ms measured here, page cache only), and every
ordinary call that needs the spool meanwhile waits, and with it the event loop. So a request
recorded by the recording process is written there, to a file of its own, and the spool gets
a short line that names it (`request@file`, relative to the spool folder). Rotating the spool
carries that short line, never the body.

Layout: `<spool>/bodies/<writer>/<call_id>.json` (0700 folders, 0600 files). A writer's folder
holds `.owner`, locked by the live proxy like its spool file (`flock`, or `filelock` where
there is no `fcntl`), so a folder whose owner is gone is known for an orphan. A body is
deleted once its rollout is in the lake. Replay hard-links the bodies of the rollouts it
carries into its own folder (the old spool files still name the old paths until they go),
then deletes the folders of dead writers. Folders are made and orphans removed under one
lock per spool folder (`.replay.lock`), so a proxy starting never sees another's folder
before its owner holds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["BODIES", "BodyStore", "replay_lock", "write_body"]

log = logging.getLogger(__name__)

BODIES = "bodies"
"""The folder, inside the spool folder, of the writers' body folders."""
_OWNER = ".owner"
_DIR_MODE, _FILE_MODE = 0o700, 0o600
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _Lock(Protocol):
    """The spool's writer lock (`trajlake.proxy.spool._WriterLock`)."""

    def take(self, fd: int | None) -> None: ...

    def release(self) -> None: ...


LockFactory = Callable[[Path], _Lock]


def replay_lock(directory: Path) -> Any:
    """The lock under which body folders are made and orphaned ones replayed and removed."""
    import filelock

    return filelock.FileLock(directory / ".replay.lock", mode=_FILE_MODE, thread_local=False)


def write_body(path: Path, data: bytes, *, fsync: bool) -> None:
    """Write a body file (a new file, 0600); with `fsync`, make it durable before returning.

    Raises:
        OSError: It cannot be written (the partial file is removed).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, _FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    os.close(fd)


class BodyStore:
    """One writer's body folder, held (its `.owner` locked) from creation until `close`.

    Args:
        spool_dir: The spool folder.
        writer: The folder's name (unique per proxy process: its first spool file's stem).
        lock: Makes the writer lock of a path (the spool's own kind).
        fsync: Also fsync adopted bodies' folder (as the spool fsyncs its lines).
    """

    def __init__(self, spool_dir: Path, writer: str, lock: LockFactory, *, fsync: bool) -> None:
        self.spool_dir = spool_dir
        self.root = spool_dir / BODIES / writer
        self._lock_factory, self._fsync = lock, fsync
        self._owner_fd: int | None = None
        self._owner: _Lock | None = None
        self._making = threading.Lock()

    def path(self, call_id: str) -> Path:
        """Where the body of call `call_id` goes (the folder is made on first use).

        Raises:
            OSError: The folder cannot be made.
        """
        self._ensure(replay_locked=False)
        return self.root / f"{call_id}.json"

    def _ensure(self, *, replay_locked: bool) -> None:
        """Make and hold the folder, under the replay lock (taken unless `replay_locked`)."""
        if self._owner_fd is not None:
            return
        held = contextlib.nullcontext() if replay_locked else replay_lock(self.spool_dir)
        with self._making, held:
            if self._owner_fd is None:
                (self.spool_dir / BODIES).mkdir(mode=_DIR_MODE, exist_ok=True)
                self.root.mkdir(mode=_DIR_MODE, exist_ok=True)
                self._owner_fd, self._owner = _hold(self.root / _OWNER, self._lock_factory)

    def ref(self, path: Path) -> str:
        """`path` as the spool names it: relative to the spool folder, with `/`."""
        return path.relative_to(self.spool_dir).as_posix()

    def resolve(self, ref: str) -> Path | None:
        """The body file a spool line names (None: not a body path of this spool)."""
        parts = ref.split("/")
        if len(parts) != 3 or parts[0] != BODIES or any(p in ("", ".", "..") for p in parts):
            return None
        return self.spool_dir.joinpath(*parts)

    def adopt(self, source: Path) -> Path:
        """A body of a dead writer, linked (copied where links fail) into this folder; called
        under `replay_lock`.

        Raises:
            OSError: It cannot be read or linked.
        """
        if source.parent == self.root:
            return source
        self._ensure(replay_locked=True)
        target = self.root / source.name
        with contextlib.suppress(FileNotFoundError):
            target.unlink()  # adopted before by a replay that did not finish
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
            os.chmod(target, _FILE_MODE)
        return target

    def sync(self) -> None:
        """With `fsync`: make the links adopted so far durable."""
        if self._fsync and self._owner_fd is not None and hasattr(os, "O_DIRECTORY"):
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def discard(self, paths: Iterable[Path]) -> None:
        """Delete bodies no longer needed (their rollouts are in the lake)."""
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def remove_orphans(self) -> int:
        """Delete the body folders of writers that are gone; returns how many. Called under
        `replay_lock` (as folders are made), so no folder is seen before its owner holds it."""
        removed, parent = 0, self.spool_dir / BODIES
        for folder in sorted(parent.iterdir()) if parent.is_dir() else ():
            if folder == self.root or not folder.is_dir():
                continue
            try:
                fd, lock = _hold(folder / _OWNER, self._lock_factory)
            except OSError:  # its writer is alive
                continue
            os.close(fd)  # let go first: Windows deletes no open file
            lock.release()
            try:
                shutil.rmtree(folder)
                removed += 1
            except OSError as e:
                log.warning("cannot remove the orphaned body folder %s: %s", folder, e)
        return removed

    def close(self, *, remove: bool) -> None:
        """Let the folder go; `remove` deletes it (nothing in it is needed any more)."""
        if self._owner_fd is None:
            return
        os.close(self._owner_fd)
        assert self._owner is not None
        self._owner.release()
        self._owner_fd = None
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)
            with contextlib.suppress(OSError):
                self.root.parent.rmdir()  # only if no other writer has a folder there


def _hold(marker: Path, factory: LockFactory) -> tuple[int, _Lock]:
    """Open (creating) and lock a folder's owner marker; raises `OSError` if it is held."""
    lock = factory(marker)
    fd = os.open(marker, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, _FILE_MODE)
    try:
        lock.take(fd)
    except OSError:
        os.close(fd)
        raise
    return fd, lock
