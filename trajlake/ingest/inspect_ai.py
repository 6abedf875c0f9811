"""Inspect AI eval logs: `.json` (one document) and `.eval` (a zip of per-sample JSON files).

One trajectory per sample × epoch, id `stable_id("inspect", eval_id, sample id, epoch)` (logs
older than `eval_id` use run id + eval task id). `attachment://<hash>` references are resolved
from the sample's `attachments`; images and other inline media become parts that keep only
`data-sha256:<hash>` references and their MIME type. Usage comes from the `model` events and is
put on the assistant message each call produced; when no call can be matched the sample's
`model_usage` (policy model) gives trajectory totals. Scores become `rewards` (C=1, I=0, P=0.5,
N=0; see `_inspect_ai_parts`), and one C/I or 0/1 scorer gives `resolved`.

`.json` logs are parsed whole; `.eval` members are read one at a time from the zip (a stream
that cannot seek is buffered first, up to `MAX_BUFFER` bytes).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar

from pydantic import ValidationError

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    raw_json,
    read_document,
    stable_id,
)
from trajlake.ingest._inspect_ai_parts import (
    attach_usage,
    inspect_message,
    outcome,
    resolve,
    status,
)
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory
from trajlake.wire.parts import content_fields
from trajlake.wire.values import drop_none, first_str, mapping, parse_time

MAX_BUFFER = 1 << 30
"""Largest `.eval` read into memory when the stream cannot seek (remote, compressed)."""

_ZIP_MAGIC = b"PK\x03\x04"
_JSON_HEAD = re.compile(
    rb'^\s*\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:\s*"\w+"\s*,\s*"eval"\s*:'
)
_SAMPLE = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")


class InspectAdapter:
    """Reads Inspect AI `.json` and `.eval` logs: one trajectory per sample and epoch."""

    name: ClassVar[str] = "inspect"
    description: ClassVar[str] = "*.eval, *.json — Inspect AI eval logs (inspect_ai)"

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure for a zip with Inspect's members, or JSON that opens like an eval log."""
        if head.startswith(_ZIP_MAGIC):
            members = b"_journal/start.json" in head or b"header.json" in head
            if members and (b"samples/" in head or b"_journal/" in head):
                return 1.0
            return 0.6 if source.name.endswith(".eval") else 0.0
        if _JSON_HEAD.match(head):
            return 1.0
        looks = head.lstrip().startswith(b"{") and b'"eval": {' in head and b'"run_id"' in head
        return 0.7 if looks and b'"plan"' in head else 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """Every sample × epoch of the log, in order; a broken sample costs only itself."""
        if stream.seekable():  # zipfile needs random access; other streams are buffered below
            magic = stream.read(4)
            stream.seek(0)
            if magic == _ZIP_MAGIC:
                yield from _read_eval(stream)
                return
            yield from _read_json(stream)
            return
        data = stream.read(MAX_BUFFER + 1)
        if len(data) > MAX_BUFFER:
            yield BadRecord(f"log larger than {MAX_BUFFER} bytes on a stream that cannot seek")
            return
        buffer = io.BytesIO(data)
        yield from (_read_eval(buffer) if data.startswith(_ZIP_MAGIC) else _read_json(buffer))


def _read_json(stream: IO[bytes]) -> Iterator[Parsed]:
    document = read_document(stream)
    if isinstance(document, BadRecord):
        yield document
        return
    if not isinstance(document, dict) or not isinstance(document.get("eval"), dict):
        yield BadRecord("not an Inspect log: no 'eval' object at the top level", None, 0)
        return
    samples = document.get("samples") or []
    if not isinstance(samples, list):
        yield BadRecord("field 'samples': expected a list", None, 0, "samples")
        return
    for index, sample in enumerate(samples):
        yield _parsed(document, sample, index, None)


