"""The recorder's per-rollout state and call records: tickets, answers, open rollouts."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from dataclasses import dataclass, field
from typing import Any

from trajlake.proxy._offload import Queue
from trajlake.proxy.spool import ReplayedRollout, SpooledJSON
from trajlake.redact import Redactor, redact_json

__all__ = ["Answer", "CallTicket", "Rollout", "last_active", "restored"]


@dataclass(frozen=True)
class CallTicket:
    """A call in flight: its id and place in the rollout, handed back to `end_call`."""

    call_id: str
    rollout_id: str
    seq: int
    started_at: dt.datetime
    started: float  # perf_counter at arrival
    request_spooled: bool = False
    """The (redacted) request is in the spool already: the answer's record omits it."""


@dataclass(frozen=True)
class Answer:
    """What `end_call` is told about a completed call."""

    dialect: str
    endpoint: str
    stream: bool
    request: Any
    response: Any
    status_code: int | None
    error: str | None


@dataclass
class Rollout:
    """An open rollout: its calls, outcome, redactor and what is in flight."""

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
    sent: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Spooled request events of the calls in flight (carried on rotation)."""
    last_active: float = field(default_factory=time.time)
    """Wall-clock time of the rollout's last event (for the idle close)."""
    queued: Queue = field(default_factory=list)
    """Its work on the recorder's worker thread, not applied yet (oldest first)."""
    shipped: tuple[int, int] = (0, 0)
    """(recording process generation, entries of `redacted` it holds): sent once each."""

    def redact(self, value: Any) -> Any:
        """A redacted copy of a request, response or outcome (the original is forwarded)."""
        copy, found = redact_json(value, self.redactor, self.redacted)
        self.redactions += found
        return copy

    def records(self) -> list[dict[str, Any]]:
        """Its spool events (calls, requests in flight, outcome), to carry into a new file."""
        out = [*self.calls, *self.sent.values()]
        if self.outcome is not None:
            out.append({"kind": "outcome", "rollout_id": self.rollout_id, "outcome": self.outcome})
        return out


def restored(replayed: ReplayedRollout, redactor: Redactor) -> Rollout:
    """The state of a rollout read back from the spool by replay."""
    records = sorted(replayed.calls.values(), key=lambda c: int(c.get("seq", 0)))
    meta = dict(records[-1].get("meta") or {}) if records else {}
    state = Rollout(replayed.rollout_id, redactor, meta, records, replayed.outcome)
    # New secrets of a restored rollout are numbered after those already spooled.
    text = json.dumps([records, replayed.outcome], default=_text_of)
    state.redactions = state.redactor.reserve([text])
    state.next_seq = 1 + max((int(c.get("seq", 0)) for c in records), default=-1)
    state.last_active = last_active(records)
    return state


def _text_of(value: Any) -> str:
    """A value `json.dumps` cannot write, as text: a body file's JSON (its placeholders count)."""
    if isinstance(value, SpooledJSON):
        return value.raw.decode("utf-8", "replace")
    return str(value)


def last_active(records: list[dict[str, Any]]) -> float:
    """When a restored rollout last saw a call: its last answer's time (else now)."""
    ends = []
    for r in records:
        with contextlib.suppress(TypeError, ValueError):
            started = dt.datetime.fromisoformat(r["started_at"]).timestamp()
            ends.append(started + float(r.get("latency_ms") or 0.0) / 1000.0)
    return max(ends, default=time.time())
