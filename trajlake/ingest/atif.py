"""Harbor ATIF v1.x (`trajectory.json`): `{schema_version, session_id, agent, steps, ...}`.

Steps map to messages: `system`/`user` steps to system/user messages, an `agent` step to one
assistant message (message, `reasoning_content`, `tool_calls`, `metrics` token counts and
token ids) followed by one `tool` message per `observation.results` entry (`source_call_id` →
`tool_call_id`; results of actions without a call id are tool messages without one). A system
step with an empty message only carries its observation. `final_metrics` totals are used only
when no step has metrics; `prompt_token_ids` (the whole prompt, every step) is not stored.

Files written by `trajlake export atif` carry the trajectory's own fields under
`extra.trajlake` (id, task, outcome, tool error flags …); they are restored, so an export
re-imports as the same trajectory. A `.jsonl` file with one ATIF object per line is read too.
In Harbor the reward lives outside the trajectory (`result.json`): a `trajectory.json` inside a
Harbor trial folder gets its task, run, timing, status and outcome from the trial's files, and
its native session is compared with it (see `harbor`); plain ATIF has no outcome.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bounded,
    iter_json_lines,
    parse_document,
    stable_id,
    to_parsed,
)
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._sources import SourceFile
from trajlake.ingest.harbor import apply_trial, read_trial, trial_folder
from trajlake.schema import CanonicalTrajectory
from trajlake.wire.parts import content_fields
from trajlake.wire.values import as_number, drop_none, json_text, mapping, parse_time

TRAJLAKE_EXTRA = "trajlake"
"""Key of `extra` (root and step) holding what trajlake's exporter has no ATIF field for."""
RAW_ARGUMENTS = "_raw_arguments"
"""ATIF arguments must be an object: non-JSON-object arguments travel as `{RAW_ARGUMENTS: text}`."""

_VERSION = re.compile(r"^ATIF-v1\.\d+$")
_HEAD = re.compile(rb'\s*\{\s*"schema_version"\s*:\s*"ATIF-v\d')
_RESTORED = frozenset(
    {"trajectory_id", "task_id", "task_source", "harness", "harness_version", "policy_model"}
    | {"generation", "run_id", "stage", "group_id", "attempt", "parent_trajectory_id"}
    | {"branch_turn", "is_subagent", "started_at", "ended_at", "status", "exit_reason"}
    | {"resolved", "reward", "rewards", "outcome_source", "final_output", "cost_usd", "tools"}
    | {"attrs"}
)
"""Trajectory fields an exported file restores from `extra.trajlake`."""


