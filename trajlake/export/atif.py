"""ATIF export: trajectories as Harbor ATIF v1.6 `trajectory.json` objects.

`OUT` ending in `.jsonl` (optionally `.gz`/`.zst`) gets one ATIF object per line; any other
`OUT` is a directory that gets one `<trajectory_id>.json` per trajectory (ids unsafe or too
long as file names get an escaped name with a hash) and `manifest.jsonl` (file → id).
Steps come from the main thread (other threads are counted in `notes`): system/user messages
become system/user steps, each assistant message an agent step, and tool messages the
`observation.results` of the agent step before them. What ATIF has no field for (the
trajectory's task, outcome, attrs; tool-call types; tool error flags and exit codes) travels
under `extra.trajlake`, which `trajlake ingest --format atif` restores. ATIF requires
`agent.name`/`version`, tool-call ids and object arguments: missing ones are written as
"unknown", `call-<step>-<n>` and `{"_raw_arguments": text}`.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.utils import infer_compression

from trajlake._names import FileNames, file_stem_for_id, refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.export.jsonl import ExportReport, iter_canonical
from trajlake.ingest.atif import RAW_ARGUMENTS, TRAJLAKE_EXTRA

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

SCHEMA_VERSION = "ATIF-v1.6"
UNKNOWN = "unknown"
_NOT_CARRIED = frozenset(
    {"content_hash", "n_messages", "n_turns", "n_tool_calls", "prompt_tokens"}
    | {"completion_tokens", "total_tokens", "source_format", "source_uri", "source_line"}
    | {"source_offset", "ingest_id", "ingested_at", "schema_version", "n_redactions", "messages"}
)
"""Trajectory fields not carried in `extra.trajlake`: derived, provenance, or in final_metrics."""
_AGENT_FIELDS = ("harness", "harness_version", "policy_model")
_SOURCES = {"assistant": "agent", "user": "user", "system": "system"}


def _iso(value: Any) -> str | None:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value if isinstance(value, str) else None


def _arguments(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS: text}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: text}


def _reformatted(text: str | None, arguments: dict[str, Any]) -> bool:
    if text is None:
        return False
    if set(arguments) == {RAW_ARGUMENTS}:
        return False
    return json.dumps(arguments, ensure_ascii=False) != text


def _message(m: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    """The message as ATIF text, or ATIF v1.6 content parts when it has media."""
    parts = m.get("parts")
    if not parts:
        return m.get("content") or ""
    out: list[dict[str, Any]] = []
    for part in parts:
        if part.get("type") == "text":
            out.append({"type": "text", "text": part.get("text") or ""})
        elif part.get("type") == "image":
            source = {"media_type": part.get("mime_type"), "path": part.get("uri")}
            out.append({"type": "image", "source": {k: v for k, v in source.items() if v}})
        else:  # ATIF parts are text or image: other media are named by reference in text
            out.append({"type": "text", "text": f"[{part.get('type')}: {part.get('uri')}]"})
    return out


def _agent_step(step: dict[str, Any], m: Mapping[str, Any]) -> None:
    calls = m.get("tool_calls") or []
    step["model_name"] = m.get("model")
    step["reasoning_content"] = m.get("reasoning")
    step["tool_calls"] = [
        {
            "tool_call_id": c.get("id") or f"call-{step['step_id']}-{i}",
            "function_name": c.get("name"),
            "arguments": _arguments(c.get("arguments")),
        }
        for i, c in enumerate(calls)
    ] or None
    ours: dict[str, Any] = {}
    if any(c.get("type") for c in calls):
        ours["tool_call_types"] = [c.get("type") for c in calls]
    # Argument text that the object form would not reproduce byte for byte (spacing, key
    # order, non-objects) is kept as written.
    texts = [
        c.get("arguments") if _reformatted(c.get("arguments"), t["arguments"]) else None
        for c, t in zip(calls, step["tool_calls"] or (), strict=True)
    ]
    if any(t is not None for t in texts):
        ours["tool_call_arguments"] = texts
    if ours:
        step.setdefault("extra", {})[TRAJLAKE_EXTRA] = ours
    extra = {"reasoning_tokens": m.get("reasoning_tokens")}
    metrics = {
        "prompt_tokens": m.get("prompt_tokens"),
        "completion_tokens": m.get("completion_tokens"),
        "cached_tokens": m.get("cached_tokens"),
        "completion_token_ids": m.get("token_ids"),
        "logprobs": m.get("logprobs"),
        "extra": {k: v for k, v in extra.items() if v is not None} or None,
    }
    step["metrics"] = {k: v for k, v in metrics.items() if v is not None} or None


def _add_result(steps: list[dict[str, Any]], m: Mapping[str, Any]) -> None:
    """A tool message joins the agent step before it (or a system step that only carries it)."""
    if not steps or not (steps[-1]["source"] == "agent" or steps[-1].get("_carrier")):
        steps.append({"step_id": len(steps) + 1, "source": "system", "message": "", "_carrier": 1})
        steps[-1]["timestamp"] = _iso(m.get("timestamp"))
    step = steps[-1]
    result = {"source_call_id": m.get("tool_call_id"), "content": _message(m)}
    if m.get("content") is None and not m.get("parts"):
        del result["content"]
    step.setdefault("observation", {"results": []})["results"].append(
        {k: v for k, v in result.items() if v is not None}
    )
    flags = {"name": m.get("name"), "is_error": m.get("is_error"), "exit_code": m.get("exit_code")}
    flags["timestamp"] = _iso(m.get("timestamp"))
    ours = step.setdefault("extra", {}).setdefault(TRAJLAKE_EXTRA, {})
    ours.setdefault("results", []).append({k: v for k, v in flags.items() if v is not None})


def _steps(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            _add_result(steps, m)
            continue
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "timestamp": _iso(m.get("timestamp")),
            "source": _SOURCES[m["role"]],
            "message": _message(m),
        }
        if m["role"] == "assistant":
            _agent_step(step, m)
        steps.append(step)
    for step in steps:
        step.pop("_carrier", None)
    return [{k: v for k, v in s.items() if v is not None} for s in steps]


def to_atif(trajectory: Mapping[str, Any]) -> dict[str, Any]:
    """One canonical trajectory (as `iter_canonical` yields it) as an ATIF object."""
    messages = [m for m in trajectory["messages"] if (m.get("thread") or "main") == "main"]
    others = len(trajectory["messages"]) - len(messages)
    steps = _steps(messages)
    cached = [m["cached_tokens"] for m in messages if m.get("cached_tokens") is not None]
    ours = {k: v for k, v in trajectory.items() if k not in _NOT_CARRIED and v is not None}
    ours.update({k: trajectory.get(k) for k in _AGENT_FIELDS})
    agent = {
        "name": trajectory.get("harness") or UNKNOWN,
        "version": trajectory.get("harness_version") or UNKNOWN,
        "model_name": trajectory.get("policy_model"),
    }
    final = {
        "total_prompt_tokens": trajectory.get("prompt_tokens"),
        "total_completion_tokens": trajectory.get("completion_tokens"),
        "total_cached_tokens": sum(cached) if cached else None,
        "total_cost_usd": trajectory.get("cost_usd"),
        "total_steps": len(steps),
        "extra": {"total_tokens": trajectory["total_tokens"]}
        if trajectory.get("total_tokens") is not None
        else None,
    }
    document = {
        "schema_version": SCHEMA_VERSION,
        "session_id": trajectory["trajectory_id"],
        "agent": {k: v for k, v in agent.items() if v is not None},
        "steps": steps,
        "notes": f"{others} message(s) of other threads were not exported" if others else None,
        "final_metrics": {k: v for k, v in final.items() if v is not None},
        "extra": {TRAJLAKE_EXTRA: ours},
    }
    return {k: v for k, v in document.items() if v is not None}


def _dumps(obj: Any, *, indent: int | None) -> str:
    def default(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.isoformat()
        raise TypeError(f"cannot serialise {type(value).__name__}")

    return json.dumps(obj, ensure_ascii=False, indent=indent, default=default)


def _is_jsonl(out: str) -> bool:
    compression = infer_compression(out)
    base = out.rsplit(".", 1)[0] if compression else out
    return base.endswith(".jsonl")


MANIFEST = "manifest.jsonl"
"""Written beside the files of a directory export: one `{"file", "trajectory_id"}` per line."""


def file_name(trajectory_id: str) -> str:
    """`<stem>.json`: the id itself when it is a short safe name, else an escaped stem with a
    hash of the exact id (`trajlake._names.file_stem_for_id`), so no two ids share a file."""
    return file_stem_for_id(trajectory_id) + ".json"


def _documents(
    lake: LakeStore, at: int, where: str | None, progress: Progress
) -> Iterator[tuple[str, dict[str, Any], int]]:
    """(trajectory id, ATIF document, messages exported) per selected trajectory."""
    for obj in iter_canonical(lake, at=at, where=where):
        main = sum(1 for m in obj["messages"] if (m.get("thread") or "main") == "main")
        yield obj["trajectory_id"], to_atif(obj), main
        progress.advance(1)


def _write_directory(
    out: str, documents: Iterator[tuple[str, dict[str, Any], int]]
) -> tuple[int, int, int]:
    """One file per trajectory, then the manifest mapping each file back to its exact id
    (escaped and hashed names do not read back as the id). Returns (files, messages, bytes)."""
    fs, root = fsspec.core.url_to_fs(out)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    names = FileNames(".json")
    manifest: list[str] = []
    count = messages = written = 0
    for trajectory_id, document, n in documents:
        name = names.assign(trajectory_id)
        text = _dumps(document, indent=2) + "\n"
        with fs.open(f"{root}/{name}", "w") as f:
            f.write(text)
        manifest.append(_dumps({"file": name, "trajectory_id": trajectory_id}, indent=None))
        count, messages, written = count + 1, messages + n, written + len(text.encode())
    with fs.open(f"{root}/{MANIFEST}", "w") as f:
        f.write("".join(line + "\n" for line in manifest))
    return count, messages, written


def export_atif(
    lake: LakeStore,
    out: str,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    progress: Progress | None = None,
) -> ExportReport:
    """Write the trajectories selected by `where` at snapshot `at` as ATIF to `out`.

    Args:
        out: a `.jsonl` path/URL (one ATIF object per line; `.gz`/`.zst` compress), or a
            directory that receives one `<trajectory_id>.json` per trajectory (see
            `file_name`) and `manifest.jsonl` mapping each file to its trajectory id.
        at, where: snapshot and SQL condition on `trajectories`, as for `export_jsonl`.
        progress: receives one unit per trajectory.

    Raises:
        OutputInsideLake: `out` lies inside the lake (checked before anything is written).
    """
    refuse_inside_lake(out, lake.location.uri, what="export")
    progress = progress or NullProgress()
    start = time.perf_counter()
    snapshot = lake.snapshot(at)
    documents = _documents(lake, snapshot.snapshot_id, where, progress)
    count = messages = written = 0
    progress.start("export", None)
    if _is_jsonl(out):
        with fsspec.open(out, "wt", encoding="utf-8", compression=infer_compression(out)) as f:
            for _, document, n in documents:
                text = _dumps(document, indent=None) + "\n"
                f.write(text)
                count, messages, written = count + 1, messages + n, written + len(text.encode())
    else:
        count, messages, written = _write_directory(out, documents)
    progress.finish()
    seconds = time.perf_counter() - start
    return ExportReport(out, snapshot.snapshot_id, count, messages, written, seconds)
