"""Idempotent appends: drop rows whose key the lake (or the same batch) already holds.

Each table's key set is cached per process and extended with only the files a newer version
added, so a small commit does not rescan the table; compaction triggers one full reload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajlake.lake._storage import LakeLocation
from trajlake.lake._tables import TableStore
from trajlake.schema import PRIMARY_KEYS

# trajectories are also unique by content: the same rollout arriving from two formats.
# A trajectory's messages are written once, together: messages of a trajectory that already
# has messages stored are duplicates (keeping one id per trajectory, not one per message,
# keeps the in-memory key set as small as the trajectories').
_UNIQUE: dict[str, tuple[tuple[str, ...], ...]] = {
    **{t: (k,) for t, k in PRIMARY_KEYS.items() if t != "messages"},
    "trajectories": (("trajectory_id",), ("content_hash",)),
    "messages": (("trajectory_id",),),
}
_GROUPED = {"messages": PRIMARY_KEYS["messages"]}
"""Tables whose stored key is a group: rows repeat it within a batch, the full key may not."""


@dataclass
class _KeySet:
    version: int = -1
    files: set[str] = field(default_factory=set)
    keys: dict[tuple[str, ...], set[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class DedupeResult:
    """The rows to write, and how many were dropped as already stored, per table."""

    tables: dict[str, pa.Table]
    duplicates: dict[str, int]


class KeyIndex:
    """Per-table sets of stored keys, kept in step with pinned table versions."""

    def __init__(self, location: LakeLocation, tables: TableStore) -> None:
        self._location = location
        self._tables = tables
        self._sets: dict[str, _KeySet] = {}

    def _read(self, files: list[str], columns: list[str]) -> pa.Table:
        if self._location.is_local:
            return pq.read_table(files, columns=columns)
        fs = self._location.filesystem()
        paths = [f.split("://", 1)[1] for f in files]
        return pq.read_table(paths, columns=columns, filesystem=fs)

    def _refresh(self, table: str, version: int) -> _KeySet:
        current = self._sets.get(table)
        if current is not None and current.version == version:
            return current  # nobody else committed to this table since we last looked
        files = self._tables.files(table, version)
        if current is None or not current.files.issubset(files):
            current = _KeySet()  # compaction rewrote files: rebuild from scratch
            self._sets[table] = current
        new = [f for f in files if f not in current.files]
        columns = sorted({c for key in _UNIQUE[table] for c in key})
        if new:
            data = self._read(new, columns)
            for key in _UNIQUE[table]:
                current.keys.setdefault(key, set()).update(_key_values(data, key))
        for key in _UNIQUE[table]:
            current.keys.setdefault(key, set())
        current.files.update(new)
        current.version = version
        return current

    def dedupe(self, tables: Mapping[str, pa.Table], versions: Mapping[str, int]) -> DedupeResult:
        """Drop already-stored or repeated rows; messages follow their trajectories."""
        out: dict[str, pa.Table] = {}
        duplicates: dict[str, int] = {}
        for name, data in tables.items():
            if name not in _UNIQUE or data.num_rows == 0:
                out[name] = data
                continue
            stored = self._refresh(name, versions[name])
            if name in _GROUPED:
                keep = _fresh_group_mask(data, _UNIQUE[name][0], _GROUPED[name], stored.keys)
            else:
                keep = _fresh_mask(data, _UNIQUE[name], stored.keys)
            kept = data.filter(pa.array(keep, pa.bool_()))
            duplicates[name] = data.num_rows - kept.num_rows
            out[name] = kept
        if "messages" in out and "trajectories" in tables:
            ids = out["trajectories"].column("trajectory_id")
            messages = out["messages"]
            keep_messages = pc.is_in(messages.column("trajectory_id"), value_set=ids)
            out["messages"] = messages.filter(keep_messages)
            duplicates["messages"] = tables["messages"].num_rows - out["messages"].num_rows
        return DedupeResult(out, duplicates)

    def remember(
        self, table: str, before: int, after: int, files: list[str], data: pa.Table
    ) -> None:
        """Record a commit of ours (`before` → `after`), so the next one needs no re-read."""
        current = self._sets.get(table)
        if table not in _UNIQUE or current is None or current.version != before:
            return
        for key in _UNIQUE[table]:
            current.keys.setdefault(key, set()).update(_key_values(data, key))
        current.files.update(files)
        # Only the version right after ours is fully known; a gap means a foreign commit.
        if after == before + 1:
            current.version = after


def _key_values(data: pa.Table, key: tuple[str, ...]) -> set[Any]:
    columns = [data.column(c).to_pylist() for c in key]
    if len(key) == 1:
        return {v for v in columns[0] if v is not None}
    return {tuple(row) for row in zip(*columns, strict=True)}


def _fresh_group_mask(
    data: pa.Table,
    group: tuple[str, ...],
    full_key: tuple[str, ...],
    stored: dict[tuple[str, ...], set[Any]],
) -> list[bool]:
    """True for rows whose group is not stored and whose full key is new in the batch."""
    groups = data.column(group[0]).to_pylist()
    keys = list(zip(*(data.column(c).to_pylist() for c in full_key), strict=True))
    seen: set[Any] = set()
    mask = []
    for g, k in zip(groups, keys, strict=True):
        fresh = g not in stored[group] and k not in seen
        seen.add(k)
        mask.append(fresh)
    return mask


def _fresh_mask(
    data: pa.Table, unique: tuple[tuple[str, ...], ...], stored: dict[tuple[str, ...], set[Any]]
) -> list[bool]:
    """True for rows none of whose unique keys is stored or seen earlier in the batch."""
    columns = {c: data.column(c).to_pylist() for key in unique for c in key}
    seen: dict[tuple[str, ...], set[Any]] = {key: set() for key in unique}
    mask = []
    for i in range(data.num_rows):
        fresh = True
        values = []
        for key in unique:
            value = columns[key[0]][i] if len(key) == 1 else tuple(columns[c][i] for c in key)
            values.append(value)
            if value is not None and (value in stored[key] or value in seen[key]):
                fresh = False
        if fresh:
            for key, value in zip(unique, values, strict=True):
                if value is not None:
                    seen[key].add(value)
        mask.append(fresh)
    return mask
