"""Rollout state of the recording proxy: calls, outcomes and finishes, spooled, then committed.

The event loop keeps the state; a background thread (`_committer`) reconstructs finished
rollouts, redacts them and commits them in one snapshot per batch. A call is answered only once
its record is spooled: `begin_call` spools the request before it is forwarded and `end_call` the
answer before its last byte is sent, and both raise `SpoolError` when they cannot. `tick` (run by
the server every few seconds) closes idle rollouts and rewrites the spool without what is
committed. A call's two lines themselves are built, redacted and appended by `_call_records`.

Big calls (`offload_bytes`, 64 KiB) are recorded off the event loop (`begin_call_async`,
`end_call_async`, through `_offload`): redacting, encoding and writing one 16 MiB request took
the loop a third of a second. One dedicated worker thread does that work in submission order;
the loop applies its result to the state, which is only ever changed on the loop. While a
rollout has work on the worker, all its later events go there too (small ones included), so its
spool lines keep their order and its redactor is used by one thread at a time; `settled` waits
for that work (outcome and finish wait for it), and `tick` does not rewrite the spool while any
work is pending (its event would not be in the state yet). The worker shares the GIL: single
long C calls (one regex scan or one `json.loads` of a huge text) still hold the loop for their
duration (≈ 40 ms for 16 MiB). So requests of `process_bytes` (1 MiB) and more are not even
parsed here: their decoded bytes go to the recording process (`_process`), which parses, redacts
and writes them to a body file beside the spool (`_bodies`; the worker thread waits for it, then
spools the short line naming the file), and such a rollout is reconstructed there too when it is
committed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trajlake.proxy._call_records import spool_answer, spool_in_process, spool_request
from trajlake.proxy._committer import (
    IDLE_CLOSED,
    Committer,
    FinishedRollout,
    build_rollout,
    committed_in_lake,
)
from trajlake.proxy._offload import Offload
from trajlake.proxy._process import RecordingProcess
from trajlake.proxy._rollout import Answer, CallTicket, Rollout, restored
from trajlake.proxy.spool import (
    ReplayedRollout,
    Spool,
    SpooledJSON,
    SpoolError,
    finish_event,
    replay,
)
from trajlake.redact import AllowList, Redactor

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

__all__ = ["IDLE_CLOSED", "CallTicket", "FinishedRollout", "Recorder", "build_rollout"]

log = logging.getLogger(__name__)

META_KEYS = ("task_id", "generation", "run_id", "harness")
DEFAULT_IDLE_CLOSE_S = 1800.0
"""An open rollout with no call for this long is closed and committed (status `error`)."""
DEFAULT_OFFLOAD_BYTES = 64 * 1024
"""Calls with bodies at least this large are recorded on the worker thread (a smaller call's
redaction and write take less than the hop to the worker and back)."""
DEFAULT_PROCESS_BYTES = 1 << 20
"""Requests at least this large are parsed, redacted and encoded in the recording process."""
_UNSET: Any = object()


class Recorder:
    """Keeps open rollouts in memory and the spool; commits finished ones in batches.

    Methods other than `flush`/`close` are meant for one thread (the server's event loop).

    Args:
        lake: The lake to commit into.
        spool_dir: Directory of the write-ahead spool (replayed by `start`; 0700, files 0600).
        batch_size: Most rollouts per commit.
        max_seconds: How long a finished rollout waits for others to share its commit.
        fsync: fsync every spooled call (power-loss safe; a killed process loses nothing
            either way).
        run_id: Names the rollouts of calls that carry no rollout id.
        rotate_bytes: Once the spool file is this large (and twice what it held after its last
            rewrite), `tick` rewrites it with only what is not committed yet. A spool whose
            every rollout is committed starts over after each commit, whatever its size.
        redact_personal: Also replace personal data (e-mail addresses, phone numbers).
        allow_list: Values never redacted.
        idle_close_s: An open rollout without a call for this long is finished by `tick` with
            status `error`, `exit_reason` `idle_closed` and `attrs.proxy.closed` saying why
            (None or 0: never).
        offload_bytes: Calls with bodies this large (bytes) are recorded on the worker thread
            by `begin_call_async`/`end_call_async` (default 64 KiB).
        process_bytes: Requests this large (decoded bytes) are parsed, redacted and encoded
            in a separate process by `begin_big_call_async` (default 1 MiB; None: never).

    Requests, responses, errors and outcomes are redacted before they are spooled, so the
    spool holds no secret in clear either (placeholders numbered per rollout, as in the lake).
    Rollouts already in the lake (proxy trajectories) count as finished: calls for them are
    refused, also after a restart.
    """

    def __init__(
        self,
        lake: LakeStore,
        spool_dir: str | os.PathLike[str],
        *,
        batch_size: int = 64,
        max_seconds: float = 1.0,
        fsync: bool = False,
        run_id: str | None = None,
        rotate_bytes: int = 64 * 2**20,
        redact_personal: bool = False,
        allow_list: AllowList | None = None,
        idle_close_s: float | None = DEFAULT_IDLE_CLOSE_S,
        offload_bytes: int = DEFAULT_OFFLOAD_BYTES,
        process_bytes: int | None = DEFAULT_PROCESS_BYTES,
    ) -> None:
        if batch_size < 1 or max_seconds <= 0:
            raise ValueError("batch_size must be >= 1 and max_seconds > 0")
        if idle_close_s is not None and idle_close_s < 0:
            raise ValueError("idle_close_s must be >= 0 (0 or None: never close idle rollouts)")
        if process_bytes is not None and process_bytes < 0:
            raise ValueError("process_bytes must be >= 0 (None: record every call here)")
        self._offload = Offload(offload_bytes)
        self.process_bytes = process_bytes
        # Strings this long can only come in requests that big: they stay in its cache.
        self._process = RecordingProcess(max(process_bytes or 0, 1))
        self.lake = lake
        self._redact_personal, self._allow_list = redact_personal, allow_list
        self.idle_close_s = idle_close_s or None
        self.spool = Spool(spool_dir, fsync=fsync)
        self._rotate_bytes, self._rewritten_bytes = rotate_bytes, 0
        self._committer = Committer(
            lake,
            self.spool,
            batch_size,
            max_seconds,
            after_commit=self._maybe_rotate,
            build=self._process.build,
        )
        self._rollouts: dict[str, Rollout] = {}
        self._closed: set[str] = set()
        """Spent rollout ids: finished here, replayed finished, or committed to the lake."""
        self._auto = itertools.count(1)
        stem = self.spool.path.stem.removeprefix("calls-")
        self._auto_prefix = f"auto-{run_id or 'proxy'}-{stem}"
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> int:
        """Replay orphaned spool files, load the finished ids, start committing; returns
        rollouts restored."""
        if self._started:
            return 0
        found = replay(self.spool)
        self._closed |= found.committed | committed_in_lake(self.lake)
        for r in found.pending:
            self._restore(r)
        self._committer.start()
        self._started = True
        return len(found.pending)

    def _restore(self, r: ReplayedRollout) -> None:
        state = restored(r, self._redactor())
        if r.finished:
            self._closed.add(r.rollout_id)
            self._committer.submit(self._finished(state, r.status, r.closed))
        else:
            self._rollouts[r.rollout_id] = state

    def _nothing_pending(self) -> bool:
        stats = self._committer.stats()
        idle = not self._rollouts and not self._offload.pending
        return idle and self._committer.empty() and not stats["failed_rollouts"]

    def _maybe_rotate(self) -> None:
        """After a commit: a spool whose every rollout is in the lake starts over."""
        with contextlib.suppress(SpoolError):
            if self.spool.rotate(1, lambda: [] if self._nothing_pending() else None):
                self._rewritten_bytes = 0

    def _live_records(self) -> list[dict[str, Any]]:
        """Every spool event still needed: open rollouts and finished ones not committed."""
        out = [e for state in self._rollouts.values() for e in state.records()]
        out += [e for item in self._committer.pending() for e in item.records()]
        return out

    def tick(self) -> None:
        """Close idle rollouts, then rewrite a large spool without what is committed."""
        self._close_idle()
        if self._offload.pending:  # an event being spooled there is not in the state yet: later
            return
        threshold = max(self._rotate_bytes, 2 * self._rewritten_bytes)
        try:
            if self.spool.rotate(threshold, self._live_records):
                self._rewritten_bytes = self.spool.size
                log.info("spool rewritten: %d byte(s) still needed", self.spool.size)
        except SpoolError as e:
            log.error("%s", e)

    def _close_idle(self) -> None:
        if self.idle_close_s is None:
            return
        now = time.time()
        for rid, state in list(self._rollouts.items()):
            if state.inflight or state.queued or now - state.last_active < self.idle_close_s:
                continue
            if not state.calls:  # an outcome without calls: nothing to commit
                log.warning("dropped idle rollout %r: it has an outcome but no calls", rid)
                del self._rollouts[rid]
                continue
            reason = f"no call for {self.idle_close_s:g} s: closed by the proxy"
            try:
                self.finish(rid, "error", closed=reason)
            except SpoolError as e:
                log.error("cannot close idle rollout %r: %s", rid, e)
                continue
            log.warning("closed idle rollout %r (%s)", rid, reason)

    @property
    def tick_seconds(self) -> float:
        """How often the server should call `tick`."""
        idle = self.idle_close_s
        return 5.0 if idle is None else min(5.0, max(0.05, idle / 4))

    def flush(self, timeout: float | None = None) -> bool:
        """Commit every finished rollout now; False when the timeout ran out first."""
        return self._committer.flush(timeout)

    def close(self, timeout: float | None = 60.0) -> None:
        """Commit what is finished and stop; unfinished rollouts stay in the spool."""
        self._offload.close()  # a record being written finishes first
        self._committer.close(timeout)
        self._process.close()
        self.spool.close(remove=self._nothing_pending())

    @property
    def stats(self) -> dict[str, Any]:
        """Open rollouts, in-flight calls and the committer's counters."""
        return {
            "open_rollouts": len(self._rollouts),
            "inflight_calls": sum(r.inflight for r in self._rollouts.values()),
            "spool_bytes": self.spool.size,
            **self._committer.stats(),
        }

    @property
    def recording_pid(self) -> int | None:
        """Process id of the process recording big requests (None until the first one)."""
        return self._process.pid

    def _redactor(self) -> Redactor:
        return Redactor(personal=self._redact_personal, allow=self._allow_list)

    def _state(self, rollout_id: str) -> Rollout:
        state = self._rollouts.get(rollout_id)
        if state is None:
            state = self._rollouts[rollout_id] = Rollout(rollout_id, self._redactor())
        return state

    # ------------------------------------------------------------------ calls

    def auto_rollout_id(self) -> str:
        """A fresh rollout id for a call that named none (unique across restarts)."""
        return f"{self._auto_prefix}-{next(self._auto)}"

    def is_finished(self, rollout_id: str) -> bool:
        """The rollout was finished (here, before a restart, or by the idle close): a new call
        must use a new rollout id (its committed trajectory would not change, and the calls
        would belong to no trajectory)."""
        return rollout_id in self._closed

    def begin_call(
        self,
        rollout_id: str,
        meta: Mapping[str, Any],
        *,
        request: Any = _UNSET,
        dialect: str = "",
        endpoint: str = "",
        stream: bool = False,
    ) -> CallTicket:
        """Register a call arriving for `rollout_id`; tags in `meta` fill the rollout's gaps.

        With `request`, it is spooled now, before the call is forwarded. (The server uses
        `begin_call_async`; the two are not meant to be mixed for one rollout.)

        Raises:
            SpoolError: The request cannot be spooled: refuse the call (nothing is kept).
        """
        state, ticket, fresh = self._open_call(rollout_id, meta, request is not _UNSET)
        if ticket.request_spooled:
            try:
                event = spool_request(self.spool, state, ticket, request, dialect, endpoint, stream)
            except SpoolError:
                self._not_opened(state, ticket, fresh)
                raise
            state.sent[ticket.call_id] = event
        return ticket

    async def begin_call_async(
        self,
        rollout_id: str,
        meta: Mapping[str, Any],
        *,
        request: Any,
        dialect: str,
        endpoint: str,
        stream: bool,
        size: int,
    ) -> CallTicket:
        """`begin_call` with the request, spooled on the worker thread when the call is big
        (`size`: its body's bytes) or its rollout has work there; returns once it is spooled.

        Raises:
            SpoolError: The request cannot be spooled: refuse the call (nothing is kept).
        """
        state, ticket, fresh = self._open_call(rollout_id, meta, True)

        big = size >= self._offload.offload_bytes

        def work() -> dict[str, Any]:
            return spool_request(self.spool, state, ticket, request, dialect, endpoint, stream, big)

        def applied(event: dict[str, Any]) -> None:
            state.sent[ticket.call_id] = event

        await self._offload.run(
            state.queued, size, work, applied, lambda: self._not_opened(state, ticket, fresh)
        )
        return ticket

    def in_process(self, size: int) -> bool:
        """Whether a request body of `size` bytes is recorded by `begin_big_call_async`."""
        return self.process_bytes is not None and size >= self.process_bytes

    async def begin_big_call_async(
        self, rollout_id: str, meta: Mapping[str, Any], *, body: bytes, dialect: str, endpoint: str
    ) -> tuple[CallTicket, SpooledJSON]:
        """`begin_call_async` for a request given as its decoded bytes (`in_process` sizes):
        parsed, redacted and encoded in the recording process, spooled from the worker thread.

        Returns the ticket and the recorded (redacted) request, which says whether it streams.

        Raises:
            SpoolError: The request cannot be spooled, or the recording process died: refuse
                the call (nothing is kept; the next call starts a new process).
        """
        state, ticket, fresh = self._open_call(rollout_id, meta, True)

        def work() -> dict[str, Any]:
            return spool_in_process(
                self.spool, self._process, state, ticket, body, dialect, endpoint
            )

        def applied(event: dict[str, Any]) -> None:
            state.sent[ticket.call_id] = event

        event = await self._offload.run(
            state.queued, len(body), work, applied, lambda: self._not_opened(state, ticket, fresh)
        )
        return ticket, event["request"]

    def _open_call(
        self, rollout_id: str, meta: Mapping[str, Any], spooled: bool
    ) -> tuple[Rollout, CallTicket, bool]:
        """The call's ticket and place in its rollout (counted in flight from now on)."""
        fresh = rollout_id not in self._rollouts
        state = self._state(rollout_id)
        for key in META_KEYS:
            if state.meta.get(key) is None and meta.get(key) is not None:
                state.meta[key] = meta[key]
        now = dt.datetime.now(dt.UTC)
        ticket = CallTicket(
            uuid.uuid4().hex, rollout_id, state.next_seq, now, time.perf_counter(), spooled
        )
        state.next_seq += 1
        state.inflight += 1
        state.last_active = time.time()
        return state, ticket, fresh

    def _not_opened(self, state: Rollout, ticket: CallTicket, fresh: bool) -> None:
        """Undo `_open_call` for a call whose request could not be spooled."""
        state.inflight = max(0, state.inflight - 1)
        if state.next_seq == ticket.seq + 1:
            state.next_seq = ticket.seq
        idle = not state.calls and state.outcome is None and not state.inflight
        if fresh and idle and self._rollouts.get(ticket.rollout_id) is state:
            del self._rollouts[ticket.rollout_id]

    def end_call(
        self,
        ticket: CallTicket,
        *,
        dialect: str,
        endpoint: str,
        stream: bool,
        request: Any,
        response: Any,
        status_code: int | None,
        error: str | None,
    ) -> None:
        """Spool and keep a completed (or failed) call; call before its last byte is sent.

        Raises:
            SpoolError: The record cannot be spooled: the call must fail (a 5xx, or a stream
                cut before its end). It is kept in memory as a failed call without response.
        """
        answer = Answer(dialect, endpoint, stream, request, response, status_code, error)
        state, sent, latency_ms = self._close_call(ticket)
        kept, failure = spool_answer(self.spool, state, ticket, sent, latency_ms, answer)
        state.calls.append(kept)
        if failure is not None:
            raise failure

    async def end_call_async(
        self,
        ticket: CallTicket,
        *,
        dialect: str,
        endpoint: str,
        stream: bool,
        request: Any,
        response: Any,
        status_code: int | None,
        error: str | None,
        size: int,
    ) -> None:
        """`end_call`, recorded on the worker thread when the call is big (`size`: its bodies'
        bytes) or its rollout has work there; returns once the record is spooled.

        Raises:
            SpoolError: As for `end_call`.
        """
        answer = Answer(dialect, endpoint, stream, request, response, status_code, error)
        state, sent, latency_ms = self._close_call(ticket)

        big = size >= self._offload.offload_bytes

        def work() -> tuple[dict[str, Any], SpoolError | None]:
            return spool_answer(self.spool, state, ticket, sent, latency_ms, answer, big)

        def applied(result: tuple[dict[str, Any], SpoolError | None]) -> None:
            state.calls.append(result[0])

        _, failure = await self._offload.run(state.queued, size, work, applied)
        if failure is not None:
            raise failure

    def _close_call(self, ticket: CallTicket) -> tuple[Rollout, dict[str, Any] | None, float]:
        """The call's rollout, its spooled request event (if any) and its latency in ms."""
        state = self._rollouts.get(ticket.rollout_id)
        if state is None:  # finished while the call was in flight
            state = self._state(ticket.rollout_id)
        else:
            state.inflight = max(0, state.inflight - 1)
        state.last_active = time.time()
        sent = state.sent.pop(ticket.call_id, None)
        return state, sent, (time.perf_counter() - ticket.started) * 1000.0

    async def settled(self, rollout_id: str) -> None:
        """Wait until the rollout's work on the worker thread is done and applied (before
        spooling its outcome or finish, which must come after its calls)."""
        state = self._rollouts.get(rollout_id)
        if state is not None:
            await self._offload.settled(state.queued)

    def inflight(self, rollout_id: str) -> int:
        """Calls of the rollout that have arrived and not completed yet."""
        state = self._rollouts.get(rollout_id)
        return 0 if state is None else state.inflight

    # ------------------------------------------------------------------ outcome / finish

    def set_outcome(self, rollout_id: str, outcome: Mapping[str, Any]) -> None:
        """Attach {resolved?, reward?, details?} to a rollout (a later post replaces it).

        Raises:
            SpoolError: It cannot be spooled (the rollout keeps its previous outcome).
        """
        state = self._state(rollout_id)
        redacted = state.redact(dict(outcome))
        self.spool.append({"kind": "outcome", "rollout_id": rollout_id, "outcome": redacted})
        state.outcome = redacted
        state.last_active = time.time()

    def has_calls(self, rollout_id: str) -> bool:
        """Whether any call of this open rollout has been recorded."""
        state = self._rollouts.get(rollout_id)
        return state is not None and bool(state.calls)

    def finish(
        self, rollout_id: str, status: str | None = None, *, closed: str | None = None
    ) -> int:
        """Close a rollout and queue it for commit; returns its number of calls.

        Args:
            rollout_id: The rollout.
            status: Its status (see `RolloutMeta.status`).
            closed: Why the proxy closes it itself (stored in `attrs.proxy.closed`).

        Raises:
            KeyError: The rollout has no recorded calls.
            SpoolError: The finish cannot be spooled: the rollout stays open.
        """
        state = self._rollouts.get(rollout_id)
        if state is None or not state.calls:
            raise KeyError(rollout_id)
        self.spool.append(finish_event(rollout_id, status, closed))
        self._closed.add(rollout_id)
        # Queued before it leaves the open rollouts: the spool never looks all-committed while
        # this rollout's calls are only in it.
        self._committer.submit(self._finished(state, status, closed))
        del self._rollouts[rollout_id]
        if state.shipped != (0, 0):
            self._process.forget(rollout_id)
        return len(state.calls)

    @staticmethod
    def _finished(state: Rollout, status: str | None, closed: str | None) -> FinishedRollout:
        return FinishedRollout(
            state.rollout_id,
            dict(state.meta),
            state.calls,
            state.outcome,
            status,
            state.redactor,
            state.redactions,
            closed,
        )

    def open_rollouts(self) -> list[str]:
        """Ids of rollouts not finished yet."""
        return list(self._rollouts)

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