def _member(archive: zipfile.ZipFile, name: str) -> Any:
    """A zip member's JSON (ValueError on corrupt data, KeyError when absent)."""
    try:
        return json.loads(archive.read(name))
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise ValueError(f"{name}: cannot read zip member ({e})") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{name}: malformed JSON ({e})") from e


def _log_header(archive: zipfile.ZipFile) -> dict[str, Any]:
    """`header.json`, or `_journal/start.json` for a log still running (status 'started')."""
    names = set(archive.namelist())
    if "header.json" in names:
        header = _member(archive, "header.json")
    elif "_journal/start.json" in names:
        header = {"status": "started", **_member(archive, "_journal/start.json")}
    else:
        raise ValueError("not an Inspect .eval log: no header.json or _journal/start.json")
    if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
        raise ValueError("header.json: no 'eval' object")
    return header


def _sample_order(name: str) -> tuple[int, int, str]:
    match = _SAMPLE.match(name)
    assert match is not None
    sample_id = match["id"]
    # By epoch, then numeric ids as numbers (2 before 10), then other ids by text.
    return (int(match["epoch"]), int(sample_id) if sample_id.isdigit() else 1 << 62, sample_id)


def _read_eval(stream: IO[bytes]) -> Iterator[Parsed]:
    try:
        archive = zipfile.ZipFile(stream)
        header = _log_header(archive)
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        yield BadRecord(f"unreadable .eval log: {e}", None, 0)
        return
    names = sorted((n for n in archive.namelist() if _SAMPLE.match(n)), key=_sample_order)
    for index, name in enumerate(names):
        try:
            sample = _member(archive, name)
        except ValueError as e:
            yield BadRecord(str(e), None, index, name)
            continue
        yield _parsed(header, sample, index, name)


def _parsed(log: Mapping[str, Any], sample: Any, index: int, member: str | None) -> Parsed:
    try:
        record = CanonicalTrajectory.model_validate(_record(log, sample))
        return ParsedTrajectory(finish_model_fields(record), None, index)
    except ValidationError as e:
        kept, size = raw_json(sample)
        bad = bad_from_validation(e, offset=index, raw=kept, raw_size=size)
        bad.error = f"{member}: {bad.error}" if member else bad.error
        return bad
    except (ValueError, TypeError) as e:
        kept, size = raw_json(sample)
        return BadRecord(f"{member}: {e}" if member else str(e), None, index, member, kept, size)


def _eval_key(eval_: Mapping[str, Any], sample: Mapping[str, Any]) -> list[Any]:
    if eval_.get("eval_id"):
        return [eval_["eval_id"]]
    if eval_.get("run_id") or eval_.get("task_id"):
        return [f"{eval_.get('run_id')}:{eval_.get('task_id')}"]
    # Neither id: the sample's own content decides (stable across copies of the file).
    return [json.dumps(sample, sort_keys=True, default=str)]


def _times(sample: Mapping[str, Any]) -> tuple[Any, Any]:
    events = [e for e in sample.get("events") or () if isinstance(e, Mapping)]
    stamps = [parse_time(e.get("timestamp")) for e in events]
    ends = [parse_time(e.get("completed")) for e in events] + stamps
    start = parse_time(sample.get("started_at")) or min((t for t in stamps if t), default=None)
    end = parse_time(sample.get("completed_at")) or max((t for t in ends if t), default=None)
    return start, end


def _final_output(output: Any) -> str | None:
    if not isinstance(output, Mapping):
        return None
    if isinstance(output.get("completion"), str) and output["completion"]:
        return str(output["completion"])
    choices = output.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
    return content_fields(message.get("content"))[0] if isinstance(message, Mapping) else None


