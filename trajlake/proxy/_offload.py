"""Recording work taken off the proxy's event loop: one worker thread, results applied on the loop.

`Offload.run` runs a piece of recording work (redact, encode, spool) inline when it is small and
its rollout has nothing queued, else on the single worker thread, whose work runs in submission
order. What the work returns is applied to the recorder's state by a task on the loop, so the
state is only ever changed there, also when the caller was cancelled meanwhile (the record may
already be in the spool).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["Offload", "Queue"]

_T = TypeVar("_T")
Queue = list["asyncio.Future[Any]"]
"""One rollout's work on the worker, not applied yet (oldest first)."""


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a worker task's error as seen: its caller may have been cancelled meanwhile."""
    if not task.cancelled():
        task.exception()


class Offload:
    """The recorder's worker thread and the count of its work not applied yet.

    Args:
        offload_bytes: Work for calls at least this large (bytes) goes to the worker.
    """

    def __init__(self, offload_bytes: int) -> None:
        if offload_bytes < 0:
            raise ValueError("offload_bytes must be >= 0")
        self.offload_bytes = offload_bytes
        # One thread: its work runs in submission order, so each rollout's lines keep theirs.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajlake-record")
        self.pending = 0
        """Work submitted and not applied yet (the spool must not be rewritten meanwhile)."""

    async def run(
        self,
        queue: Queue,
        size: int,
        work: Callable[[], _T],
        applied: Callable[[_T], None],
        failed: Callable[[], None] | None = None,
    ) -> _T:
        """`work()`, then `applied(result)` on the loop (`failed()` if it raised).

        Inline when `size` is under `offload_bytes` and `queue` (the rollout's work) is empty;
        otherwise on the worker, queued behind the rollout's earlier work.
        """
        if size < self.offload_bytes and not queue:
            try:
                result = work()
            except Exception:  # SpoolError, or a body the redactor cannot take
                if failed is not None:
                    failed()
                raise
            applied(result)
            return result
        # Submitted now, not when a task first runs: the worker's order is the call order.
        future = asyncio.get_running_loop().run_in_executor(self._worker, work)
        task = asyncio.ensure_future(self._apply_when_done(queue, future, applied, failed))
        queue.append(task)
        self.pending += 1
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _apply_when_done(
        self,
        queue: Queue,
        future: asyncio.Future[_T],
        applied: Callable[[_T], None],
        failed: Callable[[], None] | None,
    ) -> _T:
        try:
            try:
                result = await future
            except Exception:
                if failed is not None:
                    failed()
                raise
            applied(result)
            return result
        finally:
            with contextlib.suppress(ValueError):
                queue.remove(asyncio.current_task())  # type: ignore[arg-type]
            self.pending -= 1

    @staticmethod
    async def settled(queue: Queue) -> None:
        """Wait until the work in `queue` is done and applied."""
        while queue:
            await asyncio.wait(list(queue))

    def close(self) -> None:
        """Wait for the work running or queued on the worker (a record being written), then stop."""
        self._worker.shutdown(wait=True)
