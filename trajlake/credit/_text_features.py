"""Turn text for the transcript-reading value sources: observations read from the lake,
normalisation (numbers, paths, hashes, whitespace), tokens and signed hashed n-grams.

Hashes are deterministic across processes (CRC-32 of each token, mixed in numpy), so the same
turn always lands in the same buckets.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from trajlake.credit._types import TrajectoryTurns, Turn
from trajlake.query import sql

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Key = tuple[str, str, int]
"""(trajectory_id, thread, turn)."""

_HEX = re.compile(r"\b[0-9a-f]{7,64}\b")
_PATH = re.compile(
    r"[^\s'\"`()\[\]{}<>,;:=]*/[^\s'\"`()\[\]{}<>,;:=]*|\b[\w-]+\.(?:py|js|ts|go|rs|java|cpp|md|txt|json|ya?ml|toml|cfg|sh)\b"
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_PUNCT_RUN = re.compile(r"([^\w\s])\1+")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[a-z_][a-z0-9_]*")
_MAX_CHARS = 2000
"""Characters kept from each end of a long observation (tracebacks and test summaries sit at
the end, commands and headers at the start)."""


def normalise(text: str) -> str:
    """Lower-cased text with hashes → `hex`, paths → `path`, numbers → `num`, runs of one
    punctuation character collapsed and whitespace squeezed: what recurs across rollouts."""
    text = text.lower()
    text = _HEX.sub(" hex ", text)
    text = _PATH.sub(" path ", text)
    text = _NUMBER.sub(" num ", text)
    text = _PUNCT_RUN.sub(r"\1", text)
    return _SPACE.sub(" ", text).strip()


def clip(text: str, chars: int = _MAX_CHARS) -> str:
    """The first and last `chars` characters of a long text."""
    return text if len(text) <= 2 * chars else text[:chars] + "\n…\n" + text[-chars:]


def words(text: str, head: int, tail: int) -> list[str]:
    """Word tokens of normalised text, keeping the first `head` and last `tail` of them."""
    if len(text) > 16 * (head + tail):  # ample for the words kept; spares the regexes
        text = text[: 16 * head] + "\n" + text[-16 * tail :]
    tokens = _WORD.findall(normalise(text))
    return tokens if len(tokens) <= head + tail else tokens[:head] + tokens[-tail:]


def action_words(turn: Turn, limit: int = 48) -> list[str]:
    """Tool names and argument tokens of a turn's calls (`name(json)` lines of `action_text`)."""
    out: list[str] = []
    lines = turn.action_text.splitlines()
    for name in turn.tool_names:
        out.append("tool_" + re.sub(r"\W", "_", name.lower()))
        for line in lines:
            if line.startswith(name + "(") and line.endswith(")"):
                out += _argument_words(line[len(name) + 1 : -1])
                break
    return out[:limit]


def _argument_words(raw: str) -> list[str]:
    try:
        args: Any = json.loads(raw)
    except ValueError:
        return _WORD.findall(normalise(clip(raw, 500)))
    if not isinstance(args, dict):
        return _WORD.findall(normalise(clip(str(args), 500)))
    out: list[str] = []
    for key, value in args.items():
        out.append("arg_" + re.sub(r"\W", "_", str(key).lower()))
        text = value if isinstance(value, str) else json.dumps(value)
        out += _WORD.findall(normalise(clip(text, 500)))
    return out


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
               string_agg(CASE WHEN length(txt) > {2 * _MAX_CHARS}
                               THEN left(txt, {_MAX_CHARS}) || chr(10) || right(txt, {_MAX_CHARS})
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


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    # splitmix64 finaliser: spreads CRC-32 values over 64 bits so buckets and signs are
    # independent of each other.
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return np.asarray((x ^ (x >> np.uint64(31))) & _MASK64, dtype=np.uint64)


class NgramHasher:
    """Signed hashed uni- and bigrams of token fields (CRC-32 per token, cached)."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def hash_turns(
        self, turns: Sequence[Sequence[Sequence[str]]]
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """(hash, owner) of the distinct uni- and within-field bigrams of each turn's fields;
        `owner` is the turn's position in `turns`. Sorted by owner, then hash."""
        cache = self._cache
        flat: list[str] = []
        lengths: list[int] = []
        numbers: list[int] = []
        owners_of_field: list[int] = []
        for position, fields in enumerate(turns):
            for number, tokens in enumerate(fields):
                flat.extend(tokens)
                lengths.append(len(tokens))
                numbers.append(number)
                owners_of_field.append(position)
        for tok in set(flat).difference(cache):
            cache[tok] = zlib.crc32(tok.encode())
        lens = np.asarray(lengths, dtype=np.int64)
        salt = np.repeat(np.asarray(numbers, dtype=np.uint64) << np.uint64(32), lens)
        base = _mix(np.fromiter(map(cache.__getitem__, flat), np.uint64, len(flat)) + salt)
        who = np.repeat(np.asarray(owners_of_field, dtype=np.int64), lens)
        pair = np.ones(len(flat), dtype=bool)
        pair[np.cumsum(lens)[lens > 0] - 1] = False  # a field's last token starts no bigram
        ok = pair[:-1]
        with np.errstate(over="ignore"):
            bigram = _mix(base[:-1] * np.uint64(0x9E3779B97F4A7C15) ^ base[1:])[ok]
        hashes = np.concatenate([base, bigram])
        owners = np.concatenate([who, who[:-1][ok]])
        order = np.lexsort((hashes, owners))
        hashes, owners = hashes[order], owners[order]
        fresh = np.ones(len(hashes), dtype=bool)
        fresh[1:] = (hashes[1:] != hashes[:-1]) | (owners[1:] != owners[:-1])
        return hashes[fresh], owners[fresh]


def buckets(
    hashes: npt.NDArray[np.uint64], n_buckets: int, seed: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(bucket, ±1 sign) of each hash in a table of `n_buckets`, salted by `seed`."""
    mixed = _mix(hashes ^ np.uint64(seed))
    index = (mixed % np.uint64(n_buckets)).astype(np.int64)
    sign = np.where((mixed >> np.uint64(63)) == 1, -1.0, 1.0)
    return index, sign
