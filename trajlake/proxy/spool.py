"""The proxy's write-ahead spool: every answered call, outcome and finish as a flushed JSON line.

A process writes `calls-<pid>-<start>.jsonl` under an exclusive lock; on start-up, files whose
writer is gone are replayed (`replay`) so a killed proxy loses nothing it had answered.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from trajlake.errors import TrajlakeError

__all__ = ["ReplayedRollout", "Spool", "SpoolError", "replay"]

log = logging.getLogger(__name__)

PREFIX = "calls-"
SUFFIX = ".jsonl"


class SpoolError(TrajlakeError):
    """The proxy's spool directory cannot be written (permissions, full disk)."""


@dataclass
class ReplayedRollout:
    """What the spool files say about one rollout that is not committed yet."""

    rollout_id: str
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)  # call_id → call record
    outcome: dict[str, Any] | None = None
    finished: bool = False
    status: str | None = None

    def records(self) -> list[dict[str, Any]]:
        """The events to write again so this rollout survives the old files' removal."""
        out: list[dict[str, Any]] = sorted(self.calls.values(), key=lambda c: c.get("seq", 0))
        if self.outcome is not None:
            out.append({"kind": "outcome", "rollout_id": self.rollout_id, "outcome": self.outcome})
        if self.finished:
            out.append({"kind": "finish", "rollout_id": self.rollout_id, "status": self.status})
        return out


class Spool:
    """One process's spool file: appended and flushed line by line, locked while open.

    Args:
        directory: Where spool files live (created if missing).
        fsync: Also fsync every line (survives power loss, not only a killed process).
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self._fsync = fsync
        self._file: IO[bytes] | None = None
        self._open_new()
        self._mutex = threading.Lock()

    def _open_new(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time_ns() % 1_000_000_000:09d}"
            self.path = self.directory / f"{PREFIX}{os.getpid()}-{stamp}{SUFFIX}"
            self._file = open(self.path, "ab")  # noqa: SIM115 (kept open)
            # The lock tells a proxy starting later that this file's writer is alive.
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise SpoolError(f"cannot write the proxy spool in {self.directory}: {e}") from e

    def rotate(self, min_bytes: int, unneeded: Callable[[], bool]) -> bool:
        """Continue in a new file and delete this one, once it holds `min_bytes` and
        `unneeded()` says nothing in it is still needed (every rollout in it committed).

        `unneeded` is asked under the spool's lock, so no event can be appended between the
        check and the switch; events that wait for the lock go to the new file.
        """
        with self._mutex:
            old, old_path = self._file, self.path
            if old is None or old.tell() < min_bytes or not unneeded():
                return False
            self._open_new()
            old.close()
            with contextlib.suppress(FileNotFoundError):
                old_path.unlink()
            return True

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one event and hand it to the OS before returning."""
        self.append_many([record])

    def append_many(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Write several events with one flush."""
        data = b"".join(
            json.dumps(r, ensure_ascii=False, separators=(",", ":"), default=str).encode() + b"\n"
            for r in records
        )
        with self._mutex:
            if self._file is None:
                raise SpoolError(f"the spool {self.path} is closed")
            try:
                self._file.write(data)
                self._file.flush()
                if self._fsync:
                    os.fsync(self._file.fileno())
            except OSError as e:
                raise SpoolError(f"cannot write the proxy spool {self.path}: {e}") from e

    def sync(self) -> None:
        """fsync what was written so far."""
        with self._mutex:
            if self._file is not None:
                os.fsync(self._file.fileno())

    def mark_committed(self, rollout_ids: Iterable[str]) -> None:
        """Record that these rollouts are in the lake: replay skips them."""
        self.append_many({"kind": "committed", "rollout_id": r} for r in rollout_ids)

    def close(self, *, remove: bool = False) -> None:
        """Close the file; `remove` deletes it (nothing in it is still needed)."""
        with self._mutex:
            if self._file is None:
                return
            self._file.close()
            self._file = None
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()


def _orphans(directory: Path, current: Path | None) -> Iterator[tuple[Path, IO[bytes]]]:
    """Spool files whose writer is gone, each opened and locked (skips live writers' files)."""
    for path in sorted(directory.glob(f"{PREFIX}*{SUFFIX}")):
        if path == current:
            continue
        f = open(path, "rb")  # noqa: SIM115 (closed by the caller)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another live proxy owns it
            f.close()
            continue
        yield path, f


def _events(path: Path, f: IO[bytes]) -> Iterator[dict[str, Any]]:
    for n, line in enumerate(f, 1):
        if not line.endswith(b"\n"):  # a write cut short by a kill: it was never answered
            log.warning("%s:%d: ignoring a truncated last line", path, n)
            return
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("%s:%d: ignoring a line that is not JSON", path, n)
            continue
        if isinstance(event, dict) and isinstance(event.get("rollout_id"), str):
            yield event


def _apply(rollouts: dict[str, ReplayedRollout], committed: set[str], e: dict[str, Any]) -> None:
    rid = e["rollout_id"]
    kind = e.get("kind")
    if kind == "committed":
        committed.add(rid)
        return
    rollout = rollouts.setdefault(rid, ReplayedRollout(rid))
    if kind == "call" and isinstance(e.get("call_id"), str):
        rollout.calls[e["call_id"]] = e
    elif kind == "outcome":
        rollout.outcome = e.get("outcome")
    elif kind == "finish":
        rollout.finished, rollout.status = True, e.get("status")


def replay(spool: Spool) -> list[ReplayedRollout]:
    """Read every orphaned spool file into `spool`'s own file and delete the old files.

    Returns the rollouts not committed yet (finished or not), in first-seen order; their events
    are now in `spool.path`, so the old files can go. Events seen twice (a replay interrupted
    between writing and deleting) count once: calls by id, commits by rollout id.
    """
    rollouts: dict[str, ReplayedRollout] = {}
    committed: set[str] = set()
    opened: list[tuple[Path, IO[bytes]]] = []
    try:
        for path, f in _orphans(spool.directory, spool.path):
            opened.append((path, f))
            for event in _events(path, f):
                _apply(rollouts, committed, event)
        pending = [r for rid, r in rollouts.items() if rid not in committed]
        spool.append_many(e for r in pending for e in r.records())
        if opened:
            spool.sync()  # the copy must be on disk before the originals go
        for path, _ in opened:
            path.unlink()
    finally:
        for _, f in opened:
            f.close()
    if opened:
        log.info("replayed %d spool file(s): %d rollout(s) pending", len(opened), len(pending))
    return pending
