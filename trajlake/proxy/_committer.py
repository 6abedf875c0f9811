"""Committing the proxy's finished rollouts: reconstruct, redact, commit in batches, mark spooled.

A background thread takes finished rollouts in batches (full, old enough, or on flush/close),
commits trajectories, messages and calls in one snapshot per batch and marks them committed in
the spool; a rollout that fails stays in the spool (and in `pending`, carried on rotation).
A rollout holding requests recorded in the recording process (kept as their spooled JSON) is
reconstructed there (`build`), so its big texts are never parsed or scanned in the proxy.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajlake.proxy.spool import Spool, SpooledJSON, SpoolError, body_files, finish_event
from trajlake.records import rows_for_table, trajectories_to_tables
from trajlake.redact import Redactor, redact_calls, redact_trajectory
from trajlake.schema import CanonicalTrajectory

if TYPE_CHECKING:
    import pyarrow as pa

    from trajlake.lake import LakeStore
    from trajlake.proxy.reconstruct import RecordedCall

__all__ = ["IDLE_CLOSED", "Committer", "FinishedRollout", "build_rollout", "committed_in_lake"]

log = logging.getLogger(__name__)

IDLE_CLOSED = "idle_closed"
"""`exit_reason` of a rollout the proxy closed because no call came for the idle time."""


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
    closed: str | None = None
    """Why the proxy finished the rollout itself (no call for the idle time), if it did."""

    def records(self) -> list[dict[str, Any]]:
        """Its spool events (calls, outcome, finish), to carry into a new spool file."""
        out: list[dict[str, Any]] = list(self.calls)
        if self.outcome is not None:
            out.append({"kind": "outcome", "rollout_id": self.rollout_id, "outcome": self.outcome})
        out.append(finish_event(self.rollout_id, self.status, self.closed))
        return out


def committed_in_lake(lake: LakeStore) -> set[str]:
    """Ids of the proxy's trajectories in the lake (two columns of one table, read once)."""
    import pyarrow.compute as pc

    from trajlake.proxy.reconstruct import SOURCE_FORMAT

    started = time.perf_counter()
    table = lake.read_table("trajectories", columns=["trajectory_id", "source_format"])
    mine = table.filter(pc.equal(table.column("source_format"), SOURCE_FORMAT))
    ids = set(mine.column("trajectory_id").to_pylist())
    log.debug("%d finished rollout id(s) loaded in %.3f s", len(ids), time.perf_counter() - started)
    return ids


def _recorded_call(record: Mapping[str, Any]) -> RecordedCall:
    """A spooled call record parsed into the reconstruction's input (same live and on replay)."""
    from trajlake.proxy.dialects import parse_request, parse_response
    from trajlake.proxy.reconstruct import RecordedCall

    dialect = record["dialect"]
    error: str | None = record.get("error")
    call_input = call_output = None
    request, response = record.get("request"), record.get("response")
    if isinstance(request, SpooledJSON):
        request = request.value()
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
        exit_reason=IDLE_CLOSED if item.closed else None,
        closed=item.closed,
    )
    trajectory, rows = reconstruct(meta, calls)
    rows = [dict(r) for r in rows]
    # One per rollout: messages and calls share placeholder numbers with the spooled calls.
    redactor = item.redactor or Redactor()
    found = item.redactions + redact_trajectory(trajectory, redactor)
    found += redact_calls(rows, redactor)
    trajectory.n_redactions += found
    return trajectory, rows


class Committer:
    """A thread that commits finished rollouts in batches and marks them in the spool."""

    def __init__(
        self,
        lake: LakeStore,
        spool: Spool,
        batch_size: int,
        max_seconds: float,
        *,
        after_commit: Callable[[], None] | None = None,
        build: Callable[[FinishedRollout], tuple[dict[str, pa.Table], int]] | None = None,
    ) -> None:
        self._lake, self._spool = lake, spool
        self._build = build
        self._after_commit = after_commit
        self._batch_size, self._max_seconds = batch_size, max_seconds
        self._cond = threading.Condition()
        self._queue: list[tuple[float, FinishedRollout]] = []
        self._current: list[FinishedRollout] = []
        """The batch being committed."""
        self._failed: list[FinishedRollout] = []
        """Rollouts that could not be reconstructed: kept for the next process's replay."""
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

    def pending(self) -> list[FinishedRollout]:
        """Every finished rollout not in the lake yet: queued, being committed or failed."""
        with self._cond:
            return [item for _, item in self._queue] + self._current + self._failed

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
                        self._busy, self._current = True, batch
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
                self._busy, self._in_hook, self._current = False, hook, []
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
        built: list[dict[str, pa.Table]] = []
        n_calls = 0
        for item in batch:
            try:
                remote = self._built_remotely(item)
                if remote is not None:
                    built.append(remote[0])
                    n_calls += remote[1]
                else:
                    trajectory, call_rows = build_rollout(item)
                    trajectories.append(trajectory)
                    rows.extend(call_rows)
            except Exception:  # a bad rollout must not block the others; its spool stays
                log.exception("cannot reconstruct proxy rollout %s", item.rollout_id)
                with self._cond:
                    self._counts["failed_rollouts"] += 1
                    self._failed.append(item)
                continue
            done.append(item.rollout_id)
        if trajectories or built:
            tables = _concat(trajectories, rows, built)
            n_calls += len(rows)
            summary = {"rollouts": len(done), "calls": n_calls}
            self._lake.commit(tables, operation="proxy", summary=summary)
        with contextlib.suppress(SpoolError):
            self._spool.mark_committed(done)
            # In the lake and marked so: the body files are not needed any more.
            committed = set(done)
            kept = (c for item in batch if item.rollout_id in committed for c in item.calls)
            self._spool.bodies.discard(body_files(kept))
        with self._cond:
            self._counts["committed_rollouts"] += len(done)
            self._counts["committed_calls"] += n_calls
            self._counts["commits"] += 1 if done else 0

    def _built_remotely(self, item: FinishedRollout) -> tuple[dict[str, pa.Table], int] | None:
        """A rollout with requests kept as spooled JSON, built by the recording process (None:
        build it here; also when that process failed, which is slower but loses nothing)."""
        if self._build is None or not any(
            isinstance(c.get("request"), SpooledJSON) for c in item.calls
        ):
            return None
        try:
            return self._build(item)
        except SpoolError as e:
            log.warning("building rollout %s here: %s", item.rollout_id, e)
            return None


def _concat(
    trajectories: list[CanonicalTrajectory],
    rows: list[dict[str, Any]],
    built: list[dict[str, pa.Table]],
) -> dict[str, pa.Table]:
    """One batch's tables: those built here and those built by the recording process."""
    import pyarrow as pa

    parts = list(built)
    if trajectories:
        local = trajectories_to_tables(trajectories)
        local["calls"] = rows_for_table("calls", rows)
        parts.insert(0, local)
    if len(parts) == 1:
        return parts[0]
    return {
        name: pa.concat_tables([p[name] for p in parts], promote_options="default")
        for name in parts[0]
    }
