"""Aider's Markdown chat log (`.aider.chat.history.md`): sessions, prompts, replies, tool output.

Aider appends to this file as it runs (`aider/io.py`): user input as `#### <line>  ` lines,
its own output as `> <text>  ` quotes (only the first line of a multi-line output is quoted,
the rest follows unquoted and unseparated), and model replies as plain Markdown preceded by a
blank line. Nothing is structured, so this module classifies lines and groups them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trajlake.schema import Message
from trajlake.wire.values import parse_time

SESSION_RE = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\s*$")
_FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})")
_AMOUNT = r"([\d.,]+)\s*([kKmM]?)"
_TOKENS_RE = re.compile(rf"{_AMOUNT} (sent|received|cache write|cache hit)")
_COST_RE = re.compile(r"Cost: \$([\d.]+) (?:message|request), \$([\d.]+) session")
_MAIN_MODEL_RE = re.compile(r"^(?:Main model|Model|Models): (\S+)")
_VERSION_RE = re.compile(r"^Aider v(\S+)")
_THINKING, _ANSWER = "► **THINKING**", "► **ANSWER**"

Line = tuple[int, int, str]
"""(1-based line number, byte offset, text without the newline)."""


@dataclass
class Block:
    """A run of lines of one kind: 'user' (`####`), 'quote' (`>`) or 'assistant' (plain)."""

    kind: str
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip("\n")


@dataclass
class Session:
    """One `# aider chat started at` section of the file."""

    header: str | None
    line: int
    offset: int
    blocks: list[Block] = field(default_factory=list)


def split_sessions(lines: list[Line]) -> list[Session]:
    """The file cut at each session header (text before the first header is a headerless one)."""
    sessions: list[Session] = []
    current: Session | None = None
    body: list[str] = []
    for number, offset, text in lines:
        if SESSION_RE.match(text):
            if current is not None or any(b.strip() for b in body):
                sessions.append(_with_blocks(current or Session(None, 1, 0), body))
            current, body = Session(text, number, offset), []
        else:
            body.append(text)
    if current is not None or any(b.strip() for b in body):
        sessions.append(_with_blocks(current or Session(None, 1, 0), body))
    return sessions


def _with_blocks(session: Session, body: list[str]) -> Session:
    session.blocks = classify(body)
    return session


def classify(body: list[str]) -> list[Block]:
    """Group a session's lines into user / quote / assistant blocks.

    Inside a code fence of a reply, `#### ` and `> ` lines are the reply's own text unless
    they end with aider's two-space line break (so an unbalanced fence cannot swallow the log).
    An unquoted line directly under a quote continues that quote (multi-line tool output).
    """
    blocks: list[Block] = []
    in_fence = False
    previous_blank = True
    for raw in body:
        text = raw.rstrip("\n")
        # Aider ends each line it writes itself with Markdown's two-space break; a model's
        # reply does not, so inside a fence only such lines count as aider's.
        harness = text.endswith("  ") or not in_fence
        if text.startswith("####") and harness:
            kind, content, in_fence = "user", text[5:].rstrip(), False
        elif (text == ">" or text.startswith("> ") or text.startswith(">  ")) and harness:
            kind, content, in_fence = "quote", text[2:].rstrip(), False
        elif not text.strip():
            previous_blank = True
            if blocks and blocks[-1].kind == "assistant":
                blocks[-1].lines.append("")
            continue
        elif blocks and blocks[-1].kind == "quote" and not previous_blank:
            kind, content = "quote", text.rstrip()
        else:
            kind, content = "assistant", text
            if _FENCE_RE.match(text):
                in_fence = not in_fence
        previous_blank = False
        if not blocks or blocks[-1].kind != kind:
            blocks.append(Block(kind))
        blocks[-1].lines.append(content)
    return blocks


def parse_amount(number: str, suffix: str) -> int | None:
    """`3.2k` → 3200: aider rounds counts for display, so the result is approximate."""
    try:
        value = float(number.replace(",", ""))
    except ValueError:
        return None
    scale = {"k": 1_000, "m": 1_000_000}.get(suffix.lower(), 1)
    return round(value * scale)


def _usage(line: str) -> dict[str, Any]:
    """Message fields and attrs from a `Tokens: 3.2k sent, 222 received. Cost: …` line."""
    amounts = {kind: parse_amount(n, s) for n, s, kind in _TOKENS_RE.findall(line)}
    fields: dict[str, Any] = {
        "prompt_tokens": amounts.get("sent"),
        "completion_tokens": amounts.get("received"),
        "cached_tokens": amounts.get("cache hit"),
    }
    attrs: dict[str, Any] = {"tokens_raw": line, "tokens_approximate": True}
    if "cache write" in amounts:
        attrs["cache_write_tokens"] = amounts["cache write"]
    cost = _COST_RE.search(line)
    if cost:
        attrs["cost_usd_message"] = float(cost.group(1))
        attrs["cost_usd_session"] = float(cost.group(2))
    return {"fields": fields, "attrs": attrs}


def _assistant(text: str, model: str | None) -> dict[str, Any]:
    """An assistant message; aider's THINKING/ANSWER display markers split off the reasoning."""
    reasoning = None
    if _THINKING in text and _ANSWER in text:
        before, _, rest = text.partition(_THINKING)
        thought, _, answer = rest.partition(_ANSWER)
        reasoning = thought.strip().strip("-").strip() or None
        text = (before.rstrip().rstrip("-").rstrip() + "\n" + answer.strip()).strip()
    return {"role": "assistant", "content": text, "reasoning": reasoning, "model": model}


