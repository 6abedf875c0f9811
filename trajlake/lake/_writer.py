"""A buffered writer: a rollout producer pushes trajectories one at a time; they are
committed in batches when the buffer reaches a count or has waited long enough."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from trajlake.lake._log import Snapshot
from trajlake.schema import CanonicalTrajectory

if TYPE_CHECKING:
    from trajlake.lake._commit import CommitResult
    from trajlake.lake._store import LakeStore

log = logging.getLogger(__name__)


class BufferedWriter:
    """Batches trajectories into commits by count (`max_trajectories`) or age (`max_seconds`).

    Thread-safe. Use as a context manager, or call `close()`: the last partial batch is
    committed on close. An error in a background (time-triggered) commit is re-raised on the
    next `add`, `flush` or `close`, and the batch stays buffered so nothing is dropped.
    """

    def __init__(
        self, lake: LakeStore, *, max_trajectories: int = 256, max_seconds: float = 5.0
    ) -> None:
        if max_trajectories < 1:
            raise ValueError("max_trajectories must be ≥ 1")
        if max_seconds <= 0:
            raise ValueError("max_seconds must be > 0")
        self._lake = lake
        self._max_count = max_trajectories
        self._max_seconds = max_seconds
        self._buffer: list[CanonicalTrajectory] = []
        self._mutex = threading.RLock()
        self._timer: threading.Timer | None = None
        self._error: BaseException | None = None
        self._closed = False
        self.results: list[CommitResult] = []

    def add(self, trajectory: CanonicalTrajectory | Mapping[str, Any]) -> None:
        """Buffer one trajectory (validated now, so a bad record fails at its producer)."""
        record = (
            trajectory
            if isinstance(trajectory, CanonicalTrajectory)
            else CanonicalTrajectory.model_validate(trajectory)
        )
        with self._mutex:
            self._raise_pending()
            if self._closed:
                raise ValueError("the writer is closed")
            self._buffer.append(record)
            if len(self._buffer) >= self._max_count:
                self._commit_buffer()
            elif self._timer is None:
                self._timer = threading.Timer(self._max_seconds, self._on_timer)
                self._timer.daemon = True
                self._timer.start()

    def _on_timer(self) -> None:
        with self._mutex:
            self._timer = None
            try:
                self._commit_buffer()
            except BaseException as e:  # surfaced to the producer on its next call
                log.error("buffered commit failed: %s", e)
                self._error = e

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _commit_buffer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return
        batch = list(self._buffer)
        result = self._lake.write(batch, operation="buffered-write")
        # Cleared only after the commit succeeded: a failed batch is retried by the next flush.
        del self._buffer[: len(batch)]
        self.results.append(result)

    @property
    def pending(self) -> int:
        """Trajectories buffered and not yet committed."""
        return len(self._buffer)

    @property
    def snapshots(self) -> list[Snapshot]:
        """Snapshots created by this writer's commits."""
        return [r.snapshot for r in self.results]

    def flush(self) -> None:
        """Commit whatever is buffered now."""
        with self._mutex:
            self._raise_pending()
            self._commit_buffer()

    def close(self) -> None:
        """Commit the last batch and stop accepting trajectories."""
        with self._mutex:
            if self._closed:
                return
            try:
                self.flush()
            finally:
                self._closed = True

    def __enter__(self) -> BufferedWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