class AtifAdapter:
    """Reads Harbor ATIF trajectories (one JSON object per file, or one per JSONL line)."""

    name: ClassVar[str] = "atif"
    description: ClassVar[str] = (
        "trajectory.json — Harbor ATIF v1.x (Agent Trajectory Interchange Format); "
        "also `trajlake export atif` output"
    )

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure when the object's own `schema_version` (not a nested one) says ATIF."""
        if _HEAD.match(head):
            return 1.0  # Harbor and trajlake write schema_version first
        first = head.lstrip().partition(b"\n")[0]
        for candidate in (first, head):
            try:
                obj = json.loads(candidate)
            except ValueError:
                continue
            version = obj.get("schema_version") if isinstance(obj, dict) else None
            return 1.0 if isinstance(version, str) and version.startswith("ATIF-v") else 0.0
        return 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory per file (or per line of an ATIF JSONL file)."""
        first = stream.readline()
        try:
            head = json.loads(first) if first.strip() else None
        except ValueError:
            head = None
        if isinstance(head, dict) and "schema_version" in head:
            yield _parsed(head, first, 1, 0)
            for line, offset, raw, value in iter_json_lines(stream):
                # Positions count from after the first line, which was read to detect JSONL.
                if isinstance(value, BadRecord):
                    value.line, value.offset = line + 1, offset + len(first)
                    yield value
                else:
                    yield _parsed(value, raw, line + 1, offset + len(first))
            return
        document = parse_document(first + stream.read())
        if isinstance(document, BadRecord):
            yield document
            return
        parsed = _parsed(document, None, None, 0)
        if isinstance(parsed, ParsedTrajectory) and not _ours(document):
            _with_trial(source, parsed.record)
        yield parsed


def _with_trial(source: SourceFile, record: CanonicalTrajectory) -> None:
    """A Harbor trial's `agent/trajectory.json`: its task, run, outcome from the trial's files."""
    if source.storage_options:
        return  # remote trial folders need their options to be listed; read as plain ATIF
    found = trial_folder(source.uri)
    if found is not None:
        apply_trial(record, read_trial(*found))
        finish_model_fields(record)


def _parsed(value: Any, raw: bytes | None, line: int | None, offset: int) -> Parsed:
    def finish(record: CanonicalTrajectory) -> CanonicalTrajectory:
        # trajlake's own exports restore their fields as they were
        return record if _ours(value) else finish_model_fields(record)

    source = functools.partial(_dumped, value) if raw is None else raw
    build = functools.partial(_record, value)
    return to_parsed(build, line=line, offset=offset, raw=source, finish=finish)


def _dumped(value: Any) -> tuple[bytes, int]:
    """A whole-file document re-serialised for quarantine (bounded) and its size."""
    return bounded(json.dumps(value, default=str).encode())


def _arguments(value: Any) -> str | None:
    if isinstance(value, Mapping) and set(value) == {RAW_ARGUMENTS}:
        return str(value[RAW_ARGUMENTS])
    return json_text(value)


def _ours(holder: Mapping[str, Any]) -> dict[str, Any]:
    extra = holder.get("extra")
    found = extra.get(TRAJLAKE_EXTRA) if isinstance(extra, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {}


def _other_extra(holder: Mapping[str, Any]) -> dict[str, Any] | None:
    extra = holder.get("extra")
    if not isinstance(extra, Mapping):
        return None
    return {k: v for k, v in extra.items() if k != TRAJLAKE_EXTRA} or None


def _agent_message(step: Mapping[str, Any], default_model: Any) -> dict[str, Any]:
    content, parts, part_reasoning = content_fields(step.get("message"))
    metrics = mapping(step.get("metrics"))
    metric_extra = mapping(metrics.get("extra"))
    types = _ours(step).get("tool_call_types") or []
    texts = _ours(step).get("tool_call_arguments") or []
    calls = []
    for i, call in enumerate(step.get("tool_calls") or ()):
        if not isinstance(call, Mapping):
            raise ValueError(f"step {step.get('step_id')}: tool call is not an object")
        kind = types[i] if i < len(types) else None
        text = texts[i] if i < len(texts) and isinstance(texts[i], str) else None
        calls.append(
            drop_none(
                {
                    "id": call.get("tool_call_id"),
                    "name": call.get("function_name"),
                    "arguments": text if text is not None else _arguments(call.get("arguments")),
                    "type": kind,
                }
            )
        )
    attrs = {
        "step_id": step.get("step_id"),
        "reasoning_effort": step.get("reasoning_effort"),
        "cost_usd": metrics.get("cost_usd"),
        "metrics_extra": {k: v for k, v in metric_extra.items() if k != "reasoning_tokens"} or None,
        "extra": _other_extra(step),
    }
    reasoning_tokens = metric_extra.get("reasoning_tokens")
    return drop_none(
        {
            "role": "assistant",
            "content": content,
            "parts": parts,
            "reasoning": step.get("reasoning_content") or part_reasoning,
            "tool_calls": calls or None,
            "model": step.get("model_name") or default_model,
            "prompt_tokens": metrics.get("prompt_tokens"),
            "completion_tokens": metrics.get("completion_tokens"),
            "cached_tokens": metrics.get("cached_tokens"),
            "reasoning_tokens": reasoning_tokens if isinstance(reasoning_tokens, int) else None,
            "token_ids": metrics.get("completion_token_ids"),
            "logprobs": metrics.get("logprobs"),
            "timestamp": parse_time(step.get("timestamp")),
            "attrs": drop_none(attrs) or None,
        }
    )


def _results(step: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The step's observation results as tool messages, with the exporter's flags if any."""
    observation = step.get("observation")
    results = observation.get("results") if isinstance(observation, Mapping) else None
    flags = _ours(step).get("results") or []
    out = []
    for i, result in enumerate(results or ()):
        if not isinstance(result, Mapping):
            raise ValueError(f"step {step.get('step_id')}: observation result is not an object")
        content, parts, _ = content_fields(result.get("content"))
        call_id = result.get("source_call_id")
        flag = flags[i] if i < len(flags) and isinstance(flags[i], Mapping) else {}
        ref = result.get("subagent_trajectory_ref")
        out.append(
            drop_none(
                {
                    "role": "tool",
                    "content": content,
                    "parts": parts,
                    "tool_call_id": call_id,
                    "name": flag.get("name") or (names.get(call_id) if call_id else None),
                    "is_error": flag.get("is_error"),
                    "exit_code": flag.get("exit_code"),
                    # Observations carry no time of their own (the step's is the agent's).
                    "timestamp": parse_time(flag.get("timestamp")),
                    "attrs": {"subagent_trajectory_ref": ref} if ref else None,
                }
            )
        )
    return out


