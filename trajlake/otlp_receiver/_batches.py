"""The receiver's write-ahead spool and its flushes into the lake, one trace at a time.

Each accepted request is split by trace and written to the proxy's spool (`trajlake.proxy.spool`:
one line per event, a locked file per process, orphans replayed on start) before it is
answered, so a killed receiver loses nothing it acknowledged. A trace's pieces are a "rollout"
of the spool. Once a trace's root span has arrived (or no span came for `idle_s`), a flusher
thread writes the ready traces to a batch file of OTLP/JSON lines named by the hash of its
content, records that name against each trace in the spool, ingests the file with the `otlp`
adapter (one snapshot per batch) and only then marks those traces committed in the spool.
After a crash between the commit and the mark, replay rebuilds the batch under its recorded
name, the same bytes in the same file: trajectories and calls (ids derived from the trace) and
quarantine rows (ids derived from file, line and bytes) are duplicates, so it adds nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trajlake.ingest import IngestOptions, ingest
from trajlake.proxy.spool import ReplayedRollout, Spool, batch_event, replay

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

log = logging.getLogger(__name__)

_ROTATE_BYTES = 64 << 20


@dataclass
class _Trace:
    """The spooled, uncommitted pieces of one trace."""

    rollout_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    root_seen: bool = False
    last_seen: float = field(default_factory=time.monotonic)
    batch: str | None = None
    """The batch it was assigned to in the spool (it is committed in that batch only)."""

    def records(self) -> list[dict[str, Any]]:
        """Its events as a new spool file must hold them (rotation)."""
        tail = [batch_event(self.rollout_id, self.batch)] if self.batch is not None else []
        return [*self.events, *tail]


@dataclass
class _Batch:
    """Traces committed together, from one file of OTLP/JSON lines named by its content."""

    traces: list[_Trace]
    lines: list[str]
    name: str

    @classmethod
    def of(cls, traces: list[_Trace], name: str | None = None) -> _Batch:
        """The batch of these traces (in rollout id order); `name`: the one recorded for it."""
        ordered = sorted(traces, key=lambda s: s.rollout_id)
        lines = [_request_line(e["request"]) for s in ordered for e in s.events]
        content = "\n".join(lines).encode("utf-8", "backslashreplace")
        return cls(ordered, lines, name or hashlib.sha256(content).hexdigest()[:16])

    @property
    def rollout_ids(self) -> list[str]:
        return [s.rollout_id for s in self.traces]


def _request_line(request: Any) -> str:
    return json.dumps(request, ensure_ascii=False, separators=(",", ":"))


def split_by_trace(request: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], bool]]:
    """trace id → (the request cut down to that trace's spans, whether its root span is in it).

    Spans without a trace id go under "" (the adapter quarantines them)."""
    pieces: dict[str, list[Any]] = {}
    roots: set[str] = set()
    for resource_spans in request.get("resourceSpans") or ():
        if not isinstance(resource_spans, Mapping):
            continue
        by_trace: dict[str, list[dict[str, Any]]] = {}
        for scope_spans in resource_spans.get("scopeSpans") or ():
            if not isinstance(scope_spans, Mapping):
                continue
            scoped: dict[str, list[Any]] = {}
            for span in scope_spans.get("spans") or ():
                trace = span.get("traceId") if isinstance(span, Mapping) else None
                trace = trace if isinstance(trace, str) else ""
                scoped.setdefault(trace, []).append(span)
                if isinstance(span, Mapping) and not span.get("parentSpanId"):
                    roots.add(trace)
            for trace, spans in scoped.items():
                by_trace.setdefault(trace, []).append({**scope_spans, "spans": spans})
        for trace, scopes in by_trace.items():
            pieces.setdefault(trace, []).append({**resource_spans, "scopeSpans": scopes})
    return {t: ({"resourceSpans": r}, t in roots) for t, r in pieces.items()}


def _span_count(request: Mapping[str, Any]) -> int:
    return sum(
        len(scope.get("spans") or ())
        for resource in request["resourceSpans"]
        for scope in resource["scopeSpans"]
    )


def _restored(rollout: ReplayedRollout) -> _Trace:
    """A replayed trace piece: complete (its writer is gone), so committed on the next flush."""
    events = sorted(rollout.calls.values(), key=lambda e: int(e.get("seq", 0)))
    return _Trace(rollout.rollout_id, events, root_seen=True, last_seen=0.0, batch=rollout.batch)


class Batcher:
    """Spools accepted requests and commits ready traces to the lake from a thread.

    Args:
        lake: The lake receiving trajectories, messages, calls and quarantine rows.
        spool_dir: The write-ahead spool folder (replayed on start).
        fsync: fsync every spooled request (power-loss safe; a kill loses nothing without).
        commit_seconds: How long a trace whose root span arrived waits for late spans.
        idle_s: Commit a trace whose root never came after this long without a span.
        batch_size: Most traces per commit.
        options: Ingest options (run id, generation, redaction).
    """

    def __init__(
        self,
        lake: LakeStore,
        spool_dir: str | os.PathLike[str],
        *,
        fsync: bool = False,
        commit_seconds: float = 1.0,
        idle_s: float = 30.0,
        batch_size: int = 256,
        options: IngestOptions | None = None,
    ) -> None:
        self.lake = lake
        self.spool = Spool(spool_dir, fsync=fsync)
        self.commit_seconds, self.idle_s, self.batch_size = commit_seconds, idle_s, batch_size
        self.options = options or IngestOptions(workers=1)
        self._traces: dict[str, _Trace] = {}
        """Open traces by trace id (restored ones by rollout id: spans arriving now open new)."""
        self._sealed: list[_Trace] = []
        """Traces taken past a full batch: first in the next one."""
        self._batches: list[_Batch] = []
        """Batches named in the spool and not committed (replayed, or whose commit failed):
        each is committed again as it is, before any other."""
        self._committing: _Batch | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otlp-flush", daemon=True)
        self.stats = {"requests": 0, "spans": 0, "committed_traces": 0, "commits": 0}
        self._restore()

    def _restore(self) -> None:
        """Pick up the traces a previous receiver acknowledged but had not committed: those it
        had named a batch for form that batch again, the others wait for the first flush."""
        found = replay(self.spool)
        named: dict[str, list[_Trace]] = {}
        for rollout in found.pending:
            state = _restored(rollout)
            if rollout.batch is not None:
                named.setdefault(rollout.batch, []).append(state)
            else:
                self._traces[rollout.rollout_id] = state
        self._batches = [_Batch.of(traces, name) for name, traces in named.items()]
        if found.pending:
            log.info("otlp receiver: %d trace(s) replayed from the spool", len(found.pending))

    def start(self) -> None:
        self._thread.start()

    def accept(self, request: Mapping[str, Any]) -> int:
        """Spool a decoded export request (raises SpoolError when it cannot be written); the
        number of spans in it. The caller answers only after this returns."""
        pieces = split_by_trace(request)
        count = 0
        with self._mutex:
            events: list[tuple[str, _Trace, dict[str, Any], bool]] = []
            for trace_id, (piece, has_root) in pieces.items():
                state = self._traces.get(trace_id)
                if state is None:
                    state = _Trace(f"{trace_id}/{uuid.uuid4().hex[:12]}")
                event: dict[str, Any] = {
                    "kind": "call",
                    "rollout_id": state.rollout_id,
                    "call_id": uuid.uuid4().hex,
                    "seq": len(state.events),
                    "request": piece,
                }
                events.append((trace_id, state, event, has_root))
            self.spool.append_many(e for _, _, e, _ in events)
            now = time.monotonic()
            for trace_id, state, event, has_root in events:
                state.events.append(event)
                state.root_seen = state.root_seen or has_root
                state.last_seen = now
                self._traces[trace_id] = state
                count += _span_count(event["request"])
            self.stats["requests"] += 1
            self.stats["spans"] += count
        self._wake.set()
        return count

    def _take_ready(self, final: bool) -> _Batch | None:
        """The next batch to commit: one named already, else the traces ready now (sealed:
        spans arriving later open a new piece), at most `batch_size` of them."""
        now = time.monotonic()
        with self._mutex:
            if self._batches:
                self._committing = self._batches.pop(0)
                return self._committing
            ready = [
                t
                for t, s in self._traces.items()
                if final
                or (s.root_seen and now - s.last_seen >= self.commit_seconds)
                or now - s.last_seen >= self.idle_s
            ]
            taken = self._sealed + [self._traces.pop(t) for t in ready]
            self._sealed = [] if final else taken[self.batch_size :]
            taken = taken if final else taken[: self.batch_size]
            self._committing = _Batch.of(taken) if taken else None
            return self._committing

    def flush(self, final: bool = False) -> int:
        """Commit the ready traces (every trace when `final`); the number committed."""
        done = 0
        while batch := self._take_ready(final):
            try:
                self._commit(batch)
            except BaseException:
                with self._mutex:  # still spooled: retried, as the same batch, next flush
                    self._batches.insert(0, batch)
                    self._committing = None
                raise
            done += len(batch.traces)
        return done

    def _commit(self, batch: _Batch) -> None:
        if any(s.batch != batch.name for s in batch.traces):
            # Named in the spool before the lake sees it: a replay rebuilds this very file.
            self.spool.append_many(batch_event(s.rollout_id, batch.name) for s in batch.traces)
            for s in batch.traces:
                s.batch = batch.name
        path = self.spool.directory / f"batch-{batch.name}.jsonl"
        data = "".join(line + "\n" for line in batch.lines)
        path.write_bytes(data.encode("utf-8", "backslashreplace"))
        try:
            ingest(self.lake, [str(path)], format="otlp", options=self.options)
            self.spool.mark_committed(batch.rollout_ids)  # only after the lake has the batch
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        with self._mutex:
            self._committing = None
        self.stats["committed_traces"] += len(batch.traces)
        self.stats["commits"] += 1
        self._maybe_rotate()

    def _maybe_rotate(self) -> None:
        """Continue in a new spool file holding only what is not committed (the lock order is
        this object's, then the spool's, as in `accept`)."""
        with self._mutex:
            batches = [*self._batches, *([self._committing] if self._committing else [])]
            states = [*self._traces.values(), *self._sealed]
            states += [s for b in batches for s in b.traces]
            self.spool.rotate(_ROTATE_BYTES, lambda: [e for s in states for e in s.records()])

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.2)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # a failed commit stays spooled and is retried
                log.exception("otlp receiver: commit failed; the traces stay spooled")
                self._stop.wait(1.0)

    def close(self) -> None:
        """Stop the thread, commit every spooled trace, and close the spool."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            self.flush(final=True)
        finally:
            self.spool.close(remove=not (self._traces or self._sealed or self._batches))
