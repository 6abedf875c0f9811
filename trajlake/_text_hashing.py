"""Hashed text features shared by the value sources that read transcripts (credit) and the sparse
value model (value): normalisation (numbers, paths, hashes, whitespace), word tokens and signed
hashed uni- and bigrams.

Hashes are deterministic across processes (CRC-32 of each token, mixed in numpy), so the same
text always lands in the same buckets. numpy only: inference (`trajlake.serve`) scores sparse
models with it without loading credit.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CLIP_CHARS",
    "WORD",
    "NgramHasher",
    "argument_words",
    "buckets",
    "clip",
    "normalise",
    "words",
]

_HEX = re.compile(r"\b[0-9a-f]{7,64}\b")
_PATH = re.compile(
    r"[^\s'\"`()\[\]{}<>,;:=]*/[^\s'\"`()\[\]{}<>,;:=]*|\b[\w-]+\.(?:py|js|ts|go|rs|java|cpp|md|txt|json|ya?ml|toml|cfg|sh)\b"
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_PUNCT_RUN = re.compile(r"([^\w\s])\1+")
_SPACE = re.compile(r"\s+")
WORD = re.compile(r"[a-z_][a-z0-9_]*")
CLIP_CHARS = 2000
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


def clip(text: str, chars: int = CLIP_CHARS) -> str:
    """The first and last `chars` characters of a long text."""
    return text if len(text) <= 2 * chars else text[:chars] + "\n…\n" + text[-chars:]


def words(text: str, head: int, tail: int) -> list[str]:
    """Word tokens of normalised text, keeping the first `head` and last `tail` of them."""
    if len(text) > 16 * (head + tail):  # ample for the words kept; spares the regexes
        text = text[: 16 * head] + "\n" + text[-16 * tail :]
    tokens = WORD.findall(normalise(text))
    return tokens if len(tokens) <= head + tail else tokens[:head] + tokens[-tail:]


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


def argument_words(raw: str) -> list[str]:
    """Argument keys (`arg_<key>`) and value words of a tool call's JSON arguments; the words
    of the raw text when it is not a JSON object."""
    try:
        args: Any = json.loads(raw)
    except ValueError:
        return WORD.findall(normalise(clip(raw, 500)))
    if not isinstance(args, dict):
        return WORD.findall(normalise(clip(str(args), 500)))
    out: list[str] = []
    for key, value in args.items():
        out.append("arg_" + re.sub(r"\W", "_", str(key).lower()))
        text = value if isinstance(value, str) else json.dumps(value)
        out += WORD.findall(normalise(clip(text, 500)))
    return out
