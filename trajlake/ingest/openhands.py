"""OpenHands rollouts: eval output, event-list arrays, file-store sessions, resolver output.

- Eval `output.jsonl`: one instance attempt per line (`instance_id`, `metadata`, `history`,
  `metrics`, `error`, `test_result`). Per-call token usage comes from `metrics.token_usages`,
  matched to the actions by response id; the trajectory totals are the harness's own
  `metrics.accumulated_token_usage`. A `test_result.report.resolved` verdict, when the SWE-bench
  evaluation merged one in, is the outcome.
- Event list (`tests/runtime/trajs/*.json`, the replay format): a JSON array of events.
- File-store session (`sessions/<id>/metadata.json` + `events/<n>.json`): `metadata.json` yields
  the trajectory and reads its sibling `events/` folder (sorted numerically); the event files
  are its companions and are not ingested alone.
- Resolver output (older serialisation): `issue` → task id `owner/repo#number`, `success` →
  resolved.

How events become messages is described in `_openhands_parts`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import posixpath
import re
from collections.abc import Callable, Iterator
from typing import IO, Any, ClassVar, cast

import fsspec
from pydantic import ValidationError

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    bounded,
    iter_json_lines,
    stable_id,
)
from trajlake.ingest._models import finish_model_fields, task_source_of
from trajlake.ingest._openhands_parts import EventConverter, EventSummary
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory
from trajlake.wire.values import parse_time

_EVENT_FILE = re.compile(r"(^|/)events/(\d+)\.json$")
# An event list opens with an event object, whose first key is one of the envelope's.
_EVENT_LIST = re.compile(rb'\[\s*\{\s*"(id|timestamp|source|message|action|observation)"\s*:')
_SESSION_KEYS = ("created_at", "last_updated_at", "llm_model", "accumulated_cost", "trigger")
# LLM settings worth keeping; the rest are endpoints and credentials (masked or not).
_LLM_FIELDS = (
    "model", "temperature", "top_p", "max_input_tokens", "max_output_tokens", "reasoning_effort",
    "native_tool_calling", "caching_prompt", "seed", "custom_llm_provider", "max_message_chars",
)  # fmt: skip
_READ_ERRORS = (ValueError, TypeError, KeyError, AttributeError)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _status(error: object, summary: EventSummary) -> tuple[str | None, str | None]:
    """(status, exit_reason) from the run's error text and how the events ended."""
    if isinstance(error, str) and error:
        low = error.lower()
        if "maximum iteration" in low or "budget" in low:
            return "truncated", error
        if "timeout" in low or "timed out" in low:
            return "timeout", error
        return "error", error
    if summary.agent_state == "error":
        return "error", "agent_state: error"
    if summary.finish is not None or summary.agent_state == "finished":
        return "completed", summary.agent_state or "finish"
    return None, summary.agent_state


def _cost(cost: object, *, priced: bool = True) -> float | None:
    """The reported cost; 0.0 with no priced call means the harness had no prices: unknown."""
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        return None
    return None if cost == 0 and not priced else float(cost)


def _final_answer(summary: EventSummary) -> str | None:
    finish = summary.finish or {}
    answer = finish.get("final_thought")
    return answer if isinstance(answer, str) and answer else None


def _with_instruction(messages: list[dict[str, Any]], instruction: object) -> None:
    """Add the task as a user message when the history never shows it (empty histories)."""
    if any(m["role"] == "user" for m in messages) or not isinstance(instruction, str):
        return
    at = sum(1 for _ in itertools.takewhile(lambda m: m["role"] == "system", messages))
    messages.insert(at, {"role": "user", "content": instruction, "attrs": {"from": "instruction"}})


def _common(summary: EventSummary, error: object) -> dict[str, Any]:
    status, exit_reason = _status(error, summary)
    return {
        "harness": "openhands",
        "harness_version": summary.system_args.get("openhands_version"),
        "policy_model": summary.model,
        "started_at": summary.started,
        "ended_at": summary.ended,
        "status": status,
        "exit_reason": exit_reason,
        "final_output": _final_answer(summary),
        "tools": summary.tools,
        "messages": summary.messages,
    }


