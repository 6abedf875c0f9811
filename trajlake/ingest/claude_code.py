"""Claude Code session transcripts (`~/.claude/projects/<cwd>/<sessionId>.jsonl`).

One session file is one trajectory. Its subagent transcripts
(`<sessionId>/subagents/agent-<id>.jsonl`) are read with it as threads named `agent-<id>`;
compaction subagents (`agent-acompact-*`) are threads of rewritten history whose copied context
(everything before the summary request) is flagged `is_copied_context`. A subagent file given
without its session file is a trajectory of its own (`is_subagent`, `parent_trajectory_id` = the
session's id); in a directory that holds the session file, it is a companion and is skipped.
A session inside a Harbor trial folder is the companion of the trial's ATIF trajectory (see
`harbor`); both carry the session id as `attrs.rollout_key`.

`system`, `progress`, `file-history-snapshot`, `queue-operation` and `summary` records are not
messages; they are counted in attrs (summary titles are kept). How records become messages is
described in `_claude_code_parts`. There is no outcome and no exit status in this format.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

import fsspec
from pydantic import ValidationError

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    iter_json_lines,
    stable_id,
)
from trajlake.ingest._claude_code_parts import MESSAGE_TYPES, Converter, Rec, check, main_line
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._sources import SourceFile
from trajlake.ingest.harbor import is_native_session
from trajlake.schema import CanonicalTrajectory
from trajlake.wire.values import parse_time

_SUBAGENT = re.compile(r"^(?P<session>.*)/(?P<sid>[^/]+)/subagents/(?P<agent>agent-[^/]+)\.jsonl$")
_RECORD_TYPES = MESSAGE_TYPES | {"system", "progress", "file-history-snapshot", "summary"}
_SNIFF_LINES = 20


@dataclass
class _File:
    """The checked records of one transcript file and its bad lines."""

    records: list[Rec] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    digest: str = ""


def _load(lines: Iterable[tuple[int, int, bytes, Any]]) -> _File:
    loaded = _File()
    sha = hashlib.sha256()
    for line, offset, raw, value in lines:
        sha.update(raw + b"\n")
        item = value if isinstance(value, BadRecord) else check(value, line, offset, raw)
        if isinstance(item, BadRecord):
            loaded.bad.append(item)
        else:
            loaded.records.append(item)
    loaded.digest = sha.hexdigest()
    return loaded


def _kind(rec: Rec) -> str:
    """The record type, with the subtype of system and progress records."""
    sub = rec.obj.get("subtype")
    if rec.type == "progress" and isinstance(rec.obj.get("data"), dict):
        sub = rec.obj["data"].get("type")
    return f"{rec.type}:{sub}" if isinstance(sub, str) else rec.type


def _first(records: Iterable[Rec], key: str) -> Any:
    return next((r.obj[key] for r in records if isinstance(r.obj.get(key), str)), None)


def _thread_messages(records: list[Rec], thread: str, compaction: bool) -> tuple[list[Any], int]:
    """Message dicts of one transcript's main line, and the messages left off it."""
    kept, dropped = main_line(records)
    converter = Converter(thread)
    for rec in kept:
        converter.add(rec)
    messages = converter.finish()
    if compaction:
        _flag_copied(messages)
    return messages, dropped


def _flag_copied(messages: list[dict[str, Any]]) -> None:
    """In a compaction thread, what precedes the summary request was copied from the session."""
    first_answer = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    asks = [i for i, m in enumerate(messages[:first_answer]) if m["role"] == "user"]
    for message in messages[: asks[-1] if asks else 0]:
        message["is_copied_context"] = True


def _policy_model(messages: Iterable[dict[str, Any]]) -> str | None:
    # "<synthetic>" marks messages Claude Code wrote itself (API errors, interruptions).
    models = Counter(
        m.get("model") for m in messages if m["role"] == "assistant" and m.get("thread") == "main"
    )
    models.pop("<synthetic>", None)
    models.pop(None, None)
    # A session can switch models (/model): the one behind most turns is the policy.
    return models.most_common(1)[0][0] if models else None


def _session_attrs(records: list[Rec], dropped: int) -> dict[str, Any]:
    versions = list(
        dict.fromkeys(r.obj["version"] for r in records if isinstance(r.obj.get("version"), str))
    )
    attrs: dict[str, Any] = {
        "session_id": _first(records, "sessionId"),
        "cwd": _first(records, "cwd"),
        "git_branch": _first(records, "gitBranch"),
        "slug": _first(records, "slug"),
        "record_types": dict(Counter(_kind(r) for r in records)),
        "off_chain_messages": dropped,
    }
    if len(versions) > 1:
        attrs["versions"] = versions
    summaries = [r.obj["summary"] for r in records if r.type == "summary" and "summary" in r.obj]
    if summaries:
        attrs["summaries"] = summaries
    compactions = [
        r.obj.get("compactMetadata") for r in records if _kind(r) == "system:compact_boundary"
    ]
    if compactions:
        attrs["compactions"] = compactions
    return {k: v for k, v in attrs.items() if v is not None}