def _step_messages(step: Any, default_model: Any, names: dict[str, str]) -> list[dict[str, Any]]:
    if not isinstance(step, Mapping):
        raise TypeError(f"expected a step object, got {type(step).__name__}")
    source = step.get("source")
    if source == "agent":
        message = _agent_message(step, default_model)
        for call in message.get("tool_calls") or ():
            if call.get("id") and call.get("name"):
                names[call["id"]] = call["name"]
        return [message, *_results(step, names)]
    if source not in ("user", "system"):
        raise ValueError(f"step {step.get('step_id')}: unknown source {source!r}")
    content, parts, _ = content_fields(step.get("message"))
    out = []
    if source == "user" or content or parts or not step.get("observation"):
        attrs = drop_none({"step_id": step.get("step_id"), "extra": _other_extra(step)})
        out.append(
            drop_none(
                {
                    "role": source,
                    "content": content,
                    "parts": parts,
                    "timestamp": parse_time(step.get("timestamp")),
                    "attrs": attrs or None,
                }
            )
        )
    return out + _results(step, names)


def _totals(steps: list[Any], final: Mapping[str, Any]) -> dict[str, Any]:
    """Run totals from `final_metrics`, only when no step reports its own token counts."""
    # Step counts are summed into the totals by `records.normalize`, which keeps totals that
    # are set: taking final_metrics beside step counts could store totals that disagree.
    for step in steps:
        metrics = step.get("metrics") if isinstance(step, Mapping) else None
        if isinstance(metrics, Mapping) and (
            metrics.get("prompt_tokens") is not None or metrics.get("completion_tokens") is not None
        ):
            return {}
    extra = mapping(final.get("extra"))
    return drop_none(
        {
            "prompt_tokens": final.get("total_prompt_tokens"),
            "completion_tokens": final.get("total_completion_tokens"),
            "total_tokens": extra.get("total_tokens"),
        }
    )


def _first_number(total: float | None, parts: list[float]) -> float | None:
    if total is not None:
        return total
    return sum(parts) if parts else None


def _record(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise TypeError(f"expected an ATIF trajectory object, got {type(doc).__name__}")
    version = doc.get("schema_version")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise ValueError(f"field 'schema_version': unsupported ATIF version {version!r}")
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise ValueError("field 'steps': expected a list of steps")
    agent = mapping(doc.get("agent"))
    final = mapping(doc.get("final_metrics"))
    names: dict[str, str] = {}
    ours = _ours(doc)
    # ATIF lets agent steps inherit the agent's model; trajlake's own exports say it per step.
    default_model = None if ours else agent.get("model_name")
    messages = [m for s in steps for m in _step_messages(s, default_model, names)]
    session = doc.get("session_id")
    stamps = [m["timestamp"] for m in messages if m.get("timestamp")]
    step_costs = [
        as_number(s["metrics"].get("cost_usd"))
        for s in steps
        if isinstance(s, Mapping) and isinstance(s.get("metrics"), Mapping)
    ]
    costs = [c for c in step_costs if c is not None]
    attrs = {
        "session_id": session,
        # The native session of the same rollout carries this id too (Claude Code `sessionId`).
        "rollout_key": session,
        "schema_version": version,
        "notes": doc.get("notes"),
        "agent_extra": agent.get("extra") or None,
        "extra": _other_extra(doc),
        "total_steps": final.get("total_steps"),
        "total_cached_tokens": final.get("total_cached_tokens"),
    }
    # Without a session id the content is the identity: the same file ingested again adds nothing.
    ident = [session] if isinstance(session, str) and session else [json.dumps(doc, sort_keys=True)]
    record = {
        "trajectory_id": stable_id("atif", *ident),
        "harness": agent.get("name"),
        "harness_version": agent.get("version"),
        "policy_model": agent.get("model_name"),
        "started_at": min(stamps) if stamps else None,
        "ended_at": max(stamps) if stamps else None,
        "cost_usd": _first_number(as_number(final.get("total_cost_usd")), costs),
        **_totals(steps, final),
        "attrs": drop_none(attrs) or None,
        "messages": messages,
    }
    record.update({k: v for k, v in ours.items() if k in _RESTORED})
    return drop_none(record)
