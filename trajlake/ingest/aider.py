"""Aider history files: `.aider.llm.history` (raw LLM calls) and `.aider.chat.history.md`.

Mapping (FORMATS.md §5c):

- `.aider.llm.history`: each `TO LLM` block (request) with its `LLM RESPONSE` is one call.
  Aider rebuilds every request from its chat history, so calls are chained into conversations:
  a call continues the latest conversation whose last response it repeats as an assistant
  message; otherwise it starts one (after `/clear`, a mode switch, history summarisation, or an
  architect→editor hand-off, whose editor call gets the plan as a user message). One trajectory
  per conversation: the last request's messages plus its response (earlier repo maps and file
  contents, which aider refreshes per call, are not kept). Each response's timestamp goes to
  its assistant message, each request's timestamp to the user message just before it. The file
  names no model and no usage.
- `.aider.chat.history.md`: one trajectory per `# aider chat started at` session holding at
  least one `####` prompt (start-up-only sessions are skipped). `####` lines → one user message
  per run (slash commands included: they are what the user typed); `>` quotes after the first
  prompt → `role="tool"`, `name="aider"` (harness output: command results, errors, token
  reports; there is no tool-call id); quotes before it → `attrs.banner` (version, models);
  plain text → assistant messages. `Tokens: 3.2k sent, 222 received.` sets the preceding
  reply's prompt/completion tokens (rounded by aider: `tokens_approximate` in attrs).
- `.aider.input.history` holds only the user's inputs: never a trajectory (sniff 0), and a
  companion of the chat log beside it.

Aider logs local time without an offset; times are stored as if UTC (noted in attrs).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

from pydantic import ValidationError

from trajlake.ingest import _aider_parts as md
from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    bounded,
    stable_id,
)
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory, ContentPart
from trajlake.wire.parts import image_part
from trajlake.wire.values import parse_time

_BLOCK_RE = re.compile(r"^(TO LLM|LLM RESPONSE) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)\s*$")
_ROLE_RE = re.compile(r"^(SYSTEM|USER|ASSISTANT|TOOL)(?: |$)")
_IMAGE_RE = re.compile(r"^Image_url URL: (\S+)$")
_LLM_NAME, _CHAT_NAME, _INPUT_NAME = (
    ".aider.llm.history",
    ".aider.chat.history.md",
    ".aider.input.history",
)


@dataclass
class _Call:
    """One request (`TO LLM`) and its response (`LLM RESPONSE`), if any."""

    index: int
    line: int
    offset: int
    sent: str
    request: list[dict[str, Any]] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    received: str | None = None
    response: str | None = None


class AiderAdapter:
    """Reads aider's `.aider.llm.history` and `.aider.chat.history.md` logs."""

    name: ClassVar[str] = "aider"
    description: ClassVar[str] = ".aider.llm.history, .aider.chat.history.md — Aider history files"

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure on a `TO LLM <time>` or `# aider chat started at` first line; the file name
        only breaks ties (a named chat log whose header comes later)."""
        if source.name == _INPUT_NAME:
            return 0.0
        text = head.decode("utf-8", errors="replace")
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        if _BLOCK_RE.match(first):
            return 1.0 if source.name == _LLM_NAME else 0.95
        if md.SESSION_RE.match(first):
            return 1.0 if source.name == _CHAT_NAME else 0.95
        named = source.name == _CHAT_NAME and "\n# aider chat started at " in text
        return 0.9 if named else 0.0

    def companion_of(self, source: SourceFile, all_uris: frozenset[str]) -> str | None:
        """The input history is the user's side of the chat log beside it: skip it there."""
        if source.name != _INPUT_NAME:
            return None
        chat = source.uri[: -len(_INPUT_NAME)] + _CHAT_NAME
        return chat if chat in all_uris else None

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """Trajectories of an llm.history (conversations) or of a chat log (sessions)."""
        lines, undecodable = _lines(stream)
        first = next((text for _, _, text in lines if text.strip()), "")
        if source.name == _LLM_NAME or _BLOCK_RE.match(first):
            yield from _read_llm(lines, undecodable)
        else:
            yield from _read_chat(lines, undecodable)


def _lines(stream: IO[bytes]) -> tuple[list[md.Line], list[int]]:
    """Decoded lines with positions; undecodable bytes become U+FFFD (their lines are listed)."""
    out: list[md.Line] = []
    bad: list[int] = []
    offset = 0
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # one bad byte must not lose the log; the line is noted
            text = raw.decode("utf-8", errors="replace")
            bad.append(number)
        out.append((number, offset, text.rstrip("\r\n")))
        offset += len(raw)
    return out, bad


def _build(
    tid: str, fields: dict[str, Any], messages: list[dict[str, Any]], where: tuple[int, int]
) -> Parsed:
    try:
        record = CanonicalTrajectory(
            trajectory_id=tid,
            harness="aider",
            messages=md.build_messages(tid, messages),
            **{k: v for k, v in fields.items() if v is not None},
        )
    except ValidationError as e:
        return bad_from_validation(e, line=where[0], offset=where[1])
    return ParsedTrajectory(record, line=where[0], offset=where[1])


