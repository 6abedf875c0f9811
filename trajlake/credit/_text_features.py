"""Turn text for the transcript-reading value sources: observations read from the lake and the
word fields of a turn (tools, arguments, thoughts, observations), hashed with
`trajlake._text_hashing`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trajlake._text_hashing import CLIP_CHARS, argument_words, words
from trajlake.credit._types import TrajectoryTurns, Turn
from trajlake.query import sql

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Key = tuple[str, str, int]
"""(trajectory_id, thread, turn)."""


def action_words(turn: Turn, limit: int = 48) -> list[str]:
    """Tool names and argument tokens of a turn's calls (`name(json)` lines of `action_text`)."""
    out: list[str] = []
    lines = turn.action_text.splitlines()
    for name in turn.tool_names:
        out.append("tool_" + re.sub(r"\W", "_", name.lower()))
        for line in lines:
            if line.startswith(name + "(") and line.endswith(")"):
                out += argument_words(line[len(name) + 1 : -1])
                break
    return out[:limit]


def thought_words(turn: Turn, limit: int = 24) -> list[str]:
    """Tokens of the assistant's own text (the lines of `action_text` that are not calls)."""
    calls = tuple(name + "(" for name in turn.tool_names)
    text = "\n".join(line for line in turn.action_text.splitlines() if not line.startswith(calls))
    return words(text, limit // 2, limit - limit // 2)


@dataclass(frozen=True)
class Observation:
    """What came back after a turn: the tool/user messages' text, joined, and their status."""

    text: str
    failed: bool
    """Some message of the turn reported an error or a non-zero exit code."""


def read_observations(
    lake: LakeStore, at: SnapshotRef, trajectories: Sequence[TrajectoryTurns]
) -> dict[Key, Observation]:
    """The observation text of every turn of `trajectories` (ends of long messages only)."""
    wanted = {t.trajectory_id for t in trajectories}
    query = f"""
        SELECT trajectory_id, thread, turn,
               string_agg(CASE WHEN length(txt) > {2 * CLIP_CHARS}
                               THEN left(txt, {CLIP_CHARS}) || chr(10) || right(txt, {CLIP_CHARS})
                               ELSE txt END, chr(10) ORDER BY idx) AS text,
               bool_or(coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0) AS failed
        FROM (SELECT trajectory_id, thread, turn, idx, is_error, exit_code,
                     coalesce(content, array_to_string(
                         list_transform(parts, lambda p: coalesce(p.text, '')), chr(10)), '') AS txt
              FROM messages WHERE role <> 'assistant' AND turn IS NOT NULL)
        GROUP BY trajectory_id, thread, turn
    """
    table = sql(lake, query, at=at).to_arrow()
    cols = [
        table.column(c).to_pylist() for c in ("trajectory_id", "thread", "turn", "text", "failed")
    ]
    return {
        (tid, thread, int(turn)): Observation(text or "", bool(failed))
        for tid, thread, turn, text, failed in zip(*cols, strict=True)
        if tid in wanted
    }


def turn_words(
    turn: Turn,
    observation: Observation | None,
    *,
    head: int = 24,
    tail: int = 40,
    cache: dict[tuple[str, tuple[str, ...]], list[list[str]]] | None = None,
) -> list[list[str]]:
    """A turn's token fields: action, thought, observation (n-grams never cross a field).

    `cache` keeps the action fields by action text: agents repeat their commands."""
    failed = turn.is_error or (observation is not None and observation.failed)
    status = ["status_failed" if failed else "status_ok"]
    obs = [] if observation is None else words(observation.text, head, tail)
    key = (turn.action_text, turn.tool_names)
    acts = cache.get(key) if cache is not None else None
    if acts is None:
        acts = [action_words(turn), thought_words(turn)]
        if cache is not None:
            if len(cache) > 200_000:  # bounded: a lake of unique commands must not grow it
                cache.clear()
            cache[key] = acts
    return [*acts, ["obs", *status, *obs]]
