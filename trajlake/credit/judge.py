"""Retrospective LLM judge as a value source, with every prompt and answer cached in `calls`.

The judge sees a whole trajectory and its outcome and, at a few key turns, names P(success)
(`prompt="default"`, Orchard's retrospective value) or scores the criteria of a rubric
(`prompt="rubric"`, value = the weighted mean of the scores); the rest is linearly interpolated.

Shaped around the cache: a question's identity (`cache_key`) is fixed before anything is sent,
so a rerun asks only what the lake has no usable answer for, and every answer is one commit.
Requests go through the official `openai` SDK (`_judge_client`, the extra `judge`), imported
only when a judge is built.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trajlake.credit._judge_client import JudgeClient, require_sdk
from trajlake.credit._judge_prompt import (
    PROMPT_VERSION,
    TurnContext,
    build_messages,
    interpolate,
    outcome_broadcast,
    parse_estimates,
    response_text,
)
from trajlake.credit._judge_rubric import (
    DEFAULT_RUBRIC,
    Criterion,
    Rubric,
    build_rubric_messages,
    load_rubric,
    parse_rubric_answer,
)
from trajlake.credit._types import TrajectoryTurns
from trajlake.errors import JudgeError
from trajlake.query import sql
from trajlake.records import rows_for_table

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

__all__ = [
    "DEFAULT_RUBRIC",
    "Criterion",
    "JudgeError",
    "JudgeReport",
    "JudgeValues",
    "Rubric",
    "cache_key",
    "load_rubric",
]

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"
PURPOSE = "credit-judge"


@dataclass
class JudgeReport:
    """What one `values()` call did."""

    trajectories: int = 0
    """Trajectories given values (those with an outcome)."""
    skipped: list[str] = field(default_factory=list)
    """Trajectories without an outcome, left out."""
    cache_hits: int = 0
    requests: int = 0
    """HTTP requests sent (retries included)."""
    fallbacks: list[str] = field(default_factory=list)
    """Trajectories whose judge answer was unusable: values are the outcome broadcast."""
    unusable: dict[str, str] = field(default_factory=dict)
    """Why each fallback's last answer was unusable, by trajectory id."""
    scores: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    """Rubric prompt only: criterion scores at the key points, by trajectory id."""
    failed: list[str] = field(default_factory=list)
    """Trajectories whose requests failed (HTTP/transport): outcome broadcast, not cached."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    snapshot_id: int | None = None
    """Snapshot holding the new `calls` rows (None when nothing new was stored)."""


def cache_key(
    model: str, messages: Sequence[Mapping[str, str]], prompt_version: str = PROMPT_VERSION
) -> str:
    """sha256 over (model, prompt, prompt version): the identity of a judge question."""
    payload = json.dumps([model, list(messages), prompt_version], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class _Outcome:
    values: list[float]
    calls: list[dict[str, Any]]
    requests: int = 0
    cache_hit: bool = False
    fallback: bool = False
    failed: bool = False
    error: str | None = None
    """Why the last answer was unusable."""
    scores: dict[int, dict[str, float]] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0


class JudgeValues:
    """Value source: a retrospective LLM judge through any OpenAI-compatible endpoint.

    Every request and response is stored in the lake's `calls` table, keyed by
    `attrs.cache_key` (model, prompt, sampling parameters and prompt version); a repeated
    question is answered from the lake without a request.
    """

    def __init__(
        self,
        lake: LakeStore,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        max_chars: int = 24_000,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        concurrency: int = 4,
        observations: bool = True,
        on_error: Literal["fallback", "raise"] = "fallback",
        extra_body: Mapping[str, Any] | None = None,
        prompt: Literal["default", "rubric"] | None = None,
        rubric: str | Path | Mapping[str, Any] | Rubric | None = None,
        at: SnapshotRef = None,
    ) -> None:
        """Configure the judge.

        Args:
            lake: lake whose `calls` table caches the judge's questions and answers.
            base_url: endpoint root, e.g. `http://localhost:8000` or `https://api.openai.com`
                (a trailing `/v1` is accepted).
            model: model name sent in each request.
            api_key: bearer token; defaults to env `TRAJLAKE_JUDGE_API_KEY`, then `OPENAI_API_KEY`.
            temperature: sampling temperature (0 for repeatable answers).
            max_tokens: completion budget of each answer.
            max_chars: character budget of the rendered trajectory (long turns cut in the middle).
            timeout: seconds per HTTP request.
            max_retries: retries on 429/5xx/transport errors, with exponential backoff.
            backoff_s: first backoff delay; doubles per retry (a Retry-After header wins).
            concurrency: parallel requests.
            observations: show the task statement and tool observations read from the lake.
            on_error: after exhausted retries, fall back to the outcome broadcast or raise.
            extra_body: further request fields (e.g. `{"seed": 0}`), part of the cache key.
            prompt: `default` (P(success) at key turns) or `rubric` (criterion scores at key
                turns; the default when `rubric` is given).
            rubric: the rubric prompt's criteria: a `.json`/`.yaml` file, a mapping or a
                `Rubric` (default: `DEFAULT_RUBRIC`, seven process criteria).
            at: snapshot whose task statements and observations are shown.
        """
        if prompt is None:
            prompt = "rubric" if rubric is not None else "default"
        if prompt not in ("default", "rubric"):
            raise ValueError(f"prompt must be 'default' or 'rubric', got {prompt!r}")
        if rubric is not None and prompt != "rubric":
            raise ValueError("rubric= is used by the rubric prompt; pass prompt='rubric'")
        self.prompt = prompt
        self.rubric = load_rubric(rubric) if prompt == "rubric" else None
        self.prompt_version = self.rubric.version if self.rubric else PROMPT_VERSION
        self.name = "judge:rubric" if self.rubric else "judge"
        self.at = at
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        require_sdk()  # fail at configuration, not at the first request
        self.lake = lake
        root = base_url.rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        self.api_root = root + "/v1"
        """The SDK's `base_url` (it appends `/chat/completions`)."""
        self.url = root + ENDPOINT
        self.model = model
        self.api_key = (
            api_key or os.environ.get("TRAJLAKE_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
        )
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self.observations = observations
        self.on_error = on_error
        self.extra_body = dict(extra_body or {})
        self.last_report = JudgeReport()

    # Public API -------------------------------------------------------------------------------

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """V(s_0) … V(s_T) per trajectory with an outcome; new calls go into one snapshot."""
        report = JudgeReport()
        todo = [t for t in trajectories if t.outcome is not None]
        report.skipped = [t.trajectory_id for t in trajectories if t.outcome is None]
        report.trajectories = len(todo)
        contexts = self._contexts(todo) if self.observations else {}
        bodies = {
            t.trajectory_id: self.request_body(t, contexts.get((t.trajectory_id, t.thread)))
            for t in todo
        }
        keys = {
            tid: cache_key(self.model, self._keyed(body), self.prompt_version)
            for tid, body in bodies.items()
        }
        cached = self._cached_responses(set(keys.values()))
        lock = threading.Lock()
        results: dict[str, _Outcome] = {}

        def work(traj: TrajectoryTurns, client: JudgeClient) -> None:
            tid = traj.trajectory_id
            out = self._judge(traj, bodies[tid], keys[tid], cached.get(keys[tid], []), client)
            with lock:
                results[tid] = out

        with self._client() as client, ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            for future in [pool.submit(work, t, client) for t in todo if t.turns]:
                future.result()
        values: dict[str, list[float]] = {}
        new_calls: list[dict[str, Any]] = []
        for traj in todo:
            tid, outcome = traj.trajectory_id, float(traj.outcome or 0.0)
            if not traj.turns:
                values[tid] = [outcome]
                continue
            out = results[tid]
            values[tid] = out.values
            new_calls.extend(out.calls)
            report.requests += out.requests
            report.cache_hits += out.cache_hit
            report.prompt_tokens += out.prompt_tokens
            report.completion_tokens += out.completion_tokens
            if out.scores:
                report.scores[tid] = out.scores
            if out.fallback:
                report.fallbacks.append(tid)
                report.unusable[tid] = out.error or "unusable answer"
            if out.failed:
                report.failed.append(tid)
        if new_calls:
            result = self.lake.commit(
                {"calls": rows_for_table("calls", new_calls)},
                operation="judge-cache",
                summary={"model": self.model, "calls": len(new_calls)},
            )
            report.snapshot_id = result.snapshot_id
        self.last_report = report
        if report.fallbacks:
            log.warning(
                "%s: %d of %d answers unusable, outcome broadcast for them (first: %s: %s)",
                self.name,
                len(report.fallbacks),
                len(todo),
                report.fallbacks[0],
                report.unusable[report.fallbacks[0]],
            )
        if report.failed and self.on_error == "raise":
            raise JudgeError(
                f"judge requests to {self.url} failed for {len(report.failed)} trajectories "
                f"(first: {report.failed[0]}); answered calls were stored, rerun to resume"
            )
        return values

    def request_body(
        self, traj: TrajectoryTurns, context: TurnContext | None = None
    ) -> dict[str, Any]:
        """The chat-completions request body of one trajectory's judge question."""
        messages = (
            build_rubric_messages(traj, self.rubric, context, max_chars=self.max_chars)
            if self.rubric
            else build_messages(traj, context, max_chars=self.max_chars)
        )
        return {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
        }

    def _client(self) -> JudgeClient:
        """A connection for one `values()` call (closed with it)."""
        return JudgeClient(
            self.api_root,
            self.api_key,
            timeout=self.timeout,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
        )

    # Cache ------------------------------------------------------------------------------------

    @staticmethod
    def _keyed(body: Mapping[str, Any]) -> list[dict[str, str]]:
        # Sampling params and extra fields join the prompt in the key: they change the answer.
        params = {k: v for k, v in body.items() if k not in ("model", "messages")}
        messages: list[dict[str, str]] = list(body["messages"])
        return [*messages, {"role": "params", "content": json.dumps(params, sort_keys=True)}]

    def _cached_responses(self, keys: set[str]) -> dict[str, list[Any]]:
        """Stored successful response bodies by cache key, oldest first."""
        if not keys:
            return {}
        rows = sql(
            self.lake,
            "SELECT json_extract_string(attrs, '$.cache_key') AS key, response FROM calls "
            "WHERE json_extract_string(attrs, '$.purpose') = $purpose "
            "AND json_extract_string(attrs, '$.cache_key') IN (SELECT unnest($keys::VARCHAR[])) "
            "AND status_code = 200 ORDER BY started_at, call_id",
            {"purpose": PURPOSE, "keys": sorted(keys)},
        ).to_dicts()
        out: dict[str, list[Any]] = {}
        for row in rows:
            body = json.loads(row["response"]) if row["response"] else None
            out.setdefault(row["key"], []).append(body)
        return out

    def _contexts(self, todo: Sequence[TrajectoryTurns]) -> dict[tuple[str, str], TurnContext]:
        """Task statement and observations per (trajectory, thread), read from `messages`."""
        if not todo:
            return {}
        unique = sorted({t.trajectory_id for t in todo})
        rows = sql(
            self.lake,
            "SELECT trajectory_id, thread, idx, turn, role, content FROM messages "
            "WHERE trajectory_id IN (SELECT unnest(?::VARCHAR[])) AND role IN ('user', 'tool') "
            "AND NOT is_copied_context ORDER BY trajectory_id, thread, idx",
            [unique],
            at=self.at,
        ).to_dicts()
        tasks: dict[tuple[str, str], str] = {}
        obs: dict[tuple[str, str], dict[int, list[str]]] = {}
        for row in rows:
            key, text = (row["trajectory_id"], row["thread"]), row["content"] or ""
            if row["turn"] is None:
                if row["role"] == "user" and key not in tasks:
                    tasks[key] = text
            else:
                obs.setdefault(key, {}).setdefault(int(row["turn"]), []).append(text)
        return {
            key: TurnContext(
                task=tasks.get(key),
                observations={t: "\n".join(v) for t, v in obs.get(key, {}).items()},
            )
            for key in set(tasks) | set(obs)
        }

    # One trajectory ---------------------------------------------------------------------------

    def _judge(
        self,
        traj: TrajectoryTurns,
        body: dict[str, Any],
        key: str,
        cached: list[Any],
        client: JudgeClient,
    ) -> _Outcome:
        n, outcome = len(traj.turns), float(traj.outcome or 0.0)
        error: str | None = None
        for hit in cached:
            estimates, scores, error = self._estimates(hit, n)
            if estimates is not None:
                values = interpolate(estimates, n, outcome)
                return _Outcome(values, [], cache_hit=True, scores=scores)
        if cached:  # answered before, unusably every time: the same fallback, no new request
            values = outcome_broadcast(n, outcome)
            return _Outcome(values, [], cache_hit=True, fallback=True, error=error)
        out = _Outcome(outcome_broadcast(n, outcome), [])
        for attempt in range(2):  # an unusable answer is asked again once
            row = self._call(traj, body, key, attempt, client)
            out.requests += row["attrs"]["attempts"]
            out.calls.append(row)
            out.prompt_tokens += row["prompt_tokens"] or 0
            out.completion_tokens += row["completion_tokens"] or 0
            if row["status_code"] != 200:
                out.failed = True
                log.warning("judge failed for %s: %s", traj.trajectory_id, row["error"])
                return out
            estimates, out.scores, out.error = self._estimates(row["response"], n)
            if estimates is not None:
                out.values = interpolate(estimates, n, outcome)
                return out
            row["attrs"]["parse_error"] = out.error
            log.info(
                "unusable judge answer for %s (attempt %d): %s",
                traj.trajectory_id,
                attempt + 1,
                out.error,
            )
        out.fallback = True
        log.warning("judge answers for %s unusable; outcome broadcast", traj.trajectory_id)
        return out

    def _estimates(
        self, body: Any, n_turns: int
    ) -> tuple[dict[int, float] | None, dict[int, dict[str, float]], str | None]:
        """(value per key point, rubric scores per key point, why unusable) of one answer."""
        text = response_text(body)
        if text is None:
            return None, {}, "the response has no assistant message text"
        if self.rubric is None:
            estimates = parse_estimates(text, n_turns)
            if estimates is None:
                return None, {}, f'no "estimates" with a numeric value at a point in 0..{n_turns}'
            return estimates, {}, None
        answer = parse_rubric_answer(text, n_turns, self.rubric)
        if answer.error is not None:
            return None, {}, answer.error
        rubric = self.rubric
        return {t: rubric.aggregate(s) for t, s in answer.scores.items()}, answer.scores, None

    def _call(
        self, traj: TrajectoryTurns, body: dict[str, Any], key: str, seq: int, client: JudgeClient
    ) -> dict[str, Any]:
        """Ask the endpoint (with retries); the `calls` row of the last attempt."""
        answer = client.ask(body)
        usage = answer.response.get("usage") if answer.response is not None else None
        usage = usage if isinstance(usage, dict) else {}
        return {
            "call_id": uuid.uuid4().hex,
            "trajectory_id": traj.trajectory_id,
            "thread": traj.thread,
            "seq": seq,
            "dialect": "chat",
            "endpoint": ENDPOINT,
            "model": self.model,
            "request_params": body,
            "response": answer.response,
            "stream": False,
            "status_code": answer.status,
            "error": answer.error,
            "started_at": answer.started,
            "latency_ms": answer.latency_ms,
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "attrs": {
                "purpose": PURPOSE,
                "cache_key": key,
                "prompt_version": self.prompt_version,
                "attempts": answer.requests,
                "outcome": traj.outcome,
            },
        }
