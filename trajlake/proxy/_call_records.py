"""A call's spool lines: its request event and its call record, redacted, then appended.

This is the costly part of recording a call (redact, encode, write), kept apart from the
recorder's bookkeeping of open rollouts because it runs inline or on the worker thread
(`_offload`) or, for the biggest requests, partly in the recording process (`_process`). It
touches only the one rollout's state it is given and the spool, never the recorder's rollouts.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from trajlake.proxy._process import RecordingProcess
from trajlake.proxy._rollout import Answer, CallTicket, Rollout
from trajlake.proxy.spool import Spool, SpooledJSON, SpoolError

__all__ = ["spool_answer", "spool_in_process", "spool_request"]

log = logging.getLogger("trajlake.proxy.recorder")  # its records, under the recorder's name


def _request_event(ticket: CallTicket, dialect: str, endpoint: str, stream: bool) -> dict[str, Any]:
    """The request event of a call, but for the request itself."""
    return {
        "kind": "request",
        "rollout_id": ticket.rollout_id,
        "call_id": ticket.call_id,
        "seq": ticket.seq,
        "dialect": dialect,
        "endpoint": endpoint,
        "stream": stream,
        "started_at": ticket.started_at.isoformat(),
    }


def spool_request(
    spool: Spool,
    state: Rollout,
    ticket: CallTicket,
    request: Any,
    dialect: str,
    endpoint: str,
    stream: bool,
    big: bool = False,
) -> dict[str, Any]:
    """Redact and spool the request event (the costly part of `Recorder.begin_call`)."""
    event = {
        **_request_event(ticket, dialect, endpoint, stream),
        "request": state.redact(request),
    }
    # The answer's record is the one synced; a big one is encoded in pieces (see `Spool`).
    spool.append(event, sync=False, in_pieces=big)
    return event


def spool_in_process(
    spool: Spool,
    process: RecordingProcess,
    state: Rollout,
    ticket: CallTicket,
    body: bytes,
    dialect: str,
    endpoint: str,
) -> dict[str, Any]:
    """`spool_request` done by the recording process, which writes the request to a body
    file; the line naming it is spooled here."""
    event = _request_event(ticket, dialect, endpoint, False)  # stream: read from the body there
    file = spool.body_path(ticket.call_id)
    reply = process.request(
        ticket.rollout_id,
        body,
        file,
        state.redactor,
        state.redacted,
        state.shipped,
        fsync=spool.fsync,
    )
    # What the redactor learnt is kept even if the write fails, as `state.redact` would.
    state.redactor, state.redactions = reply.redactor, state.redactions + reply.found
    state.redacted.update(reply.new_cache)
    state.shipped = (reply.generation, len(state.redacted))
    request = SpooledJSON(file, spool.bodies.ref(file), reply.stream)
    event = {**event, "stream": reply.stream, "request": request}
    try:
        spool.append(event, sync=False)
    except SpoolError:
        spool.bodies.discard([file])
        raise
    return event


def spool_answer(
    spool: Spool,
    state: Rollout,
    ticket: CallTicket,
    sent: dict[str, Any] | None,
    latency_ms: float,
    answer: Answer,
    big: bool = False,
) -> tuple[dict[str, Any], SpoolError | None]:
    """Redact and spool the call record (the costly part of `Recorder.end_call`): the record
    to keep, and the error when it could not be spooled (then kept as a failed call)."""
    record = {
        "kind": "call",
        "rollout_id": ticket.rollout_id,
        "call_id": ticket.call_id,
        "seq": ticket.seq,
        "dialect": answer.dialect,
        "endpoint": answer.endpoint,
        "stream": answer.stream,
        "status_code": answer.status_code,
        "error": state.redact(answer.error),
        "started_at": ticket.started_at.isoformat(),
        "latency_ms": latency_ms,
        "meta": state.meta,
        "request": sent["request"] if sent is not None else state.redact(answer.request),
    }
    record["response"] = state.redact(answer.response)
    try:
        _spool_call(spool, record, sent is not None, big)
    except SpoolError as e:
        failed = {**record, "response": None, "error": f"the proxy could not record it: {e}"}
        with contextlib.suppress(SpoolError):  # small: it may fit where the answer did not
            _spool_call(spool, failed, sent is not None)
        log.error("refusing a call the proxy could not record: %s", e)
        return failed, e
    return record, None


def _spool_call(
    spool: Spool, record: dict[str, Any], request_spooled: bool, big: bool = False
) -> None:
    if request_spooled:
        record = {k: v for k, v in record.items() if k != "request"}
    spool.append(record, in_pieces=big)
