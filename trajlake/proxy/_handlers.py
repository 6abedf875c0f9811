"""The recording proxy's route handlers: auth, health, outcome and finish, forwarded model calls.

Rollouts: a call names its rollout by the path prefix `/rollouts/{id}/v1/...` or the header
`X-Trajlake-Rollout`; a call naming none is a one-call rollout of its own, id
`auto-<run id>-<proxy start>-<n>`, finished (queued for commit) as soon as it is answered.
Auth: with a token, proxy clients send `X-Trajlake-Token: <token>`; `Authorization` and
`x-api-key` belong to the upstream, are forwarded unchanged and never stored.

Kept apart from `server`, which builds the application from them and runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, get_args

from trajlake.proxy._forward import (
    Call,
    Forwarder,
    decode_body,
    header_meta,
    json_copy,
    json_error,
)
from trajlake.proxy.dialects import ENDPOINTS
from trajlake.proxy.recorder import CallTicket, Recorder
from trajlake.proxy.spool import SpoolError
from trajlake.schema import Status

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler

__all__ = ["ROLLOUT_HEADER", "TOKEN_HEADER", "Handlers"]

log = logging.getLogger("trajlake.proxy.server")  # its records, under the server's name

TOKEN_HEADER = "X-Trajlake-Token"
ROLLOUT_HEADER = "X-Trajlake-Rollout"
_OPEN_PATHS = frozenset({"/health"})
_STATUSES = frozenset(get_args(Status)) | {"aborted"}  # aborted is stored as error
_OUTCOME_KEYS = ("resolved", "reward", "rewards", "details")


class Handlers:
    """The proxy's route handlers, bound to one upstream, recorder and HTTP client session."""

    def __init__(
        self,
        upstream: str,
        recorder: Recorder,
        token: str | None,
        default_meta: Mapping[str, Any],
        timeout_s: float,
        finish_wait_s: float,
    ) -> None:
        self.recorder, self.token = recorder, token
        self.default_meta = dict(default_meta)
        self.finish_wait_s = finish_wait_s
        self.forwarder = Forwarder(upstream, timeout_s, self._record)

    @property
    def middlewares(self) -> list[Any]:
        from aiohttp import web

        @web.middleware
        async def proxy_token(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self.token is not None and request.path not in _OPEN_PATHS:
                # Constant-time compare: the token must not leak through response timing.
                given = request.headers.get(TOKEN_HEADER, "").encode()
                if not hmac.compare_digest(given, self.token.encode()):
                    return json_error(401, "unauthorized", f"missing or wrong {TOKEN_HEADER}")
            return await handler(request)

        return [proxy_token]

    async def health(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response({"status": "ok", **self.recorder.stats})

    async def housekeeping(self, app: web.Application) -> AsyncIterator[None]:
        """Runs `Recorder.tick` every few seconds (idle rollouts, spool rewrite) while serving."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.recorder.tick_seconds)
                try:
                    self.recorder.tick()
                except Exception:  # housekeeping never stops the proxy
                    log.exception("proxy housekeeping failed")

        task = asyncio.create_task(loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _refuse_finished(self, rollout_id: str) -> web.Response | None:
        if not self.recorder.is_finished(rollout_id) or self.recorder.has_calls(rollout_id):
            return None
        message = f"rollout {rollout_id!r} is finished: use a new id for the next rollout"
        return json_error(409, "rollout_finished", message)

    async def outcome(self, request: web.Request) -> web.Response:
        from aiohttp import web

        rollout_id = request.match_info["rollout_id"]
        body = await _admin_body(request)
        if isinstance(body, web.Response):
            return body
        problem = _outcome_problem(body)
        if problem:
            return json_error(400, "invalid_request", problem)
        outcome: dict[str, Any] = {k: v for k, v in body.items() if k in _OUTCOME_KEYS}
        refused = self._refuse_finished(rollout_id)
        if refused is not None:
            return refused
        await self.recorder.settled(rollout_id)  # spooled after the calls recorded so far
        try:
            self.recorder.set_outcome(rollout_id, outcome)
        except SpoolError as e:
            return _not_recorded("outcome", e)
        return web.json_response({"rollout_id": rollout_id, "outcome": outcome})

    async def finish(self, request: web.Request) -> web.Response:
        from aiohttp import web

        rollout_id = request.match_info["rollout_id"]
        body = await _admin_body(request)
        if isinstance(body, web.Response):
            return body
        status = body.get("status")
        if status is not None and status not in _STATUSES:
            allowed = ", ".join(sorted(_STATUSES))
            return json_error(400, "invalid_request", f"status must be one of {allowed}")
        # Calls still in flight (a disconnect not noticed yet) belong to the rollout too.
        waited = 0.0
        while self.recorder.inflight(rollout_id) and waited < self.finish_wait_s:
            await asyncio.sleep(0.01)
            waited += 0.01
        await self.recorder.settled(rollout_id)  # its calls' records are spooled first
        refused = self._refuse_finished(rollout_id)
        if refused is not None:
            return refused
        try:
            calls = self.recorder.finish(rollout_id, status)
        except SpoolError as e:  # still open: the finish can be sent again
            return _not_recorded("finish", e)
        except KeyError:
            return json_error(404, "not_found", f"rollout {rollout_id!r} has no recorded calls")
        return web.json_response({"rollout_id": rollout_id, "calls": calls, "queued": True})

    # ------------------------------------------------------------------ forwarding

    async def forward(self, request: web.Request) -> web.StreamResponse:
        path = "/v1/" + request.match_info["tail"]
        dialect = ENDPOINTS.get(path)
        raw = await request.read()
        if dialect is None or request.method != "POST":
            return await self.forwarder.passthrough(request, path, raw)
        rollout_id = request.match_info.get("rollout_id") or request.headers.get(ROLLOUT_HEADER)
        try:
            meta = header_meta(request.headers, self.default_meta)
        except ValueError as e:
            return json_error(400, "invalid_request", str(e))
        auto = not rollout_id
        rid = self.recorder.auto_rollout_id() if auto else str(rollout_id)
        if self.recorder.is_finished(rid):
            message = f"rollout {rid!r} is finished: send the next rollout's calls under a new id"
            return json_error(409, "rollout_finished", message)
        try:  # the request is spooled first: a failing spool refuses before the upstream bills
            ticket, body, stream = await self._begin(request, rid, meta, dialect, path, raw)
        except SpoolError as e:
            return _not_recorded("call", e)
        call = Call(ticket, dialect, path, body, stream, size=len(raw))
        try:
            return await self.forwarder.model_call(request, call, raw)
        except SpoolError as e:  # answered by the upstream, but not durable: never answered
            call.failed = True
            return _not_recorded("call", e)
        finally:
            if not call.recorded:  # cancelled (server shutdown) or an unexpected error
                call.recorded, call.failed = True, True
                with contextlib.suppress(SpoolError):
                    await self._record(
                        call, None, None, "the proxy stopped before the call completed"
                    )
            if auto and self.recorder.has_calls(rid):
                try:
                    self.recorder.finish(rid, "error" if call.failed else "completed")
                except SpoolError as e:  # stays open; the idle close commits it later
                    log.error("cannot finish %s: %s", rid, e)

    async def _begin(
        self,
        request: web.Request,
        rid: str,
        meta: Mapping[str, Any],
        dialect: str,
        path: str,
        raw: bytes,
    ) -> tuple[CallTicket, Any, bool]:
        """Spool the request (raises `SpoolError`): its ticket, recorded copy and stream flag.

        A big one is not parsed here (one `json.loads` of 16 MiB holds the loop for tens of
        ms): its decoded bytes go to the recording process, which says whether it streams.
        """
        encoding = request.headers.get("Content-Encoding")
        plain = _decoded(raw, encoding) if self.recorder.in_process(len(raw)) else None
        if plain is not None:
            ticket, spooled = await self.recorder.begin_big_call_async(
                rid, meta, body=plain, dialect=dialect, endpoint=path
            )
            return ticket, spooled, spooled.stream
        body, _ = json_copy(raw, encoding)
        stream = isinstance(body, dict) and bool(body.get("stream"))
        ticket = await self.recorder.begin_call_async(
            rid,
            meta,
            request=body,
            dialect=dialect,
            endpoint=path,
            stream=stream,
            size=len(raw),
        )
        return ticket, body, stream

    async def _record(
        self, call: Call, response: Any, status: int | None, error: str | None
    ) -> None:
        await self.recorder.end_call_async(
            call.ticket,
            dialect=call.dialect,
            endpoint=call.endpoint,
            stream=call.stream,
            request=call.request,
            response=response,
            status_code=status,
            error=error,
            size=call.size + call.response_bytes,
        )


def _decoded(raw: bytes, encoding: str | None) -> bytes | None:
    """The body decoded (None if it cannot be: then `json_copy` says why, as for any call).

    Raises:
        BodyTooLarge: Decoded, it would exceed the decoded-size limit.
    """
    try:
        return decode_body(raw, encoding)
    except ValueError:
        return None


def _not_recorded(what: str, error: SpoolError) -> web.Response:
    """503 for a call, outcome or finish the proxy cannot make durable (never answered)."""
    message = f"the proxy could not record the {what}, so it was not answered: {error}"
    return json_error(503, "proxy_not_recording", message)


async def _admin_body(request: web.Request) -> dict[str, Any] | web.Response:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        return json_error(400, "invalid_request", f"the body is not valid JSON: {e}")
    if not isinstance(body, dict):
        return json_error(400, "invalid_request", "the body must be a JSON object")
    return body


def _outcome_problem(body: Mapping[str, Any]) -> str | None:
    resolved, reward = body.get("resolved"), body.get("reward")
    if resolved is not None and not isinstance(resolved, bool):
        return "resolved must be true, false or null"
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        return "reward must be a number or null"
    rewards = body.get("rewards")
    if rewards is not None and not (
        isinstance(rewards, dict)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rewards.values())
    ):
        return "rewards must be an object of numbers"
    if body.get("details") is not None and not isinstance(body["details"], dict):
        return "details must be a JSON object"
    unknown = set(body) - set(_OUTCOME_KEYS)
    return f"unknown field(s): {', '.join(sorted(unknown))}" if unknown else None