def _event_attrs(summary: EventSummary) -> dict[str, Any]:
    attrs: dict[str, Any] = {"events": summary.events, "skipped_events": dict(summary.skipped)}
    if summary.agent_state is not None:
        attrs["agent_state"] = summary.agent_state
    if summary.system_args:
        attrs["system"] = summary.system_args
    if summary.finish is not None:
        attrs["task_completed"] = summary.finish.get("task_completed")
    return attrs


def _eval_record(obj: dict[str, Any]) -> dict[str, Any]:
    metadata, metrics = _dict(obj.get("metadata")), _dict(obj.get("metrics"))
    usages = {
        u["response_id"]: u
        for u in metrics.get("token_usages") or ()
        if isinstance(u, dict) and isinstance(u.get("response_id"), str) and u["response_id"]
    }
    latencies = {
        u["response_id"]: u["latency"]
        for u in metrics.get("response_latencies") or ()
        if isinstance(u, dict)
        and isinstance(u.get("response_id"), str)
        and isinstance(u.get("latency"), int | float)
    }
    summary = EventConverter(usages, latencies).convert(obj.get("history") or ())
    _with_instruction(summary.messages, obj.get("instruction"))
    record = _common(summary, obj.get("error"))
    llm = _dict(metadata.get("llm_config"))
    test_result, instance = _dict(obj.get("test_result")), _dict(obj.get("instance"))
    report = _dict(test_result.get("report"))
    resolved = report.get("resolved", test_result.get("resolved"))
    out_dir = metadata.get("eval_output_dir")
    task_id = obj.get("instance_id") or instance.get("instance_id")
    totals = _dict(metrics.get("accumulated_token_usage"))
    record.update(
        trajectory_id=stable_id("openhands", "eval", task_id, out_dir, metadata.get("start_time")),
        task_id=task_id,
        task_source=metadata.get("dataset") or task_source_of(task_id),
        policy_model=llm.get("model") or summary.model,
        run_id=posixpath.basename(out_dir.rstrip("/")) if isinstance(out_dir, str) else None,
        started_at=parse_time(metadata.get("start_time")) or summary.started,
        final_output=test_result.get("git_patch") or record["final_output"],
        resolved=resolved if isinstance(resolved, bool) else None,
        outcome_source="openhands-eval" if isinstance(resolved, bool) else None,
        cost_usd=_cost(metrics.get("accumulated_cost"), priced=bool(metrics.get("costs"))),
        prompt_tokens=totals.get("prompt_tokens"),
        completion_tokens=totals.get("completion_tokens"),
    )
    attrs = _event_attrs(summary)
    attrs.update({k: metadata[k] for k in _METADATA_FIELDS if metadata.get(k) is not None})
    attrs["llm_config"] = {k: llm[k] for k in _LLM_FIELDS if llm.get(k) is not None}
    attrs["instance"] = {k: v for k, v in instance.items() if k in _INSTANCE_FIELDS}
    for key in ("cache_read_tokens", "cache_write_tokens"):
        if isinstance(totals.get(key), int):
            attrs[key] = totals[key]
    if report:
        attrs["report"] = report
    record["attrs"] = attrs
    return record


_METADATA_FIELDS = (
    "agent_class", "max_iterations", "git_commit", "dataset", "data_split", "eval_output_dir",
)  # fmt: skip
_INSTANCE_FIELDS = ("instance_id", "repo", "base_commit", "version", "created_at")


def _resolver_record(obj: dict[str, Any], raw: bytes) -> dict[str, Any]:
    issue, metrics = _dict(obj.get("issue")), _dict(obj.get("metrics"))
    summary = EventConverter().convert(obj.get("history") or ())
    _with_instruction(summary.messages, obj.get("instruction"))
    record = _common(summary, obj.get("error"))
    parts = (issue.get("owner"), issue.get("repo"), issue.get("number"))
    task_id = f"{parts[0]}/{parts[1]}#{parts[2]}" if all(p is not None for p in parts) else None
    success = obj.get("success")
    attrs = _event_attrs(summary)
    attrs["issue"] = {k: issue[k] for k in ("owner", "repo", "number", "title") if k in issue}
    for key in ("issue_type", "base_commit", "comment_success", "result_explanation", "error"):
        if obj.get(key) is not None:
            attrs[key] = obj[key]
    record.update(
        # The record carries no run id: its bytes identify it.
        trajectory_id=stable_id("openhands", "resolver", hashlib.sha256(raw).hexdigest()),
        task_id=task_id,
        final_output=obj.get("git_patch") or record["final_output"],
        resolved=success if isinstance(success, bool) else None,
        outcome_source="openhands-resolver" if isinstance(success, bool) else None,
        cost_usd=_cost(metrics.get("accumulated_cost"), priced=bool(metrics.get("costs"))),
        attrs=attrs,
    )
    return record