def _subagent_links(records: Iterable[Rec]) -> dict[str, str]:
    """agent id → the tool call (Task) that started it, from progress and result records."""
    links: dict[str, str] = {}
    for rec in records:
        data, result = rec.obj.get("data"), rec.obj.get("toolUseResult")
        if isinstance(data, dict) and data.get("type") == "agent_progress":
            agent, call = data.get("agentId"), rec.obj.get("parentToolUseID")
            if isinstance(agent, str) and isinstance(call, str):
                links.setdefault(agent, call)
        if isinstance(result, dict) and isinstance(result.get("agentId"), str):
            for block in rec.message.get("content") or ():
                if isinstance(block, dict) and isinstance(block.get("tool_use_id"), str):
                    links.setdefault(result["agentId"], block["tool_use_id"])
    return links


def _open_subagents(source: SourceFile) -> Iterator[tuple[str, IO[bytes]]]:
    """(thread name, stream) of `<stem>/subagents/agent-*.jsonl` beside a session file."""
    if not source.uri.endswith(".jsonl"):
        return
    fs, path = fsspec.core.url_to_fs(source.uri, **(source.storage_options or {}))
    folder = posixpath.join(path[: -len(".jsonl")], "subagents")
    if not fs.isdir(folder):
        return
    for entry in sorted(str(e) for e in fs.ls(folder, detail=False)):
        name = posixpath.basename(entry)
        if name.startswith("agent-") and name.endswith(".jsonl"):
            with fs.open(entry, "rb") as stream:
                yield name[: -len(".jsonl")], stream


