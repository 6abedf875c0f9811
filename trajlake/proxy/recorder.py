"""Rollout state of the recording proxy: calls, outcomes and finishes, spooled, then committed.

The event loop only appends to memory and the spool; a background thread reconstructs finished
rollouts, redacts them and commits trajectories, messages and calls in one snapshot per batch.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trajlake.ingest.redact import AllowList, Redactor, redact_json, redact_trajectory
from trajlake.proxy.spool import Spool, SpoolError, replay
from trajlake.records import rows_for_table, trajectories_to_tables
from trajlake.schema import CanonicalTrajectory

if TYPE_CHECKING:
    from trajlake.lake._lake import Lake
    from trajlake.proxy.reconstruct import RecordedCall

__all__ = ["CallTicket", "FinishedRollout", "Recorder", "build_rollout"]

log = logging.getLogger(__name__)

META_KEYS = ("task_id", "generation", "run_id", "harness")


@dataclass(frozen=True)
class CallTicket:
    """A call in flight: its id and place in the rollout, handed back to `end_call`."""

    call_id: str
    rollout_id: str
    seq: int
    started_at: dt.datetime
    started: float  # perf_counter at arrival


@dataclass
class _Rollout:
    rollout_id: str
    redactor: Redactor
    meta: dict[str, Any] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    outcome: dict[str, Any] | None = None
    next_seq: int = 0
    inflight: int = 0
    redacted: dict[str, str] = field(default_factory=dict)
    """Original → redacted text of every string redacted so far: a request repeats the
    history, which is then redacted once and reads the same in every spooled call."""
    redactions: int = 0
    """Replacements made before spooling (each distinct text counted once)."""

    def redact(self, value: Any) -> Any:
        """A redacted copy of a request, response or outcome (the original is forwarded)."""
        copy, found = redact_json(value, self.redactor, self.redacted)
        self.redactions += found
        return copy


class Recorder:
    """Keeps open rollouts in memory and the spool; commits finished ones in batches.

    Methods other than `flush`/`close` are meant for one thread (the server's event loop).

    Args:
        lake: The lake to commit into.
        spool_dir: Directory of the write-ahead spool (replayed by `start`).
        batch_size: Most rollouts per commit.
        max_seconds: How long a finished rollout waits for others to share its commit.
        fsync: fsync every spooled line (power-loss safe; a killed process loses nothing
            either way).
        run_id: Names the rollouts of calls that carry no rollout id.
        rotate_bytes: Once the spool file is this large and everything in it is committed,
            the spool continues in a new file and the old one is deleted.
        redact_personal: Also replace personal data (e-mail addresses, phone numbers).
        allow_list: Values never redacted.

    Requests, responses, errors and outcomes are redacted before they are spooled, so the
    spool holds no secret in clear either (placeholders numbered per rollout, as in the lake).
    """

    def __init__(
        self,
        lake: Lake,
        spool_dir: str | os.PathLike[str],
        *,
        batch_size: int = 64,
        max_seconds: float = 1.0,
        fsync: bool = False,
        run_id: str | None = None,
        rotate_bytes: int = 64 * 2**20,
        redact_personal: bool = False,
        allow_list: AllowList | None = None,
    ) -> None:
        if batch_size < 1 or max_seconds <= 0:
            raise ValueError("batch_size must be >= 1 and max_seconds > 0")
        self.lake = lake
        self._redact_personal, self._allow_list = redact_personal, allow_list
        self.spool = Spool(spool_dir, fsync=fsync)
        self._rotate_bytes = rotate_bytes
        self._committer = Committer(
            lake, self.spool, batch_size, max_seconds, after_commit=self._maybe_rotate
        )
        self._rollouts: dict[str, _Rollout] = {}
        self._closed: set[str] = set()
        """Rollouts finished by this process (or replayed finished): their ids are spent."""
        self._auto = itertools.count(1)
        stem = self.spool.path.stem.removeprefix("calls-")
        self._auto_prefix = f"auto-{run_id or 'proxy'}-{stem}"
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> int:
        """Replay orphaned spool files, then start committing; returns rollouts restored."""
        if self._started:
            return 0
        pending = replay(self.spool)
        for r in pending:
            records = sorted(r.calls.values(), key=lambda c: int(c.get("seq", 0)))
            meta = dict(records[-1].get("meta") or {}) if records else {}
            state = _Rollout(r.rollout_id, self._redactor(), meta, records, r.outcome)
            # New secrets of a restored rollout are numbered after those already spooled.
            state.redactions = state.redactor.reserve(
                [json.dumps([records, r.outcome], default=str)]
            )
            state.next_seq = 1 + max((int(c.get("seq", 0)) for c in records), default=-1)
            if r.finished:
                self._closed.add(r.rollout_id)
                self._committer.submit(self._finished(state, r.status))
            else:
                self._rollouts[r.rollout_id] = state
        self._committer.start()
        self._started = True
        return len(pending)

    def _nothing_pending(self) -> bool:
        stats = self._committer.stats()
        return not self._rollouts and self._committer.empty() and not stats["failed_rollouts"]

    def _maybe_rotate(self) -> None:
        """After a commit: a spool whose every rollout is in the lake starts over."""
        with contextlib.suppress(SpoolError):
            self.spool.rotate(self._rotate_bytes, self._nothing_pending)

    def flush(self, timeout: float | None = None) -> bool:
        """Commit every finished rollout now; False when the timeout ran out first."""
        return self._committer.flush(timeout)

    def close(self, timeout: float | None = 60.0) -> None:
        """Commit what is finished and stop; unfinished rollouts stay in the spool."""
        self._committer.close(timeout)
        self.spool.close(remove=self._nothing_pending())

    @property
    def stats(self) -> dict[str, Any]:
        """Open rollouts, in-flight calls and the committer's counters."""
        return {
            "open_rollouts": len(self._rollouts),
            "inflight_calls": sum(r.inflight for r in self._rollouts.values()),
            **self._committer.stats(),
        }

    def _redactor(self) -> Redactor:
        return Redactor(personal=self._redact_personal, allow=self._allow_list)

    def _state(self, rollout_id: str) -> _Rollout:
        state = self._rollouts.get(rollout_id)
        if state is None:
            state = self._rollouts[rollout_id] = _Rollout(rollout_id, self._redactor())
        return state

    # ------------------------------------------------------------------ calls

    def auto_rollout_id(self) -> str:
        """A fresh rollout id for a call that named none (unique across restarts)."""
        return f"{self._auto_prefix}-{next(self._auto)}"

    def is_finished(self, rollout_id: str) -> bool:
        """The rollout was finished here: a new call must use a new rollout id (its committed
        trajectory would not change, and the calls would belong to no trajectory)."""
        return rollout_id in self._closed

    def begin_call(self, rollout_id: str, meta: Mapping[str, Any]) -> CallTicket:
        """Register a call arriving for `rollout_id`; tags in `meta` fill the rollout's gaps."""
        state = self._state(rollout_id)
        for key in META_KEYS:
            if state.meta.get(key) is None and meta.get(key) is not None:
                state.meta[key] = meta[key]
        seq, state.next_seq = state.next_seq, state.next_seq + 1
        state.inflight += 1
        now = dt.datetime.now(dt.timezone.utc)
        return CallTicket(uuid.uuid4().hex, rollout_id, seq, now, time.perf_counter())

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
        """Spool and keep a completed (or failed) call; call before its last byte is sent."""
        state = self._rollouts.get(ticket.rollout_id)
        if state is None:  # finished while the call was in flight
            state = self._state(ticket.rollout_id)
        else:
            state.inflight = max(0, state.inflight - 1)
        record = {
            "kind": "call",
            "rollout_id": ticket.rollout_id,
            "call_id": ticket.call_id,
            "seq": ticket.seq,
            "dialect": dialect,
            "endpoint": endpoint,
            "stream": stream,
            "status_code": status_code,
            "error": state.redact(error),
            "started_at": ticket.started_at.isoformat(),
            "latency_ms": (time.perf_counter() - ticket.started) * 1000.0,
            "meta": state.meta,
            "request": state.redact(request),
            "response": state.redact(response),
        }
        self._spool(record)
        state.calls.append(record)

    def _spool(self, record: Mapping[str, Any]) -> None:
        try:
            self.spool.append(record)
        except SpoolError as e:  # availability first: the call is still answered and kept
            log.error("%s", e)

    def inflight(self, rollout_id: str) -> int:
        """Calls of the rollout that have arrived and not completed yet."""
        state = self._rollouts.get(rollout_id)
        return 0 if state is None else state.inflight

    # ------------------------------------------------------------------ outcome / finish

    def set_outcome(self, rollout_id: str, outcome: Mapping[str, Any]) -> None:
        """Attach {resolved?, reward?, details?} to a rollout (a later post replaces it)."""
        state = self._state(rollout_id)
        state.outcome = state.redact(dict(outcome))
        self._spool({"kind": "outcome", "rollout_id": rollout_id, "outcome": state.outcome})

    def has_calls(self, rollout_id: str) -> bool:
        """Whether any call of this open rollout has been recorded."""
        state = self._rollouts.get(rollout_id)
        return state is not None and bool(state.calls)

    def finish(self, rollout_id: str, status: str | None = None) -> int:
        """Close a rollout and queue it for commit; returns its number of calls.

        Raises:
            KeyError: The rollout has no recorded calls.
        """
        state = self._rollouts.get(rollout_id)
        if state is None or not state.calls:
            raise KeyError(rollout_id)
        self._closed.add(rollout_id)
        self._spool({"kind": "finish", "rollout_id": rollout_id, "status": status})
        # Queued before it leaves the open rollouts: the spool never looks all-committed while
        # this rollout's calls are only in it.
        self._committer.submit(self._finished(state, status))
        del self._rollouts[rollout_id]
        return len(state.calls)

    @staticmethod
    def _finished(state: _Rollout, status: str | None) -> FinishedRollout:
        return FinishedRollout(
            state.rollout_id,
            dict(state.meta),
            state.calls,
            state.outcome,
            status,
            state.redactor,
            state.redactions,
        )

    def open_rollouts(self) -> list[str]:
        """Ids of rollouts not finished yet."""
        return list(self._rollouts)

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- building and committing


@dataclass(frozen=True)
class FinishedRollout:
    """A finished rollout as spooled: its tags, call records, outcome and status."""

    rollout_id: str
    meta: dict[str, Any]
    calls: list[dict[str, Any]]
    outcome: dict[str, Any] | None
    status: str | None
    redactor: Redactor | None = None
    """The rollout's redactor, which redacted its spooled calls: what it learnt (a password
    found by its key name) is applied to the whole rollout at commit."""
    redactions: int = 0
    """Replacements already made in the spooled calls."""


def _recorded_call(record: Mapping[str, Any]) -> RecordedCall:
    """A spooled call record parsed into the reconstruction's input (same live and on replay)."""
    from trajlake.proxy.dialects import parse_request, parse_response
    from trajlake.proxy.reconstruct import RecordedCall

    dialect = record["dialect"]
    error: str | None = record.get("error")
    call_input = call_output = None
    request, response = record.get("request"), record.get("response")
    try:
        if not isinstance(request, dict):
            raise ValueError("the request body is not a JSON object")
        call_input = parse_request(dialect, request)
    except ValueError as e:
        error = error or f"unparseable request: {e}"
    if error is None:
        try:
            if not isinstance(response, dict):
                raise ValueError("the response body is not a JSON object")
            call_output = parse_response(dialect, response)
        except ValueError as e:
            error = f"unparseable response: {e}"
    return RecordedCall(
        call_id=record["call_id"],
        rollout_id=record["rollout_id"],
        seq=int(record["seq"]),
        dialect=dialect,
        endpoint=record.get("endpoint") or "",
        input=call_input,
        output=call_output,
        response=response,
        stream=bool(record.get("stream")),
        status_code=record.get("status_code"),
        error=error,
        started_at=dt.datetime.fromisoformat(record["started_at"]),
        latency_ms=record.get("latency_ms"),
    )


def _strings(value: Any, out: list[tuple[Any, Any]]) -> None:
    """Collect every (container, key) holding a string inside a JSON-like value."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, str):
            out.append((value, key))
        elif isinstance(item, (dict, list)):
            _strings(item, out)


def _redact_rows(rows: list[dict[str, Any]], redactor: Redactor) -> int:
    """Redact the free text of calls rows in place (request, input, response, error)."""
    slots: list[tuple[Any, Any]] = []
    for row in rows:
        for key in ("request_params", "new_input", "response", "error"):
            value = row.get(key)
            if isinstance(value, str):
                slots.append((row, key))
            elif isinstance(value, (dict, list)):
                _strings(value, slots)
    if not slots:
        return 0
    texts = [holder[key] for holder, key in slots]
    new_texts, count = redactor.redact_texts(texts)
    for (holder, key), old, new in zip(slots, texts, new_texts, strict=True):
        if new is not old:
            holder[key] = new
    return count


def build_rollout(item: FinishedRollout) -> tuple[CanonicalTrajectory, list[dict[str, Any]]]:
    """Reconstruct a finished rollout and redact it: the trajectory and its calls rows."""
    from trajlake.proxy.reconstruct import RolloutMeta, reconstruct

    records = sorted(item.calls, key=lambda c: int(c["seq"]))
    calls = [_recorded_call(r) for r in records]
    meta = RolloutMeta(
        rollout_id=item.rollout_id,
        task_id=item.meta.get("task_id"),
        generation=item.meta.get("generation"),
        run_id=item.meta.get("run_id"),
        harness=item.meta.get("harness"),
        outcome=item.outcome,
        status=item.status,
    )
    trajectory, rows = reconstruct(meta, calls)
    rows = [dict(r) for r in rows]
    # One per rollout: messages and calls share placeholder numbers with the spooled calls.
    redactor = item.redactor or Redactor()
    found = item.redactions + redact_trajectory(trajectory, redactor)
    found += _redact_rows(rows, redactor)
    trajectory.n_redactions += found
    return trajectory, rows


class Committer:
    """A thread that commits finished rollouts in batches and marks them in the spool."""

    def __init__(
        self,
        lake: Lake,
        spool: Spool,
        batch_size: int,
        max_seconds: float,
        *,
        after_commit: Callable[[], None] | None = None,
    ) -> None:
        self._lake, self._spool = lake, spool
        self._after_commit = after_commit
        self._batch_size, self._max_seconds = batch_size, max_seconds
        self._cond = threading.Condition()
        self._queue: list[tuple[float, FinishedRollout]] = []
        self._busy = self._closed = self._urgent = self._in_hook = False
        self._thread = threading.Thread(target=self._run, name="trajlake-proxy-commit", daemon=True)
        self._counts = {"committed_rollouts": 0, "committed_calls": 0, "commits": 0}
        self._counts |= {"failed_rollouts": 0, "failed_commits": 0}

    def start(self) -> None:
        self._thread.start()

    def submit(self, item: FinishedRollout) -> None:
        with self._cond:
            self._queue.append((time.monotonic(), item))
            self._cond.notify_all()

    def empty(self) -> bool:
        with self._cond:
            return not self._queue and not self._busy

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {**self._counts, "queued_rollouts": len(self._queue)}

    def flush(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            while self._queue or self._busy or self._in_hook:
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or not self._thread.is_alive():
                    break
                self._cond.wait(left)
            self._urgent = False
            return not self._queue and not self._busy and not self._in_hook

    def close(self, timeout: float | None) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[FinishedRollout] | None:
        """The next batch: full, old enough, or whatever is there when flushing or closing."""
        with self._cond:
            while True:
                if self._queue:
                    age = time.monotonic() - self._queue[0][0]
                    full = len(self._queue) >= self._batch_size
                    if full or self._urgent or self._closed or age >= self._max_seconds:
                        batch = [item for _, item in self._queue[: self._batch_size]]
                        del self._queue[: len(batch)]
                        self._busy = True
                        return batch
                    self._cond.wait(self._max_seconds - age)
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            failed = False
            try:
                self._commit(batch)
            except Exception:  # kept in the spool: committed by this process later or the next
                log.exception("committing %d proxy rollout(s) failed; will retry", len(batch))
                failed = True
            hook = not failed and self._after_commit is not None
            with self._cond:
                self._busy, self._in_hook = False, hook
                if failed:
                    self._counts["failed_commits"] += 1
                    if not self._closed:
                        now = time.monotonic()
                        self._queue[:0] = [(now, item) for item in batch]
                self._cond.notify_all()
            if failed and not self._closed:
                time.sleep(min(self._max_seconds, 1.0))
            elif hook:
                self._run_hook()

    def _run_hook(self) -> None:
        """The after-commit hook; `flush` waits for it (its effects count as the commit's)."""
        try:
            assert self._after_commit is not None
            self._after_commit()
        except Exception:  # a failed hook (spool rotation) never stops committing
            log.exception("after-commit hook failed")
        finally:
            with self._cond:
                self._in_hook = False
                self._cond.notify_all()

    def _commit(self, batch: list[FinishedRollout]) -> None:
        trajectories, rows, done = [], [], []
        for item in batch:
            try:
                trajectory, call_rows = build_rollout(item)
            except Exception:  # a bad rollout must not block the others; its spool stays
                log.exception("cannot reconstruct proxy rollout %s", item.rollout_id)
                with self._cond:
                    self._counts["failed_rollouts"] += 1
                continue
            trajectories.append(trajectory)
            rows.extend(call_rows)
            done.append(item.rollout_id)
        if trajectories:
            tables = trajectories_to_tables(trajectories)
            tables["calls"] = rows_for_table("calls", rows)
            summary = {"rollouts": len(trajectories), "calls": len(rows)}
            self._lake.commit(tables, operation="proxy", summary=summary)
        with contextlib.suppress(SpoolError):
            self._spool.mark_committed(done)
        with self._cond:
            self._counts["committed_rollouts"] += len(done)
            self._counts["committed_calls"] += len(rows)
            self._counts["commits"] += 1 if trajectories else 0
