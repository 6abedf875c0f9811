"""Request batching for the reranking server: queued candidates coalesced into `score()` calls.

One worker runs the model in one thread; bigger requests are split across batches. The `Scorer`
protocol, what a batch is scored with, is defined here (the server re-exports it), so that the
server imports this module and never the other way round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

# Records keep the server module's name, so a level set on that logger still applies to them.
logger = logging.getLogger("trajlake.serve.server")


class Scorer(Protocol):
    """What the server needs from a value model (a `trajlake.serve.Reranker` fits)."""

    model_id: str

    def score(self, candidates: Sequence[Any]) -> list[float]:
        """Score candidates (blocking); one float per candidate, higher is better."""
        ...

    def info(self) -> dict[str, Any]:
        """Describe the model as a JSON-able dict."""
        ...


class _ScoringFailed(Exception):
    """A batch failed; carries the HTTP answer for every request in it."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass(eq=False)
class _Job:
    candidates: Sequence[Any]
    future: asyncio.Future[list[float]]
    enqueued: float
    scores: list[float] = field(default_factory=list)
    taken: int = 0  # candidates already handed to a batch

    @property
    def remaining(self) -> int:
        return len(self.candidates) - self.taken


_Batch = list[tuple[_Job, int, int]]  # (job, start, end) slices, in queue order


@dataclass(frozen=True)
class _Options:
    max_batch_candidates: int = 32
    max_wait_ms: float = 5.0
    max_candidates_per_request: int = 256
    max_body_bytes: int = 64 * 1024 * 1024
    token: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch_candidates", "max_candidates_per_request", "max_body_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < math.inf:
            raise ValueError(f"max_wait_ms must be a finite number >= 0, got {wait!r}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise ValueError("token must be a non-empty string or None")


@dataclass
class _Stats:
    requests: int = 0
    candidates: int = 0
    batches: int = 0
    scored: int = 0
    failed_batches: int = 0


class _Batcher:
    """Queue plus the single worker that coalesces queued candidates into score() calls."""

    def __init__(self, scorer: Scorer, options: _Options, stats: _Stats) -> None:
        self._scorer, self._stats = scorer, stats
        self._max_batch, self._max_wait = options.max_batch_candidates, options.max_wait_ms / 1e3
        self._queue: deque[_Job] = deque()
        self._arrived = asyncio.Event()
        self._inflight: _Batch = []
        # One thread: the model is never called concurrently (torch modules are not re-entrant).
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajlake-score")
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def score(self, candidates: Sequence[Any]) -> list[float]:
        loop = asyncio.get_running_loop()
        job = _Job(candidates, loop.create_future(), loop.time())
        self._queue.append(job)
        self._arrived.set()
        return await job.future

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        gone = _ScoringFailed(503, "unavailable", "the server is shutting down")
        for job in [*self._queue, *(job for job, _, _ in self._inflight)]:
            if not job.future.done():
                job.future.set_exception(gone)
        self._queue.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        while True:
            await self._collect()
            batch = self._take()
            if batch:
                self._inflight = batch
                try:
                    await self._score_batch(batch)
                finally:
                    self._inflight = []

    def _pending(self) -> int:
        return sum(job.remaining for job in self._queue if not job.future.done())

    async def _collect(self) -> None:
        """Wait for work, then until a full batch is pending or max_wait passed since the first."""
        loop = asyncio.get_running_loop()
        while not self._pending():
            self._arrived.clear()
            await self._arrived.wait()
        deadline = next(j for j in self._queue if not j.future.done()).enqueued + self._max_wait
        while self._pending() < self._max_batch:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                return

    def _take(self) -> _Batch:
        batch: _Batch = []
        room = self._max_batch
        while self._queue and room > 0:
            job = self._queue[0]
            if job.future.done():  # the client went away, or an earlier slice failed
                self._queue.popleft()
                continue
            n = min(room, job.remaining)
            batch.append((job, job.taken, job.taken + n))
            job.taken += n
            room -= n
            if not job.remaining:
                self._queue.popleft()
        return batch

    async def _score_batch(self, batch: _Batch) -> None:
        try:
            self._deliver(batch, await self._call(batch))
        except _ScoringFailed as exc:
            if exc.status != 400 or len(batch) == 1:
                _fail(batch, exc)
                return
            # One bad candidate must not fail the requests it happened to share a batch with.
            for part in batch:
                try:
                    self._deliver([part], await self._call([part]))
                except _ScoringFailed as part_exc:
                    _fail([part], part_exc)

    async def _call(self, batch: _Batch) -> list[float]:
        candidates = [c for job, start, end in batch for c in job.candidates[start:end]]
        loop = asyncio.get_running_loop()
        self._stats.batches += 1
        self._stats.scored += len(candidates)
        try:
            raw = await loop.run_in_executor(self._executor, self._scorer.score, candidates)
        except (ValueError, TypeError) as exc:
            self._stats.failed_batches += 1
            raise _ScoringFailed(400, "invalid_candidate", str(exc) or type(exc).__name__) from exc
        except Exception as exc:
            self._stats.failed_batches += 1
            logger.exception("scorer failed on a batch of %d candidates", len(candidates))
            raise _ScoringFailed(500, "internal_error", "the scorer failed; see the log") from exc
        try:
            scores = [float(s) for s in raw]
        except (TypeError, ValueError):
            scores = []
        if len(scores) != len(candidates) or not all(map(math.isfinite, scores)):
            self._stats.failed_batches += 1
            logger.error("scorer returned no %d finite scores: %.200r", len(candidates), raw)
            raise _ScoringFailed(500, "internal_error", "the scorer returned invalid scores")
        return scores

    @staticmethod
    def _deliver(batch: _Batch, scores: list[float]) -> None:
        offset = 0
        for job, start, end in batch:
            job.scores.extend(scores[offset : offset + end - start])
            offset += end - start
            if len(job.scores) == len(job.candidates) and not job.future.done():
                job.future.set_result(job.scores)


def _fail(batch: _Batch, exc: _ScoringFailed) -> None:
    for job, _, _ in batch:
        if not job.future.done():
            job.future.set_exception(exc)
