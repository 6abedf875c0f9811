"""Idempotent appends: drop rows whose key the lake (or the same batch) already holds.

Each table's stored keys are cached per process. A newer version is caught up by reading the
Delta commits in between: only files added with data changes are read (compaction rewrites
rows without changing them), and only a commit that removed data forces a full reload.

Trajectories are unique by id. With `content=True` they are also unique by content hash
(the same rollout read from two formats), which is opt-in: distinct samples can have the same
text (short answers across epochs or models) and must not be lost by default; the
`duplicates` view shows such groups. A trajectory's messages are written once, together:
messages of a trajectory that already has messages stored are duplicates (keeping one id per
trajectory rather than one key per message keeps the cache as small as the trajectories').
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

_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    **{t: (k,) for t, k in PRIMARY_KEYS.items() if t != "messages"},
    "trajectories": (("trajectory_id",), ("content_hash",)),
    "messages": (("trajectory_id",),),
}
"""Keys cached per table (content_hash is cached always, applied only on request)."""
_GROUPED = {"messages": PRIMARY_KEYS["messages"]}
"""Tables whose stored key is a group: rows repeat it within a batch, the full key may not."""


@dataclass
class _KeySet:
    version: int = -1
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

    def _add_files(self, table: str, current: _KeySet, files: list[str]) -> None:
        if not files:
            return
        columns = sorted({c for key in _KEYS[table] for c in key})
        data = self._read(files, columns)
        for key in _KEYS[table]:
            current.keys[key].update(_key_values(data, key))

    def _refresh(self, table: str, version: int) -> _KeySet:
        current = self._sets.get(table)
        if current is not None and current.version == version:
            return current  # nobody else committed to this table since we last looked
        if current is not None and 0 <= current.version < version:
            changes = self._tables.changes(table, current.version, version)
            if changes is not None and not changes.data_removed:
                uris = [self._tables.data_uri(table, p) for p in changes.data_added]
                self._add_files(table, current, uris)
                current.version = version
                return current
        current = _KeySet(keys={key: set() for key in _KEYS[table]})
        self._add_files(table, current, self._tables.files(table, version))
        current.version = version
        self._sets[table] = current
        return current

    def dedupe(
        self, tables: Mapping[str, pa.Table], versions: Mapping[str, int], *, content: bool
    ) -> DedupeResult:
        """Drop already-stored or repeated rows; messages follow their trajectories."""
        out: dict[str, pa.Table] = {}
        duplicates: dict[str, int] = {}
        for name, data in tables.items():
            if name not in _KEYS or data.num_rows == 0:
                out[name] = data
                continue
            stored = self._refresh(name, versions[name])
            if name in _GROUPED:
                keep = _fresh_groups(data, _KEYS[name][0], _GROUPED[name], stored.keys)
            else:
                keys = _KEYS[name] if content or name != "trajectories" else _KEYS[name][:1]
                keep = _fresh_mask(data, keys, stored.keys)
            out[name] = data if keep is None else data.filter(keep)
            duplicates[name] = data.num_rows - out[name].num_rows
        if "messages" in out and "trajectories" in tables:
            out["messages"] = _follow_trajectories(out["messages"], out["trajectories"])
            duplicates["messages"] = tables["messages"].num_rows - out["messages"].num_rows
        return DedupeResult(out, duplicates)

    def remember(
        self, table: str, before: int, after: int, files: list[str], data: pa.Table
    ) -> None:
        """Record a commit of ours (`before` → `after`), so the next one needs no re-read."""
        current = self._sets.get(table)
        if table not in _KEYS or current is None or current.version != before:
            return
        for key in _KEYS[table]:
            current.keys[key].update(_key_values(data, key))
        # Only the version right after ours is fully known; a gap means a foreign commit.
        if after == before + 1:
            current.version = after


def _key_values(data: pa.Table, key: tuple[str, ...]) -> set[Any]:
    columns = [data.column(c).to_pylist() for c in key]
    if len(key) == 1:
        return {v for v in columns[0] if v is not None}
    return {tuple(row) for row in zip(*columns, strict=True)}


def _follow_trajectories(messages: pa.Table, trajectories: pa.Table) -> pa.Table:
    """Messages whose trajectory is in the batch (cheap when all of them are)."""
    ids = trajectories.column("trajectory_id")
    message_ids = pc.unique(messages.column("trajectory_id"))
    if pc.all(pc.is_in(message_ids, value_set=ids)).as_py() is not False:
        return messages
    return messages.filter(pc.is_in(messages.column("trajectory_id"), value_set=ids))


def _fresh_groups(
    data: pa.Table,
    group: tuple[str, ...],
    full_key: tuple[str, ...],
    stored: dict[tuple[str, ...], set[Any]],
) -> pa.Array | None:
    """Rows whose group is not stored and whose full key is new in the batch (None: all).

    The common case — new trajectories, no repeated keys — is decided on unique ids and one
    group-by, without touching rows one by one.
    """
    ids = pc.unique(data.column(group[0])).to_pylist()
    known = stored[group]
    hit = any(i in known for i in ids)
    counts = data.group_by(list(full_key)).aggregate([([], "count_all")])
    repeated = counts.num_rows < data.num_rows
    if not hit and not repeated:
        return None
    seen: set[Any] = set()
    mask = []
    groups = data.column(group[0]).to_pylist()
    keys = zip(*(data.column(c).to_pylist() for c in full_key), strict=True)
    for g, k in zip(groups, keys, strict=True):
        mask.append(g not in known and k not in seen)
        seen.add(k)
    return pa.array(mask, pa.bool_())


def _fresh_mask(
    data: pa.Table, unique: tuple[tuple[str, ...], ...], stored: dict[tuple[str, ...], set[Any]]
) -> pa.Array | None:
    """Rows none of whose unique keys is stored or seen earlier in the batch (None: all)."""
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
    return None if all(mask) else pa.array(mask, pa.bool_())