def _totals(sample: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """Trajectory token totals from `model_usage`, for samples whose calls could not be matched."""
    usage = sample.get("model_usage")
    if not isinstance(usage, Mapping) or not usage:
        return {}
    entries = [usage[model]] if model in usage else list(usage.values())
    entries = [u for u in entries if isinstance(u, Mapping)]

    def total(key: str) -> int | None:
        values = [u.get(key) for u in entries if isinstance(u.get(key), int)]
        return sum(values) if values else None

    out = {"prompt_tokens": total("input_tokens"), "completion_tokens": total("output_tokens")}
    return drop_none({**out, "total_tokens": total("total_tokens")})


def _error(error: Any) -> Any:
    """The sample error without its ANSI-coloured traceback copy."""
    if isinstance(error, Mapping):
        return {k: v for k, v in error.items() if k != "traceback_ansi"} or None
    return error


def _attrs(log: Mapping[str, Any], sample: Mapping[str, Any]) -> dict[str, Any]:
    """The ids a user queries by (eval, task, sample, epoch), scores' answers, limits, errors."""
    eval_ = log["eval"]
    scores = mapping(sample.get("scores"))
    attrs = {
        "eval_id": eval_.get("eval_id"),
        "inspect_task_id": eval_.get("task_id"),
        "task": eval_.get("task"),
        "task_version": eval_.get("task_version"),
        "sample_id": sample.get("id"),
        "epoch": sample.get("epoch"),
        "sample_uuid": sample.get("uuid"),
        "target": sample.get("target"),
        "metadata": sample.get("metadata") or None,
        "scores": {
            n: drop_none({k: s.get(k) for k in ("value", "answer", "explanation")})
            for n, s in scores.items()
            if isinstance(s, Mapping)
        }
        or None,
        "log_status": log.get("status"),
        "total_time": sample.get("total_time"),
        "working_time": sample.get("working_time"),
        "model_usage": sample.get("model_usage") or None,
        "limit": sample.get("limit"),
        "error": _error(sample.get("error")),
        "error_retries": sample.get("error_retries") or None,
    }
    return drop_none(attrs)


def _record(log: Mapping[str, Any], sample: Any) -> dict[str, Any]:
    if not isinstance(sample, dict):
        raise TypeError(f"expected a sample object, got {type(sample).__name__}")
    eval_ = log["eval"]
    attachments = sample.get("attachments") or {}
    originals = resolve(sample.get("messages") or [], attachments)
    if not isinstance(originals, list):
        raise ValueError("field 'messages': expected a list")
    messages = [inspect_message(m) for m in originals]
    events = [e for e in sample.get("events") or () if isinstance(e, Mapping)]
    # Only what is read is resolved: a model event's `input` and raw `call` can be large.
    model_events = [
        {
            **e,
            "output": resolve(e.get("output"), attachments),
            "tools": resolve(e.get("tools"), attachments),
        }
        for e in events
        if e.get("event") == "model"
    ]
    matched = attach_usage(originals, messages, model_events)
    sample_id, epoch = sample.get("id"), sample.get("epoch")
    task = eval_.get("task")
    state, exit_reason = status(log.get("status"), sample)
    started, ended = _times(sample)
    tools = next((e.get("tools") for e in model_events if e.get("tools")), None)
    return drop_none(
        {
            "trajectory_id": stable_id("inspect", *_eval_key(eval_, sample), sample_id, epoch),
            # Sample ids (1, 2, …) repeat across tasks: the task name makes them one task each.
            "task_id": f"{task}/{sample_id}" if task else str(sample_id),
            "task_source": first_str([mapping(eval_.get("dataset")).get("name"), task]),
            "harness": "inspect_ai",
            "harness_version": first_str([mapping(eval_.get("packages")).get("inspect_ai")]),
            "policy_model": first_str([eval_.get("model")]),
            "run_id": first_str([eval_.get("run_id")]),
            "attempt": epoch if isinstance(epoch, int) else None,
            "started_at": started,
            "ended_at": ended,
            "status": state,
            "exit_reason": exit_reason,
            **outcome(mapping(sample.get("scores"))),
            "final_output": _final_output(sample.get("output")),
            **({} if matched else _totals(sample, eval_.get("model"))),
            "tools": tools if isinstance(tools, list) else None,
            "attrs": _attrs(log, sample),
            "messages": messages,
        }
    )