def _event_list_record(events: list[Any], raw: bytes) -> dict[str, Any]:
    summary = EventConverter().convert(events)
    record = _common(summary, None)
    record["trajectory_id"] = stable_id("openhands", "events", hashlib.sha256(raw).hexdigest())
    record["attrs"] = _event_attrs(summary)
    return record


def _session_record(meta: dict[str, Any], events: list[Any]) -> dict[str, Any]:
    summary = EventConverter().convert(events)
    record = _common(summary, None)
    conversation = meta.get("conversation_id")
    attrs = _event_attrs(summary)
    attrs["conversation_id"] = conversation
    skip = {"conversation_id", "accumulated_cost", "llm_model", "created_at", "last_updated_at"}
    skip |= {"prompt_tokens", "completion_tokens", "total_tokens"}
    attrs.update({k: v for k, v in meta.items() if k not in skip and v not in (None, [], {})})
    record.update(
        trajectory_id=stable_id("openhands", "session", conversation),
        policy_model=meta.get("llm_model") or summary.model,
        started_at=parse_time(meta.get("created_at")) or summary.started,
        ended_at=parse_time(meta.get("last_updated_at")) or summary.ended,
        cost_usd=_cost(meta.get("accumulated_cost")),
        prompt_tokens=meta.get("prompt_tokens"),
        completion_tokens=meta.get("completion_tokens"),
        total_tokens=meta.get("total_tokens"),
        attrs=attrs,
    )
    return record


def _is_session_meta(obj: object) -> bool:
    return (
        isinstance(obj, dict) and "conversation_id" in obj and any(k in obj for k in _SESSION_KEYS)
    )


def _is_event(obj: object) -> bool:
    return (
        isinstance(obj, dict) and ("action" in obj or "observation" in obj) and "history" not in obj
    )


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


