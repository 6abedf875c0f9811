"""Record types of every lake table, their Arrow schemas and the schema version: the single source.

Records are pydantic models (validation, JSON Schema); Arrow schemas are derived from them
(`_arrow_types`), so a field is declared once. Fields marked `JsonColumn` are objects in records
and JSON strings in Parquet, queryable with DuckDB's `json_extract_string`.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Annotated, Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajlake._arrow_types import BinaryColumn, JsonColumn, arrow_schema, json_fields

SCHEMA_VERSION = 1
"""Bumped on every change to a table's columns; stored in each trajectory row and the lake."""

Role = Literal["system", "user", "assistant", "tool"]
Status = Literal["completed", "truncated", "error", "timeout"]
Stage = Literal["distill", "rl", "eval", "prod"]
Dialect = Literal["chat", "responses", "anthropic"]
JsonObject = Annotated[dict[str, Any], JsonColumn()]
JsonValue = Annotated[Any, JsonColumn()]
Timestamp = dt.datetime


class _Record(BaseModel):
    """Base of all records: unknown fields are errors, so typos in sources surface at ingest."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class ToolCall(_Record):
    """One tool/function call requested by an assistant message."""

    id: str | None = Field(None, description="Call id that the matching tool message refers to.")
    name: str = Field(description="Tool (function) name.")
    arguments: str | None = Field(
        None, description="Arguments as the model emitted them (normally a JSON object string)."
    )
    type: str | None = Field(None, description="Call type, e.g. 'function' or 'custom'.")


class ContentPart(_Record):
    """One part of a multimodal message; binary payloads live under `blobs/`, never inline."""

    type: Literal["text", "image", "audio", "file", "other"] = Field(description="Part kind.")
    text: str | None = Field(None, description="Text of a text part.")
    uri: str | None = Field(
        None, description="Reference to the payload: `blob:<sha256>` inside the lake, or a URL."
    )
    mime_type: str | None = Field(None, description="MIME type of the payload.")
    sha256: str | None = Field(None, description="Content hash of the payload, when known.")


class Message(_Record):
    """One row of `messages`: a message of a trajectory, in order, within a thread."""

    trajectory_id: str = Field(description="Trajectory the message belongs to.")
    thread: str = Field(
        "main", description="Thread: 'main', a subagent id, or a rewritten-history thread."
    )
    idx: int = Field(description="0-based position within (trajectory_id, thread).")
    turn: int | None = Field(
        None, description="Agent turn (0-based assistant message index) this message belongs to."
    )
    role: Role = Field(description="system | user | assistant | tool.")
    content: str | None = Field(None, description="Text content (parts joined for multimodal).")
    parts: list[ContentPart] | None = Field(None, description="Multimodal parts, by reference.")
    reasoning: str | None = Field(None, description="Reasoning / thinking text.")
    tool_calls: list[ToolCall] | None = Field(None, description="Tool calls of an assistant turn.")
    tool_call_id: str | None = Field(None, description="For tool messages: the call answered.")
    name: str | None = Field(None, description="Tool name of a tool message, or speaker name.")
    is_error: bool | None = Field(None, description="Tool result reported an error.")
    exit_code: int | None = Field(None, description="Exit code of a shell tool result.")
    model: str | None = Field(None, description="Model that produced an assistant message.")
    finish_reason: str | None = Field(None, description="Finish/stop reason of the model call.")
    prompt_tokens: int | None = Field(None, description="Input tokens of the producing call.")
    completion_tokens: int | None = Field(None, description="Output tokens of the call.")
    reasoning_tokens: int | None = Field(None, description="Reasoning tokens, when reported.")
    cached_tokens: int | None = Field(None, description="Cached input tokens, when reported.")
    token_ids: list[int] | None = Field(None, description="Token ids (token-faithful RL data).")
    logprobs: list[float] | None = Field(None, description="Per-token logprobs of `token_ids`.")
    tokenizer: str | None = Field(None, description="Tokenizer that produced `token_ids`.")
    is_copied_context: bool = Field(
        False, description="Copied from an earlier thread (compaction, subagent); not trained on."
    )
    timestamp: Timestamp | None = Field(None, description="When the message was produced (UTC).")
    attrs: JsonObject | None = Field(None, description="Vendor fields, as JSON.")


class Trajectory(_Record):
    """One row of `trajectories`: one rollout, its task, producer, outcome and provenance."""

    trajectory_id: str = Field(description="Stable id, deterministic for a given source record.")
    content_hash: str | None = Field(
        None, description="sha256 of the normalised messages: the same rollout from two sources."
    )
    task_id: str | None = Field(None, description="Task / instance id.")
    task_source: str | None = Field(None, description="Benchmark or dataset the task comes from.")
    harness: str | None = Field(None, description="Agent harness (swe-agent, openhands, ...).")
    harness_version: str | None = Field(None, description="Harness version.")
    policy_model: str | None = Field(None, description="Model that acted as the policy.")
    generation: int | None = Field(None, description="Agent generation that produced it.")
    run_id: str | None = Field(None, description="Run / experiment / submission id.")
    stage: Stage | None = Field(None, description="distill | rl | eval | prod.")
    group_id: str | None = Field(None, description="Group of rollouts sampled together (GRPO).")
    attempt: int | None = Field(None, description="Attempt number within the group or task.")
    parent_trajectory_id: str | None = Field(None, description="Trajectory this one branched from.")
    branch_turn: int | None = Field(None, description="Turn of the parent where it branched.")
    is_subagent: bool = Field(False, description="A subagent's rollout, recorded on its own.")
    started_at: Timestamp | None = Field(None, description="Start time (UTC).")
    ended_at: Timestamp | None = Field(None, description="End time (UTC).")
    status: Status | None = Field(None, description="completed | truncated | error | timeout.")
    exit_reason: str | None = Field(None, description="Harness's own exit status text.")
    resolved: bool | None = Field(None, description="Outcome as recorded with the rollout.")
    reward: float | None = Field(None, description="Scalar reward recorded with the rollout.")
    rewards: dict[str, float] | None = Field(None, description="Named rewards / scores.")
    outcome_source: str | None = Field(None, description="Who judged the outcome.")
    final_output: str | None = Field(None, description="Submitted patch or final answer.")
    n_messages: int | None = Field(None, description="Messages in all threads.")
    n_turns: int | None = Field(None, description="Assistant turns in the main thread.")
    n_tool_calls: int | None = Field(None, description="Tool calls in all threads.")
    prompt_tokens: int | None = Field(None, description="Input tokens over all calls.")
    completion_tokens: int | None = Field(None, description="Output tokens over all calls.")
    total_tokens: int | None = Field(None, description="Total tokens over all calls.")
    cached_tokens: int | None = Field(None, description="Cached input tokens over all calls.")
    reasoning_tokens: int | None = Field(None, description="Reasoning tokens over all calls.")
    cost_usd: float | None = Field(None, description="Cost reported by the harness.")
    tools: Annotated[list[dict[str, Any]] | None, JsonColumn()] = Field(
        None, description="Tool definitions (JSON schemas) offered to the policy."
    )
    source_format: str | None = Field(None, description="Adapter that read it.")
    source_uri: str | None = Field(None, description="File or URL it was read from.")
    source_line: int | None = Field(None, description="1-based line in the source, if line-based.")
    source_offset: int | None = Field(None, description="Byte offset / index in the source.")
    ingest_id: str | None = Field(None, description="Ingest operation that stored it.")
    ingested_at: Timestamp | None = Field(None, description="When it was stored (UTC).")
    schema_version: int = Field(SCHEMA_VERSION, description="Record schema version.")
    n_redactions: int = Field(0, description="Secrets replaced by placeholders at ingest.")
    attrs: JsonObject | None = Field(None, description="Vendor and metadata fields, as JSON.")


class CanonicalTrajectory(Trajectory):
    """One line of the canonical JSONL interchange format: a trajectory with its messages.

    In a line, messages may omit `trajectory_id` and `idx` (filled from the trajectory and
    the position within the thread), and the trajectory may omit `trajectory_id` (derived
    from the content hash).
    """

    messages: list[Message] = Field(default_factory=list, description="All messages, all threads.")

    @model_validator(mode="before")
    @classmethod
    def _fill_message_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            return data
        data = dict(data)
        trajectory_id = data.setdefault("trajectory_id", "") or ""
        positions: dict[str, int] = {}
        messages = []
        for m in data["messages"]:
            if isinstance(m, dict):
                thread = m.get("thread") or "main"
                position = positions.get(thread, 0)
                positions[thread] = position + 1
                if "idx" not in m or "trajectory_id" not in m:
                    m = {"trajectory_id": trajectory_id, "idx": position, **m}
            messages.append(m)
        data["messages"] = messages
        return data


class Call(_Record):
    """One row of `calls`: a raw model call; history is referenced, never copied per call."""

    call_id: str = Field(description="Unique call id.")
    trajectory_id: str | None = Field(None, description="Rollout the call belongs to.")
    thread: str | None = Field(None, description="Message thread the call extends.")
    seq: int | None = Field(None, description="Order of the call within the rollout.")
    dialect: Dialect = Field(description="chat | responses | anthropic.")
    endpoint: str | None = Field(None, description="Path called, e.g. /v1/chat/completions.")
    model: str | None = Field(None, description="Requested model.")
    request_params: JsonObject | None = Field(
        None, description="Request without its message history (params, tools), verbatim."
    )
    history_prefix: int | None = Field(
        None, description="Messages of `thread` this request's input starts with (by reference)."
    )
    new_input: JsonValue | None = Field(None, description="Input messages beyond the prefix.")
    response: JsonValue | None = Field(None, description="Response body (streams reassembled).")
    stream: bool | None = Field(None, description="The call was streamed (SSE).")
    status_code: int | None = Field(None, description="HTTP status of the upstream response.")
    error: str | None = Field(None, description="Error text of a failed call.")
    started_at: Timestamp | None = Field(None, description="Request time (UTC).")
    latency_ms: float | None = Field(None, description="Time to the complete response.")
    prompt_tokens: int | None = Field(None, description="Input tokens (usage).")
    completion_tokens: int | None = Field(None, description="Output tokens (usage).")
    token_ids: list[int] | None = Field(None, description="Output token ids, when returned.")
    logprobs: list[float] | None = Field(None, description="Output logprobs, when returned.")
    attrs: JsonObject | None = Field(None, description="Other fields, as JSON.")


class Label(_Record):
    """One row of `labels`: an outcome attached after the fact, with who judged it."""

    label_id: str = Field(description="Deterministic id of this label (source + target).")
    trajectory_id: str | None = Field(None, description="Labelled trajectory, when known by id.")
    task_id: str | None = Field(None, description="Task id, when matched by task + run.")
    run_id: str | None = Field(None, description="Run id, when matched by task + run.")
    resolved: bool | None = Field(None, description="Resolved according to this source.")
    reward: float | None = Field(None, description="Scalar reward according to this source.")
    rewards: dict[str, float] | None = Field(None, description="Named rewards / scores.")
    source: str = Field(description="Label source, e.g. 'swebench', 'human', 'judge:gpt-x'.")
    source_uri: str | None = Field(None, description="File the label was read from.")
    created_at: Timestamp | None = Field(None, description="When it was stored (UTC).")
    details: JsonObject | None = Field(None, description="Source-specific details, as JSON.")


class Credit(_Record):
    """One row of `credits`: per-turn value, credit and training weight of one credit run."""

    run_name: str = Field(description="Credit run name; several runs coexist.")
    trajectory_id: str = Field(description="Trajectory.")
    thread: str = Field("main", description="Thread of the turn.")
    turn: int = Field(description="0-based turn.")
    estimator: str = Field(description="Estimator / value source id.")
    params: JsonObject | None = Field(None, description="Estimator parameters (gamma, lam, ...).")
    value_before: float | None = Field(None, description="V(s_t).")
    value_after: float | None = Field(None, description="V(s_{t+1}).")
    credit: float | None = Field(None, description="c_t = V(s_{t+1}) - V(s_t).")
    advantage: float | None = Field(None, description="Advantage (GAE, group-relative, ...).")
    weight: float | None = Field(None, description="Training weight of the turn.")
    mask: bool | None = Field(None, description="Train on this turn.")
    segment_id: int | None = Field(None, description="Segment (e.g. rise run) the turn is in.")
    source_snapshot: int | None = Field(None, description="Lake snapshot it was computed from.")
    created_at: Timestamp | None = Field(None, description="When it was computed (UTC).")


class Score(_Record):
    """One row of `scores`: a value-model score of a trajectory or of a prefix."""

    model_id: str = Field(description="Model that scored.")
    trajectory_id: str = Field(description="Scored trajectory.")
    turn: int | None = Field(None, description="Prefix up to this turn; null = whole trajectory.")
    score: float = Field(description="Score (probability of success for calibrated models).")
    source_snapshot: int | None = Field(None, description="Snapshot the input was read from.")
    created_at: Timestamp | None = Field(None, description="When it was scored (UTC).")
    attrs: JsonObject | None = Field(None, description="Other fields, as JSON.")


class ModelRecord(_Record):
    """One row of `models`: a registered model with its lineage."""

    model_id: str = Field(description="Unique model id.")
    name: str | None = Field(None, description="Human name.")
    kind: str = Field(description="value | prefix-value | reranker | policy | baseline.")
    base_model: str | None = Field(None, description="Backbone name or path.")
    training_snapshot: int | None = Field(None, description="Lake snapshot trained on.")
    training_tag: str | None = Field(None, description="Tag of that snapshot, if any.")
    selection_sql: str | None = Field(None, description="SQL that selected the training data.")
    label_source: str | None = Field(None, description="Where the targets came from.")
    metrics: JsonObject | None = Field(None, description="Evaluation metrics.")
    artifact_uri: str | None = Field(None, description="Where weights, config and card live.")
    parent_model_id: str | None = Field(None, description="Model this one continues from.")
    config: JsonObject | None = Field(None, description="Training configuration.")
    created_at: Timestamp | None = Field(None, description="When it was registered (UTC).")


class QuarantineRecord(_Record):
    """One row of `quarantine`: a source record that failed to parse or validate."""

    quarantine_id: str = Field(description="Deterministic id (source + position).")
    source_uri: str = Field(description="File the record came from.")
    line: int | None = Field(None, description="1-based line, for line-based sources.")
    offset: int | None = Field(None, description="Byte offset or record index.")
    source_format: str | None = Field(None, description="Format the record was read as.")
    field: str | None = Field(None, description="Offending field path, when known.")
    error: str = Field(description="What is wrong, in words.")
    raw: Annotated[bytes | None, BinaryColumn()] = Field(
        None, description="The raw record, truncated to a bounded size."
    )
    raw_size: int | None = Field(None, description="Size of the raw record in bytes.")
    ingest_id: str | None = Field(None, description="Ingest operation.")
    created_at: Timestamp | None = Field(None, description="When it was quarantined (UTC).")


class ExportRecord(_Record):
    """One row of `exports`: an SFT dataset written from the lake, with its manifest."""

    export_id: str = Field(description="Deterministic id: sha256 of the manifest and the folder.")
    format: str = Field(
        description="openai | trl | sharegpt | axolotl | tokenized (SFT), groups (RL groups)."
    )
    source_snapshot: int = Field(description="Lake snapshot the trajectories were read from.")
    source_tags: list[str] | None = Field(None, description="Tags of that snapshot, if any.")
    credit_run: str | None = Field(None, description="Credit run that weighted the turns.")
    mask: str | None = Field(None, description="Mask rule in force ('all' without a run).")
    selection_sql: str | None = Field(None, description="SQL condition on `trajectories`.")
    uri: str = Field(description="Folder holding the shards and `manifest.json`.")
    manifest: JsonObject = Field(description="The manifest, as written.")
    counts: JsonObject | None = Field(None, description="Per split counts, as in the manifest.")
    created_at: Timestamp | None = Field(None, description="When it was recorded (UTC).")


RECORD_TYPES: dict[str, type[_Record]] = {
    "trajectories": Trajectory,
    "messages": Message,
    "calls": Call,
    "labels": Label,
    "credits": Credit,
    "scores": Score,
    "models": ModelRecord,
    "quarantine": QuarantineRecord,
    "exports": ExportRecord,
}
"""Table name → record type of one row."""

TABLES: tuple[str, ...] = tuple(RECORD_TYPES)

PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "trajectories": ("trajectory_id",),
    "messages": ("trajectory_id", "thread", "idx"),
    "calls": ("call_id",),
    "labels": ("label_id",),
    "credits": ("run_name", "trajectory_id", "thread", "turn"),
    "scores": ("model_id", "trajectory_id", "turn"),
    "models": ("model_id",),
    "quarantine": ("quarantine_id",),
    "exports": ("export_id",),
}
"""Columns that identify a row; appends never store a key twice."""

SORT_KEYS: dict[str, tuple[str, ...]] = {
    "messages": ("trajectory_id", "thread", "idx"),
    "credits": ("run_name", "trajectory_id", "turn"),
}
"""Order rows are written in, so per-trajectory reads touch few row groups."""


@functools.cache
def table_schema(table: str) -> pa.Schema:
    """The Arrow schema of a table, with the schema version in its metadata."""
    record = RECORD_TYPES[table]
    return arrow_schema(record).with_metadata({"trajlake.schema_version": str(SCHEMA_VERSION)})


@functools.cache
def json_columns(table: str) -> frozenset[str]:
    """Top-level columns of a table that hold JSON strings."""
    return json_fields(RECORD_TYPES[table])


def json_schema_documents() -> dict[str, dict[str, Any]]:
    """JSON Schema of every table's row and of the canonical JSONL line, keyed by file stem."""
    docs: dict[str, dict[str, Any]] = {}
    for table, record in RECORD_TYPES.items():
        docs[table] = _document(record.model_json_schema(), table)
    docs["canonical"] = _document(_canonical_json_schema(), "canonical")
    return docs


def _canonical_json_schema() -> dict[str, Any]:
    """Canonical lines may omit ids that are implied (see CanonicalTrajectory)."""
    schema = CanonicalTrajectory.model_json_schema()
    schema["required"] = [r for r in schema.get("required", []) if r != "trajectory_id"]
    message = schema["$defs"]["Message"]
    message["required"] = [r for r in message["required"] if r not in ("trajectory_id", "idx")]
    return schema


def _document(schema: dict[str, Any], stem: str) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://trajlake.dev/schemas/v{SCHEMA_VERSION}/{stem}.json",
        "x-trajlake-schema-version": SCHEMA_VERSION,
        **schema,
    }


def render_schema_files() -> dict[str, str]:
    """The checked-in `schemas/` folder's files: name → text (JSON Schema, stable formatting)."""
    import json

    return {
        f"{stem}.json": json.dumps(doc, indent=2, sort_keys=True) + "\n"
        for stem, doc in json_schema_documents().items()
    }


def write_schema_files(directory: str) -> list[str]:
    """Regenerate the JSON Schema files in `directory`; returns the paths written."""
    import os

    os.makedirs(directory, exist_ok=True)
    written = []
    for name, text in render_schema_files().items():
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written