def _annotate(reply: dict[str, Any], quote_lines: list[str]) -> None:
    """Token usage, applied edits and commits from the quote that follows a reply."""
    attrs: dict[str, Any] = reply.setdefault("attrs", {})
    for line in quote_lines:
        if line.startswith("Tokens:") and "sent" in line:
            usage = _usage(line)
            reply.update({k: v for k, v in usage["fields"].items() if v is not None})
            attrs.update(usage["attrs"])
        elif line.startswith("Applied edit to "):
            attrs.setdefault("applied_edits", []).append(line.removeprefix("Applied edit to "))
        elif line.startswith("Commit ") and len(line.split()) > 1:
            attrs.setdefault("commits", []).append(line.removeprefix("Commit "))
    if not attrs:
        del reply["attrs"]


def session_messages(session: Session) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(message dicts, trajectory fields) of a session; quotes before the first prompt are
    the start-up banner (kept in attrs), later quotes are tool messages named "aider"."""
    banner: list[str] = []
    messages: list[dict[str, Any]] = []
    info: dict[str, Any] = {"harness_version": None, "policy_model": None, "cost_usd": None}
    model: str | None = None
    last_reply: dict[str, Any] | None = None
    for block in session.blocks:
        if block.kind == "quote":  # a `/model` switch mid-session names the model of later replies
            model = _scan_banner(block.lines, info) or model
        if block.kind == "quote" and not messages:
            banner.extend(block.lines)
        elif block.kind == "quote":
            if block.text.strip():
                messages.append({"role": "tool", "name": "aider", "content": block.text})
            if last_reply is not None:
                _annotate(last_reply, block.lines)
                cost = (last_reply.get("attrs") or {}).get("cost_usd_session")
                info["cost_usd"] = cost if cost is not None else info["cost_usd"]
                last_reply = None  # a usage line belongs to the reply right above it, only
        elif block.kind == "user":
            messages.append({"role": "user", "content": block.text})
            last_reply = None
        elif block.text.strip():
            last_reply = _assistant(block.text, model)
            messages.append(last_reply)
    attrs: dict[str, Any] = {"file": "chat.history.md", "timestamps": "local time, offset unknown"}
    if banner:
        attrs["banner"] = "\n".join(banner).strip("\n")
    info["attrs"] = attrs
    info["started_at"] = _started(session.header)
    return messages, info


def _scan_banner(lines: list[str], info: dict[str, Any]) -> str | None:
    """Aider version and model from banner lines; returns the main model if one is named."""
    model = None
    for line in lines:
        version = _VERSION_RE.match(line)
        if version and info["harness_version"] is None:
            info["harness_version"] = version.group(1)
        found = _MAIN_MODEL_RE.match(line)
        if found:
            model = found.group(1)
            info["policy_model"] = info["policy_model"] or model
        if line.startswith("Weak model: "):
            info.setdefault("weak_model", line.removeprefix("Weak model: ").strip())
    return model


def _started(header: str | None) -> Any:
    match = SESSION_RE.match(header or "")
    return parse_time(match.group(1).replace(" ", "T")) if match else None


def build_messages(trajectory_id: str, dicts: list[dict[str, Any]]) -> list[Message]:
    """Message records from dicts, dropping keys whose value is unknown."""
    return [
        Message(trajectory_id=trajectory_id, idx=i, **{k: v for k, v in d.items() if v is not None})
        for i, d in enumerate(dicts)
    ]
