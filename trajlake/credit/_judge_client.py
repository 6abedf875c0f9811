"""The judge's connection to an OpenAI-compatible endpoint: the official `openai` SDK, with
the judge's own retries.

The SDK builds the request, authenticates and tells status errors from transport errors the way
every OpenAI-compatible server (OpenAI, vLLM, SGLang, llama.cpp, LiteLLM) expects. Its own retry
loop is switched off (`max_retries=0`): the judge counts every request it sends (stored in
`calls.attrs.attempts`, reported as `JudgeReport.requests`) and backs off from `backoff_s`, a
Retry-After header winning, neither of which the SDK's internal retries let a caller see or set.
The SDK is the optional extra `judge`, imported when a client is built, never with
`trajlake.credit`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType, TracebackType
from typing import Any

from trajlake.errors import missing_extra

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Statuses worth asking again (timeouts, conflicts, rate limits, overloaded servers)."""
NO_KEY = "EMPTY"
"""Sent when no key is configured: the SDK refuses to run without one, and keyless servers
(vLLM, llama.cpp) ignore it — the placeholder their own docs use."""
MAX_DELAY_S = 60.0
_ERROR_CHARS = 500


def require_sdk() -> ModuleType:
    """The `openai` module, or the missing-extra error naming `pip install 'trajlake[judge]'`."""
    try:
        import openai
    except ImportError as e:
        raise missing_extra("openai", "judge") from e
    return openai


@dataclass(frozen=True)
class Answer:
    """The last attempt of one question: what the endpoint said, or why it said nothing."""

    status: int | None
    """HTTP status (None when no response arrived: connection error, timeout, not JSON)."""
    response: dict[str, Any] | None
    """The completion body as the server sent it (successful answers only)."""
    error: str | None
    started: datetime
    latency_ms: float
    requests: int
    """Requests sent for this question, retries included."""


class JudgeClient:
    """One SDK client shared by the judge's worker threads (the SDK's client is thread-safe)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        max_retries: int,
        backoff_s: float,
    ) -> None:
        """`base_url` is the API root including `/v1`; the rest as `JudgeValues` takes them."""
        self._sdk = require_sdk()
        self._client = self._sdk.OpenAI(
            base_url=base_url, api_key=api_key or NO_KEY, timeout=timeout, max_retries=0
        )
        self.max_retries = max_retries
        self.backoff_s = backoff_s

    def close(self) -> None:
        """Close the SDK's connection pool."""
        self._client.close()

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def ask(self, body: dict[str, Any]) -> Answer:
        """Send one chat-completions request, retrying retryable failures with backoff."""
        requests = 0
        while True:
            started, t0 = datetime.now(UTC), time.perf_counter()
            requests += 1
            status, response, error, retry_after = self._send(body)
            latency = (time.perf_counter() - t0) * 1000
            retryable = status is None or status in RETRY_STATUS
            if error is None or not retryable or requests > self.max_retries:
                return Answer(status, response, error, started, latency, requests)
            delay = self.backoff_s * 2 ** (requests - 1) * (1 + 0.1 * random.random())
            time.sleep(min(retry_after if retry_after is not None else delay, MAX_DELAY_S))

    def _send(
        self, body: dict[str, Any]
    ) -> tuple[int | None, dict[str, Any] | None, str | None, float | None]:
        """(status, response body, error, Retry-After seconds) of a single request."""
        sdk = self._sdk
        # Everything but model and messages goes as extra body fields, so the server receives
        # exactly the stored `request_params` (sampling options and the user's `extra_body`).
        extra = {k: v for k, v in body.items() if k not in ("model", "messages")}
        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model=body["model"], messages=body["messages"], extra_body=extra
            )
            completion = raw.parse()
        except sdk.APIStatusError as e:
            text = e.response.text[:_ERROR_CHARS]
            retry_after = _retry_after(e.response.headers.get("retry-after"))
            return e.status_code, None, f"HTTP {e.status_code}: {text}", retry_after
        except sdk.APIError as e:  # connection refused, timeout, a body that is not a completion
            return None, None, f"{type(e).__name__}: {e}", None
        if not isinstance(completion, sdk.BaseModel):  # a 2xx answer that is not JSON
            error = f"the answer is not a JSON completion: {str(completion)[:80]!r}"
            return None, None, error, None
        return int(raw.status_code), completion.to_dict(), None, None


def _retry_after(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None