class ClaudeCodeAdapter:
    """Reads Claude Code session JSONL, with subagent transcripts as threads."""

    name: ClassVar[str] = "claude-code"
    description: ClassVar[str] = (
        "<sessionId>.jsonl (+ <sessionId>/subagents/agent-*.jsonl) — Claude Code sessions"
    )

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure when an early line is a Claude Code record (type, sessionId, uuid/parentUuid)."""
        lines = head.split(b"\n")
        # The head is cut at 64 KiB: then its last line may be partial and is not judged.
        complete = lines[:-1] if len(head) >= 65536 else lines
        for raw in itertools.islice((ln for ln in complete if ln.strip()), _SNIFF_LINES):
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(obj, dict) or obj.get("type") not in _RECORD_TYPES:
                continue
            if "sessionId" in obj and ("uuid" in obj or "parentUuid" in obj):
                return 0.95
            if obj["type"] == "summary" and "leafUuid" in obj:
                return 0.9
        first = head.lstrip()
        if not complete or (len(lines) == 1 and first.startswith(b"{")):
            # One line longer than the head: judge by the envelope keys it starts with.
            envelope = b'"sessionId"' in first and b'"parentUuid"' in first and b'"uuid"' in first
            return 0.9 if envelope else 0.0
        return 0.0

    def companion_of(self, source: SourceFile, all_uris: frozenset[str]) -> str | None:
        """A subagent transcript is read by its session file, and a session inside a Harbor
        trial by the trial's ATIF `agent/trajectory.json`, when that file is present."""
        trial = is_native_session(source.uri)
        if trial is not None and trial in all_uris:
            return trial
        match = _SUBAGENT.match(source.uri)
        if match is None:
            return None
        owner = f"{match['session']}/{match['sid']}.jsonl"
        return owner if owner in all_uris else None

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """The file's bad lines (as BadRecords), then its one trajectory."""
        loaded = _load(iter_json_lines(stream))
        yield from loaded.bad
        if not any(r.type in MESSAGE_TYPES for r in loaded.records):
            yield BadRecord("no user or assistant record: not a Claude Code session")
            return
        match = _SUBAGENT.match(source.uri)
        if match is not None or all(r.obj.get("isSidechain") is True for r in loaded.records):
            agent_id = _first(loaded.records, "agentId")
            stem = source.name.removesuffix(".jsonl")
            agent = match["agent"] if match else (f"agent-{agent_id}" if agent_id else stem)
            yield self._validated(self._subagent(loaded, agent))
            return
        data, bad = self._session(source, loaded)
        yield from bad
        yield self._validated(data)

    def _session(self, source: SourceFile, loaded: _File) -> tuple[dict[str, Any], list[BadRecord]]:
        records = [r for r in loaded.records if r.obj.get("isSidechain") is not True]
        messages, dropped = _thread_messages(records, "main", compaction=False)
        messages += self._sidechains([r for r in loaded.records if r not in records])
        attrs = _session_attrs(loaded.records, dropped)
        links = _subagent_links(loaded.records)
        bad: list[BadRecord] = []
        subagents: dict[str, Any] = {}
        for thread, stream in _open_subagents(source):
            sub = _load(iter_json_lines(stream))
            for item in sub.bad:
                # Its line and offset are in the subagent file, not in the session file whose
                # quarantine row this becomes: they move into the message.
                item.error = f"subagents/{thread}.jsonl line {item.line}: {item.error}"
                item.field, item.line, item.offset = f"subagents/{thread}.jsonl", None, None
                bad.append(item)
            compaction = thread.startswith("agent-acompact")
            thread_messages, _ = _thread_messages(sub.records, thread, compaction)
            parent_call = links.get(thread.removeprefix("agent-"))
            for i, message in enumerate(thread_messages):
                message["attrs"]["thread_kind"] = "compaction" if compaction else "subagent"
                if i == 0 and parent_call is not None:
                    message["attrs"]["parent_tool_call_id"] = parent_call
            subagents[thread] = {
                "messages": len(thread_messages),
                "parent_tool_call_id": parent_call,
            }
            messages += thread_messages
        if subagents:
            attrs["subagents"] = subagents
        session = attrs.get("session_id")
        if session:  # Harbor's ATIF trajectory of this session has it as its `session_id`
            attrs["rollout_key"] = session
        data = self._trajectory(loaded, messages, attrs)
        # By session id, not content: a live session ingested again later is an update.
        data["trajectory_id"] = stable_id(self.name, session or loaded.digest)
        return data, bad

    def _sidechains(self, records: list[Rec]) -> list[dict[str, Any]]:
        """Old sessions keep subagent records in the session file: a thread per sidechain root."""
        by_uuid = {r.uuid: r for r in records if r.uuid}
        groups: dict[str, list[Rec]] = {}
        for rec in records:
            root, seen = rec, set()
            while isinstance(root.obj.get("parentUuid"), str) and root.obj["parentUuid"] in by_uuid:
                if root.uuid in seen:  # a parentUuid loop in a damaged file
                    break
                seen.add(root.uuid)
                root = by_uuid[root.obj["parentUuid"]]
            groups.setdefault(f"sidechain-{(root.uuid or str(root.line))[:8]}", []).append(rec)
        messages: list[dict[str, Any]] = []
        for thread, group in groups.items():
            thread_messages, _ = _thread_messages(group, thread, compaction=False)
            for message in thread_messages:
                message["attrs"]["thread_kind"] = "subagent"
            messages += thread_messages
        return messages

    def _subagent(self, loaded: _File, thread: str) -> dict[str, Any]:
        compaction = thread.startswith("agent-acompact")
        messages, dropped = _thread_messages(loaded.records, "main", compaction)
        attrs = _session_attrs(loaded.records, dropped)
        attrs["agent_id"] = thread.removeprefix("agent-")
        attrs["thread_kind"] = "compaction" if compaction else "subagent"
        session = attrs.get("session_id")
        data = self._trajectory(loaded, messages, attrs)
        data.update(
            trajectory_id=stable_id(self.name, session, attrs["agent_id"])
            if session
            else stable_id(self.name, loaded.digest),
            is_subagent=True,
            parent_trajectory_id=stable_id(self.name, session) if session else None,
        )
        return data

    @staticmethod
    def _trajectory(loaded: _File, messages: list[Any], attrs: dict[str, Any]) -> dict[str, Any]:
        times = [t for r in loaded.records if (t := parse_time(r.obj.get("timestamp")))]
        models = Counter(m.get("model") for m in messages if m["role"] == "assistant")
        attrs["models"] = {k: v for k, v in models.items() if isinstance(k, str)}
        return {
            "harness": "claude-code",
            "harness_version": _first(loaded.records, "version"),
            "policy_model": _policy_model(messages),
            "started_at": min(times) if times else None,
            "ended_at": max(times) if times else None,
            "messages": messages,
            "attrs": attrs,
        }

    @staticmethod
    def _validated(data: dict[str, Any]) -> Parsed:
        try:
            return ParsedTrajectory(finish_model_fields(CanonicalTrajectory.model_validate(data)))
        except ValidationError as e:
            return bad_from_validation(e)