def _read_chat(lines: list[md.Line], undecodable: list[int]) -> Iterator[Parsed]:
    for session in md.split_sessions(lines):
        messages, info = md.session_messages(session)
        if not any(m["role"] == "user" for m in messages):
            continue  # aider started and quit (or was interrupted) before any prompt
        weak = info.pop("weak_model", None)
        attrs = info["attrs"]
        if weak:
            attrs["weak_model"] = weak
        if undecodable:
            attrs["undecodable_lines"] = undecodable
        # From the session's start only: aider appends to the log, so a session re-read from a
        # longer file keeps its id and is updated rather than stored twice.
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        tid = stable_id("aider", "chat", session.header, attrs.get("banner"), first_user)
        yield _build(tid, info, messages, (session.line, session.offset))


def _message(role: str, lines: list[str]) -> dict[str, Any]:
    """A request message; image lines become parts by reference (never inline data URLs)."""
    images = [m.group(1) for m in map(_IMAGE_RE.match, lines) if m]
    message: dict[str, Any] = {"role": role.lower(), "content": "\n".join(lines)}
    if images:
        text = "\n".join(ln for ln in lines if not _IMAGE_RE.match(ln))
        parts = [ContentPart(type="text", text=text)] if text.strip() else []
        parts += [ContentPart.model_validate(image_part(url)) for url in images]
        message["content"], message["parts"] = text, parts
    return message


def _split_messages(body: list[str]) -> list[dict[str, Any]]:
    """Messages of a block: `-------` separates them, each line carries its role.

    A line without a role prefix continues the message before it (aider writes list content
    items with embedded newlines that way).
    """
    groups: list[tuple[str, list[str]]] = []
    fresh = True
    for text in body:
        if text == "-------":
            fresh = True
            continue
        role = _ROLE_RE.match(text)
        if role is None:
            if groups:
                groups[-1][1].append(text)
            continue
        if fresh or groups[-1][0] != role.group(1):
            groups.append((role.group(1), []))
        groups[-1][1].append(text[len(role.group(1)) + 1 :])
        fresh = False
    return [_message(role, lines) for role, lines in groups]


def _calls(lines: list[md.Line]) -> Iterator[_Call | BadRecord]:
    """The file's calls in order; a response with no request before it is a bad record."""
    call: _Call | None = None
    body: list[str] = []
    index = 0

    def close() -> None:
        if call is not None and call.response is None and call.received is None:
            call.request = _split_messages(body)
        elif call is not None:
            texts = [m["content"] for m in _split_messages(body) if m["role"] == "assistant"]
            call.response = "\n".join(texts)

    for number, offset, text in lines:
        block = _BLOCK_RE.match(text)
        if block is None:
            if call is not None:
                body.append(text)
                call.raw.append(text)
            continue
        close()
        body = []
        if block.group(1) == "TO LLM":
            if call is not None:
                yield call
            call, index = _Call(index, number, offset, block.group(2), raw=[text]), index + 1
        elif call is None or call.received is not None:
            kept, size = bounded(text.encode())
            yield BadRecord(
                "LLM RESPONSE without a TO LLM request", number, offset, None, kept, size
            )
            call = None
        else:
            call.received = block.group(2)
    close()
    if call is not None:
        yield call


def _chains(calls: list[_Call]) -> list[list[_Call]]:
    """Calls grouped into conversations: a call joins the last one whose answer it repeats."""
    chains: list[list[_Call]] = []
    for call in calls:
        said = {m["content"] for m in call.request if m["role"] == "assistant"}
        home = next(
            (c for c in reversed(chains) if c[-1].response and c[-1].response in said), None
        )
        if home is None:
            chains.append([call])
        else:
            home.append(call)
    return chains


def _conversation(chain: list[_Call]) -> list[dict[str, Any]]:
    """The last request plus its response, with each call's times on its own messages."""
    last = chain[-1]
    messages = [dict(m) for m in last.request]
    if last.response is not None:
        messages.append({"role": "assistant", "content": last.response})
    pending = {c.response: c for c in chain if c.response}
    for i, message in enumerate(messages):
        call = pending.pop(message["content"], None) if message["role"] == "assistant" else None
        if call is None:
            continue
        message["timestamp"] = parse_time(call.received)
        message["attrs"] = {"call_index": call.index}
        if i > 0 and messages[i - 1]["role"] == "user":
            messages[i - 1]["timestamp"] = parse_time(call.sent)
    return messages


def _read_llm(lines: list[md.Line], undecodable: list[int]) -> Iterator[Parsed]:
    calls: list[_Call] = []
    for item in _calls(lines):
        if isinstance(item, BadRecord):
            yield item
        else:
            calls.append(item)
    for chain in _chains(calls):
        first, last = chain[0], chain[-1]
        digest = hashlib.sha256("\n".join(first.raw).encode()).hexdigest()
        attrs: dict[str, Any] = {
            "file": "llm.history",
            "call_indexes": [c.index for c in chain],
            "timestamps": "local time, offset unknown",
        }
        if last.response is None:
            attrs["last_call_unanswered"] = True
        if undecodable:
            attrs["undecodable_lines"] = undecodable
        fields = {
            "started_at": parse_time(first.sent),
            "ended_at": parse_time(last.received or last.sent),
            "attrs": attrs,
        }
        # The first call fixes the id: later calls of the conversation may still be appended.
        tid = stable_id("aider", "llm", first.sent, digest)
        yield _build(tid, fields, _conversation(chain), (first.line, first.offset))