class OpenHandsAdapter:
    """Reads OpenHands eval output, event lists, file-store sessions and resolver output."""

    name: ClassVar[str] = "openhands"
    description: ClassVar[str] = (
        "output.jsonl, trajs/*.json, sessions/<id>/metadata.json — OpenHands (eval output, "
        "event lists, file-store sessions, resolver output)"
    )

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure for the four OpenHands layouts; event files of a session are left to it."""
        text = head.lstrip()
        if text.startswith(b"["):
            starts = _EVENT_LIST.match(text) is not None
            events = b'"source"' in head and (b'"action"' in head or b'"observation"' in head)
            return 0.95 if starts and events and (b'"args"' in head or b'"extras"' in head) else 0.0
        if not text.startswith(b"{"):
            return 0.0
        first = text.split(b"\n", 1)[0]
        obj = _loads(first) if len(first) < len(text) or len(head) < 65536 else None
        if obj is None and len(head) < 65536:
            obj = _loads(text)  # a whole pretty-printed metadata.json
        if _is_session_meta(obj):
            return 0.95
        if isinstance(obj, dict):
            history = obj.get("history")
            looks = isinstance(history, list) and (not history or _is_event(history[0]))
            if looks and ("instance_id" in obj or isinstance(obj.get("issue"), dict)):
                return 0.95
            return 0.0
        # A first line longer than the head: judge by the keys it starts with.
        eval_like = b'"instance_id"' in first and (
            b'"agent_class"' in first or (b'"history"' in first and b'"action"' in first)
        )
        resolver_like = b'"issue"' in first and b'"history"' in first and b'"issue_type"' in first
        return 0.9 if eval_like or resolver_like else 0.0

    def line_records(self, source: SourceFile) -> bool:
        """Eval and resolver outputs (`*.jsonl`) hold one whole record per line."""
        return source.name.endswith(".jsonl")

    def companion_of(self, source: SourceFile, all_uris: frozenset[str]) -> str | None:
        """`sessions/<id>/events/<n>.json` is read by `sessions/<id>/metadata.json`."""
        if _EVENT_FILE.search(source.uri) is None:
            return None
        folder = source.uri.rsplit("/", 2)[0]
        owner = f"{folder}/metadata.json"
        return owner if owner in all_uris else None

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """Every trajectory of the file; a bad line or event file is a BadRecord."""
        first = stream.readline()
        lead = first.lstrip()
        if lead.startswith(b"["):
            yield from self._read_event_list(first + stream.read())
            return
        obj = _loads(first)
        if obj is None and lead.strip() in (b"{", b""):
            whole = first + stream.read()
            yield from self._read_single(source, _loads(whole), whole)
            return
        if _is_session_meta(obj) or _is_event(obj):
            yield from self._read_single(source, obj, first)
            return
        # Only iteration is used, so the line chain stands in for the stream.
        lines = cast(IO[bytes], itertools.chain([first], stream))
        for line, offset, raw, value in iter_json_lines(lines):
            if isinstance(value, BadRecord):
                yield value
                continue
            yield self._line(value, raw, line, offset)

    def _line(self, value: Any, raw: bytes, line: int, offset: int) -> Parsed:
        kept, size = bounded(raw)
        where: dict[str, Any] = {"line": line, "offset": offset, "raw": kept, "raw_size": size}
        if not isinstance(value, dict) or not isinstance(value.get("history"), list):
            return BadRecord(
                "not an OpenHands eval or resolver record (no `history` list)", **where
            )
        resolver = isinstance(value.get("issue"), dict) and "instance_id" not in value
        try:
            data = _resolver_record(value, raw) if resolver else _eval_record(value)
            record = finish_model_fields(CanonicalTrajectory.model_validate(data))
        except ValidationError as e:
            return bad_from_validation(e, **where)
        except _READ_ERRORS as e:
            return BadRecord(f"cannot read the record: {type(e).__name__}: {e}", **where)
        return ParsedTrajectory(record, line=line, offset=offset)

    def _read_event_list(self, raw: bytes) -> Iterator[Parsed]:
        kept, size = bounded(raw)
        events = _loads(raw)
        if not isinstance(events, list):
            yield BadRecord("not a JSON array of OpenHands events", raw=kept, raw_size=size)
            return
        yield self._validated(lambda: _event_list_record(events, raw), kept, size)

    def _read_single(self, source: SourceFile, obj: Any, raw: bytes) -> Iterator[Parsed]:
        kept, size = bounded(raw)
        if _is_event(obj):
            yield BadRecord(
                "an OpenHands session event file: ingest the session's metadata.json instead",
                raw=kept,
                raw_size=size,
            )
            return
        if not _is_session_meta(obj):
            yield BadRecord(
                "not an OpenHands file (no events, history or conversation_id)",
                raw=kept,
                raw_size=size,
            )
            return
        events: list[Any] = []
        for name, data in _session_events(source):
            value = _loads(data)
            if isinstance(value, dict):
                events.append(value)
            else:
                raw_event, raw_size = bounded(data)
                yield BadRecord(
                    f"events/{name}: not a JSON object",
                    field=f"events/{name}",
                    raw=raw_event,
                    raw_size=raw_size,
                )
        yield self._validated(lambda: _session_record(obj, events), kept, size)

    @staticmethod
    def _validated(build: Callable[[], dict[str, Any]], kept: bytes, size: int) -> Parsed:
        try:
            record = CanonicalTrajectory.model_validate(build())
            return ParsedTrajectory(finish_model_fields(record))
        except ValidationError as e:
            return bad_from_validation(e, raw=kept, raw_size=size)
        except _READ_ERRORS as e:
            error = f"cannot read the file: {type(e).__name__}: {e}"
            return BadRecord(error, raw=kept, raw_size=size)


def _session_events(source: SourceFile) -> Iterator[tuple[str, bytes]]:
    """(file name, bytes) of `events/<n>.json` beside a session's metadata.json, in id order."""
    fs, path = fsspec.core.url_to_fs(source.uri, **(source.storage_options or {}))
    folder = posixpath.join(posixpath.dirname(path), "events")
    if not fs.isdir(folder):
        return
    numbered = []
    for entry in fs.ls(folder, detail=False):
        name = posixpath.basename(str(entry))
        stem = name.removesuffix(".json")
        if name.endswith(".json") and stem.isdigit():
            numbered.append((int(stem), name, str(entry)))
    # Decimal ids: 10.json comes after 9.json, so sort by number, not by name.
    for _, name, entry in sorted(numbered):
        with fs.open(entry, "rb") as f:
            yield name, f.read()
