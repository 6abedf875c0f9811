"""`trajlake show`: a trajectory as a readable transcript (header, then each thread's messages).

Long tool results and arguments are cut to `MAX_LINES` unless `--full`: tool output is what makes
agent transcripts long. The header shows the effective outcome (a label beats what the rollout
recorded), looked up in the `outcomes` view; `--output json` keeps the stored record instead, so it
ingests back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from trajlake.api import Lake
    from trajlake.schema import CanonicalTrajectory, Message, ToolCall

MAX_LINES = 40
"""Tool results and long arguments are cut to this many lines unless `--full`."""
ONE_LINE_ARGUMENTS = 100

ROLE_STYLES = {
    "system": "magenta",
    "user": "green",
    "assistant": "bold cyan",
    "tool": "yellow",
}


def _join(*parts: str | None, sep: str = " · ") -> str:
    return sep.join(p for p in parts if p)


def _count(n: int | None, what: str) -> str | None:
    return None if n is None else f"{n:,} {what}"


EFFECTIVE = "effective_outcome"
"""Key of `attrs` where `show` puts the trajectory's effective outcome (see `outcomes`)."""


def with_effective_outcome(
    lake: Lake, record: CanonicalTrajectory, at: str | None
) -> CanonicalTrajectory:
    """A copy of the record whose attrs carry its effective outcome from the `outcomes` view:
    `{resolved, reward, source}`, where source is `label:<source>` or what the rollout said."""
    rows = lake.sql(
        "SELECT resolved, reward, outcome_source FROM outcomes WHERE trajectory_id = ?",
        [record.trajectory_id],
        at=at,
    ).rows()
    if not rows:
        return record
    resolved, reward, source = rows[0]
    effective = {"resolved": resolved, "reward": reward, "source": source}
    return record.model_copy(update={"attrs": {**(record.attrs or {}), EFFECTIVE: effective}})


def _verdict(resolved: bool | None, reward: float | None, source: str | None) -> str:
    return _join(
        None if resolved is None else ("resolved" if resolved else "unresolved"),
        None if reward is None else f"reward {reward:g}",
        source and f"judged by {source}",
    )


def _outcome_rows(t: CanonicalTrajectory) -> list[tuple[str, str]]:
    """The effective outcome (and the rollout's own when a label overrides it)."""
    own = _verdict(t.resolved, t.reward, t.outcome_source)
    effective = (t.attrs or {}).get(EFFECTIVE)
    if not isinstance(effective, dict):
        return [("outcome", _join(t.status, own))]
    shown = _verdict(effective.get("resolved"), effective.get("reward"), effective.get("source"))
    rows = [("outcome", _join(t.status, shown or "no verdict"))]
    if own and own != shown:
        rows.append(("recorded", own))
    return rows


def header_fields(t: CanonicalTrajectory) -> Iterator[tuple[str, str]]:
    """(label, value) lines of the header, skipping what the trajectory does not record."""
    rows = [
        ("task", _join(t.task_id, t.task_source and f"({t.task_source})", sep=" ")),
        ("harness", _join(t.harness, t.harness_version, sep=" ")),
        ("model", t.policy_model or ""),
        *_outcome_rows(t),
        (
            "turns",
            _join(
                _count(t.n_turns, "turns"),
                _count(t.n_tool_calls, "tool calls"),
                _count(t.n_messages, "messages"),
            ),
        ),
        (
            "tokens",
            _join(
                _count(t.prompt_tokens, "prompt"),
                _count(t.completion_tokens, "completion"),
                _count(t.total_tokens, "total"),
            ),
        ),
        (
            "run",
            _join(
                t.run_id,
                t.stage and f"stage {t.stage}",
                None if t.generation is None else f"generation {t.generation}",
            ),
        ),
        ("started", t.started_at.isoformat() if t.started_at else ""),
        ("source", _join(t.source_format, t.source_uri)),
    ]
    return ((label, value) for label, value in rows if value)


def _clip(text: str, full: bool) -> str:
    lines = text.splitlines()
    if full or len(lines) <= MAX_LINES:
        return text
    hidden = len(lines) - MAX_LINES
    return "\n".join([*lines[:MAX_LINES], f"… {hidden} more lines (--full shows all)"])


def format_arguments(arguments: str | None, full: bool) -> str:
    """Tool-call arguments: compact JSON when short, indented (and clipped) when long."""
    if not arguments:
        return ""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return _clip(arguments, full)
    compact = json.dumps(parsed, ensure_ascii=False)
    if len(compact) <= ONE_LINE_ARGUMENTS:
        return compact
    return _clip(json.dumps(parsed, ensure_ascii=False, indent=2), full)


def _message_title(m: Message) -> Text:
    style = "bold red" if m.role == "tool" and m.is_error else ROLE_STYLES.get(m.role, "")
    title = Text(f"[{m.idx}] ", style="dim")
    title.append(m.role, style=style)
    details = _join(
        m.name if m.role == "tool" else None,
        None if m.turn is None else f"turn {m.turn}",
        None if m.exit_code is None else f"exit {m.exit_code}",
        "error" if m.is_error else None,
        "copied context" if m.is_copied_context else None,
    )
    if details:
        title.append(f"  {details}", style="dim")
    return title


def _tool_call(call: ToolCall, full: bool) -> Text:
    text = Text("  → ", style="dim")
    text.append(call.name, style="bold")
    arguments = format_arguments(call.arguments, full)
    if arguments:
        text.append(" " + arguments.replace("\n", "\n    "))
    return text


def _body(console: Console, m: Message, full: bool) -> None:
    # soft_wrap: long lines are left to the terminal (or pager), not broken into the text.
    if m.reasoning:
        console.print(Text(m.reasoning, style="dim italic"), soft_wrap=True)
    if m.content:
        # What the model and the user wrote is shown whole; only tool output is cut.
        content = _clip(m.content, full) if m.role == "tool" else m.content
        console.print(Text(content), soft_wrap=True)
    for part in m.parts or ():
        if part.type != "text":
            reference = f"[{part.type}] {part.uri or ''} {part.mime_type or ''}".rstrip()
            console.print(Text(reference, style="dim"), soft_wrap=True)
    for call in m.tool_calls or ():
        console.print(_tool_call(call, full), soft_wrap=True)


def render_transcript(console: Console, t: CanonicalTrajectory, *, full: bool = False) -> None:
    """Print the header and every message, thread by thread, in stored order."""
    console.print(Text(f"trajectory {t.trajectory_id}", style="bold"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    for label, value in header_fields(t):
        grid.add_row(label, Text(value))
    console.print(grid)
    thread: str | None = None
    for m in t.messages:
        if m.thread != thread:
            thread = m.thread
            console.print(Rule(Text(f"thread {thread}"), style="dim"))
        else:
            console.print()
        console.print(_message_title(m))
        _body(console, m, full)
