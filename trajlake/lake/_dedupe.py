"""Idempotent appends: drop rows whose key the lake (or the same batch) already holds, and
sort trajectories whose id is taken into duplicates, updates and conflicts (`_identity`).

Each table's stored keys are cached per process, as counts (a key leaves when its last row
does), with each trajectory's content hash. A newer version is caught up by reading the Delta
commits in between: only files whose rows arrived or left are read, key columns only
(compaction moves rows without changing them and is skipped); a full reload happens only when
a commit is no longer in the log or a file it names is gone.

Trajectories are unique by id. With `content=True` they are also unique by content hash
(the same rollout read from two formats), which is opt-in: distinct samples can have the same
text (short answers across epochs or models) and must not be lost by default; the
`duplicates` view shows such groups. A trajectory's messages are written once, together, and
follow the decision on their trajectory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trajlake.lake._identity import (
    COMPARED_COLUMNS,
    EXAMPLES_KEPT,
    BatchMessages,
    IdentityExample,
    Resolution,
    conflict_base,
    mark_conflict_attrs,
    resolve,
    source_of,
    stored_fingerprints,
)
from trajlake.lake._storage import LakeLocation
from trajlake.lake._tables import TableStore, read_parquet
from trajlake.schema import PRIMARY_KEYS

_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    **{t: (k,) for t, k in PRIMARY_KEYS.items() if t != "messages"},
    "trajectories": (("trajectory_id",), ("content_hash",)),
    "messages": (("trajectory_id",),),
}
"""Keys cached per table (content_hash is cached always, applied only on request)."""
_GROUPED = {"messages": PRIMARY_KEYS["messages"]}
"""Tables whose stored key is a group: rows repeat it within a batch, the full key may not."""
_ID = ("trajectory_id",)
_HASH = ("content_hash",)


@dataclass
class _KeySet:
    version: int = -1
    counts: dict[tuple[str, ...], Counter[Any]] = field(default_factory=dict)
    """Stored rows per key value (trajectories: per content hash; ids are in `hash_of`)."""
    hash_of: dict[str, str | None] = field(default_factory=dict)
    """Trajectories: stored id → its content hash."""
    copies: dict[str, list[str]] = field(default_factory=dict)
    """Trajectories: id → the conflict copies stored beside it."""

    def apply(self, table: str, data: pa.Table, sign: int) -> None:
        """Count rows in (`sign` 1) or out (-1)."""
        if table == "trajectories":
            self._apply_trajectories(data, sign)
            return
        for key in _KEYS[table]:
            _count(self.counts.setdefault(key, Counter()), _key_values(data, key), sign)

    def _apply_trajectories(self, data: pa.Table, sign: int) -> None:
        ids = data.column("trajectory_id").to_pylist()
        hashes = data.column("content_hash").to_pylist()
        _count(self.counts.setdefault(_HASH, Counter()), [h for h in hashes if h], sign)
        if sign > 0:
            self.hash_of.update(zip(ids, hashes, strict=True))
        else:
            for tid in ids:
                self.hash_of.pop(tid, None)
        if not pc.any(pc.match_substring(data.column("trajectory_id"), "~")).as_py():
            return  # no conflict copies among them (the common case, decided in Arrow)
        for tid in ids:
            base = conflict_base(tid)
            if base is None:
                continue
            held = self.copies.setdefault(base, [])
            if sign > 0 and tid not in held:
                held.append(tid)
            elif sign < 0 and tid in held:
                held.remove(tid)


def _count(counter: Counter[Any], values: list[Any], sign: int) -> None:
    if sign > 0:
        counter.update(values)
        return
    counter.subtract(values)
    for value in set(values):
        if counter[value] <= 0:
            del counter[value]


@dataclass(frozen=True)
class DedupeResult:
    """The rows to write, what was dropped or replaced per table, and examples of each."""

    tables: dict[str, pa.Table]
    duplicates: dict[str, int]
    updated: dict[str, int] = field(default_factory=dict)
    conflicts: dict[str, int] = field(default_factory=dict)
    replaced: frozenset[str] = frozenset()
    """Stored trajectory ids whose rows (trajectories, messages) the commit replaces."""
    examples: tuple[IdentityExample, ...] = ()


class KeyIndex:
    """Per-table counts of stored keys, kept in step with pinned table versions."""

    def __init__(self, location: LakeLocation, tables: TableStore) -> None:
        self._location = location
        self._tables = tables
        self._sets: dict[str, _KeySet] = {}

    def _read_keys(self, table: str, paths: Iterable[str]) -> pa.Table:
        uris = [self._tables.data_uri(table, p) for p in paths]
        columns = sorted({c for key in _KEYS[table] for c in key})
        return read_parquet(self._location, uris, columns)

    def _refresh(self, table: str, version: int) -> _KeySet:
        current = self._sets.get(table)
        if current is not None and current.version == version:
            return current  # nobody else committed to this table since we last looked
        if current is not None and 0 <= current.version < version:
            changes = self._tables.changes(table, current.version, version)
            if changes is not None and self._catch_up(table, current, changes.net_data_changes()):
                current.version = version
                return current
        current = _KeySet()
        files = self._tables.files(table, version)
        if files:
            columns = sorted({c for key in _KEYS[table] for c in key})
            current.apply(table, read_parquet(self._location, files, columns), 1)
        current.version = version
        self._sets[table] = current
        return current

    def _catch_up(self, table: str, current: _KeySet, change: tuple[list[str], list[str]]) -> bool:
        """Apply the rows that arrived and left; False if a file is gone (reload instead)."""
        arrived, left = change
        try:
            gone = self._read_keys(table, left) if left else None
            new = self._read_keys(table, arrived) if arrived else None
        except FileNotFoundError:
            return False
        if gone is not None:
            current.apply(table, gone, -1)
        if new is not None:
            current.apply(table, new, 1)
        return True

    def dedupe(
        self, tables: Mapping[str, pa.Table], versions: Mapping[str, int], *, content: bool
    ) -> DedupeResult:
        """Drop already-stored or repeated rows; decide taken trajectory ids; messages follow."""
        out: dict[str, pa.Table] = {}
        duplicates: dict[str, int] = {}
        identity: _TrajectoryDecision | None = None
        trajectories = tables.get("trajectories")
        if trajectories is not None and trajectories.num_rows:
            stored = self._refresh("trajectories", versions["trajectories"])
            messages = tables.get("messages")
            groups = self._refresh("messages", versions["messages"]) if messages else None
            identity = _TrajectoryDecision(self, stored, groups, versions["messages"], content)
            out.update(identity.run(trajectories, messages))
            duplicates.update(identity.duplicates)
        for name, data in tables.items():
            if name in out:
                continue
            if name not in _KEYS or data.num_rows == 0:
                out[name] = data
                continue
            stored = self._refresh(name, versions[name])
            if name in _GROUPED:
                keep = _fresh_groups(data, _KEYS[name][0], _GROUPED[name], stored.counts)
            else:
                keep = _fresh_mask(data, _KEYS[name], stored.counts)
            out[name] = data if keep is None else data.filter(keep)
            duplicates[name] = data.num_rows - out[name].num_rows
        if identity is None:
            return DedupeResult(out, duplicates)
        return DedupeResult(
            out,
            duplicates,
            {"trajectories": identity.updated},
            {"trajectories": identity.conflicts},
            frozenset(identity.resolution.replaced),
            tuple(identity.examples),
        )

    def stored_prints(self, messages_version: int, ids: set[str]) -> dict[str, Any]:
        """Fingerprints of the stored messages of some trajectories."""
        rows = self._tables.rows_of("messages", messages_version, ids, COMPARED_COLUMNS)
        return stored_fingerprints(rows)

    def remember(
        self,
        table: str,
        before: int,
        after: int,
        data: pa.Table,
        removed: pa.Table | None = None,
    ) -> None:
        """Record a commit of ours (`before` → `after`), so the next one needs no re-read."""
        current = self._sets.get(table)
        if table not in _KEYS or current is None or current.version != before:
            return
        if removed is not None and removed.num_rows:
            current.apply(table, removed, -1)
        current.apply(table, data, 1)
        # Only the version right after ours is fully known; a gap means a foreign commit.
        if after == before + 1:
            current.version = after


class _TrajectoryDecision:
    """The trajectories of one batch sorted into new, duplicates, updates and conflicts."""

    def __init__(
        self,
        index: KeyIndex,
        stored: _KeySet,
        groups: _KeySet | None,
        messages_version: int,
        content: bool,
    ) -> None:
        self.index = index
        self.stored = stored
        self.groups = groups
        self.messages_version = messages_version
        self.content = content
        self.duplicates: dict[str, int] = {}
        self.updated = 0
        self.conflicts = 0
        self.examples: list[IdentityExample] = []
        self.resolution = Resolution([], set())
        self.batch = BatchMessages(None, set())

    def run(self, trajectories: pa.Table, messages: pa.Table | None) -> dict[str, pa.Table]:
        ids = trajectories.column("trajectory_id").to_pylist()
        colliding = self._colliding(ids, trajectories.column("content_hash").to_pylist())
        plain = [i for i, tid in enumerate(ids) if tid not in colliding]
        keep_plain = self._plain(trajectories, plain)
        written = self._collisions(trajectories, messages, colliding, keep_plain)
        rows = sorted(keep_plain + [v.row for v in written if v.row is not None])
        whole = len(rows) == trajectories.num_rows  # the common case: all new, nothing to copy
        kept = trajectories if whole else trajectories.take(pa.array(rows, pa.int64()))
        renamed = {v.row: v for v in written if v.stored_as is not None}
        if renamed:
            kept = _rename(kept, rows, renamed)
        self.duplicates["trajectories"] = trajectories.num_rows - kept.num_rows
        out = {"trajectories": kept}
        if messages is not None:
            out["messages"] = self._messages(messages, kept, colliding, written)
            self.duplicates["messages"] = messages.num_rows - out["messages"].num_rows
        return out

    def _colliding(self, ids: list[str], hashes: list[str | None]) -> dict[str, list[int]]:
        """Ids whose versions (stored, and in the batch) do not all share one content hash."""
        repeated = {tid for tid, n in Counter(ids).items() if n > 1}
        hash_of = self.stored.hash_of
        candidates = repeated | {tid for tid in ids if tid in hash_of}
        if not candidates:
            return {}
        rows: dict[str, list[int]] = {}
        for i, tid in enumerate(ids):
            if tid in candidates:
                rows.setdefault(tid, []).append(i)
        out = {}
        for tid, at in rows.items():
            known = {hashes[i] for i in at}
            if tid in hash_of:
                known.add(hash_of[tid])
            if len(known) > 1 or None in known:
                out[tid] = at
        return out

    def _plain(self, trajectories: pa.Table, plain: list[int]) -> list[int]:
        """Rows whose versions agree on their hash: new, or duplicates (the first one wins)."""
        if not plain:
            return []
        every = len(plain) == trajectories.num_rows
        data = trajectories if every else trajectories.take(pa.array(plain, pa.int64()))
        keys = _KEYS["trajectories"] if self.content else _KEYS["trajectories"][:1]
        stored: dict[tuple[str, ...], Any] = {
            _ID: self.stored.hash_of,
            _HASH: self.stored.counts.get(_HASH, Counter()),
        }
        keep = _fresh_mask(data, keys, stored)
        if keep is None:
            return plain
        flags = keep.to_pylist()
        for row, fresh in zip(plain, flags, strict=True):
            if not fresh:
                self._example(
                    "duplicate", trajectories, row, None, self._plain_detail(trajectories, row)
                )
        return [row for row, fresh in zip(plain, flags, strict=True) if fresh]

    def _plain_detail(self, trajectories: pa.Table, row: int) -> str:
        tid = trajectories.column("trajectory_id")[row].as_py()
        if tid in self.stored.hash_of:
            return "same id and content as the stored trajectory"
        if self.content:
            return "same content as a trajectory already stored or earlier in the commit"
        return "repeats a trajectory earlier in the same commit"

    def _collisions(
        self,
        trajectories: pa.Table,
        messages: pa.Table | None,
        colliding: dict[str, list[int]],
        keep_plain: list[int],
    ) -> list[Any]:
        """Resolve the colliding ids; return the versions to write."""
        if not colliding:
            return []
        self.batch = BatchMessages(messages, set(colliding))
        self.resolution = resolve(
            trajectories,
            colliding,
            self.stored.hash_of,
            self.stored.copies,
            self.batch,
            lambda ids: self.index.stored_prints(self.messages_version, ids),
        )
        seen = set(
            trajectories.take(pa.array(keep_plain, pa.int64())).column("content_hash").to_pylist()
        )
        hashes = self.stored.counts.get(_HASH, Counter())
        written = []
        for v in self.resolution.versions:
            if self.content and v.kind in ("added", "conflict"):
                if v.content_hash in hashes or v.content_hash in seen:
                    v.kind, v.stored_as = "duplicate", None
                    v.detail = "same content as another trajectory (content dedupe)"
                seen.add(v.content_hash)
            self._example(v.kind, trajectories, v.row, v.stored_as, v.detail)
            if v.kind == "updated":
                self.updated += 1
            elif v.kind == "conflict":
                self.conflicts += 1
            if v.kind != "duplicate":
                written.append(v)
        return written

    def _example(
        self, kind: Any, trajectories: pa.Table, row: int | None, stored_as: str | None, detail: str
    ) -> None:
        if kind == "added" or row is None:
            return
        if sum(1 for e in self.examples if e.kind == kind) >= EXAMPLES_KEPT:
            return
        tid = trajectories.column("trajectory_id")[row].as_py()
        self.examples.append(
            IdentityExample(kind, tid, source_of(trajectories, row), detail, stored_as)
        )

    def _messages(
        self,
        messages: pa.Table,
        kept: pa.Table,
        colliding: dict[str, list[int]],
        written: list[Any],
    ) -> pa.Table:
        """Messages of the written trajectories: plain ones follow their id, colliding ones
        the version they were attributed to (renamed with it)."""
        if colliding:
            others = pc.invert(
                pc.is_in(messages.column("trajectory_id"), value_set=pa.array(sorted(colliding)))
            )
            plain = messages.filter(others)
        else:
            plain = messages
        plain = _follow_trajectories(plain, kept)
        groups = self.groups.counts if self.groups is not None else {_ID: Counter()}
        keep = _fresh_groups(plain, _ID, _GROUPED["messages"], groups)
        plain = plain if keep is None else plain.filter(keep)
        if not written:
            return plain
        parts = [plain]
        for v in written:
            positions = self.batch.batch_positions(v)
            if not positions:
                continue
            rows = messages.take(pa.array(positions, pa.int64()))
            if v.stored_as is not None:
                ids = pa.array([v.stored_as] * rows.num_rows, pa.string())
                rows = rows.set_column(
                    rows.schema.get_field_index("trajectory_id"),
                    rows.schema.field("trajectory_id"),
                    ids,
                )
            parts.append(rows)
        return pa.concat_tables(parts)


def _rename(kept: pa.Table, rows: list[int], renamed: Mapping[int, Any]) -> pa.Table:
    """Give conflict copies (and updates of one) their stored id and `attrs.id_conflict_of`."""
    ids = kept.column("trajectory_id").to_pylist()
    attrs = kept.column("attrs").to_pylist()
    for at, row in enumerate(rows):
        v = renamed.get(row)
        if v is not None:
            attrs[at] = mark_conflict_attrs(attrs[at], ids[at])
            ids[at] = v.stored_as
    at = kept.schema.get_field_index("trajectory_id")
    kept = kept.set_column(at, kept.schema.field(at), pa.array(ids, pa.string()))
    field_ = kept.schema.field("attrs")
    return kept.set_column(
        kept.schema.get_field_index("attrs"), field_, pa.array(attrs, field_.type)
    )


def _key_values(data: pa.Table, key: tuple[str, ...]) -> list[Any]:
    columns = [data.column(c).to_pylist() for c in key]
    if len(key) == 1:
        return [v for v in columns[0] if v is not None]
    return [tuple(row) for row in zip(*columns, strict=True)]


def _follow_trajectories(messages: pa.Table, trajectories: pa.Table) -> pa.Table:
    """Messages whose trajectory is in the batch (cheap when all of them are)."""
    ids = trajectories.column("trajectory_id")
    message_ids = pc.unique(messages.column("trajectory_id"))
    if pc.all(pc.is_in(message_ids, value_set=ids)).as_py() is not False:
        return messages
    return messages.filter(pc.is_in(messages.column("trajectory_id"), value_set=ids))


def _may_repeat(data: pa.Table, key: tuple[str, ...]) -> bool:
    """Whether some `key` may repeat in `data` (True can be wrong, False never is).

    The key columns are joined into one string per row and counted: equal keys give equal
    strings, so fewer distinct strings than rows is what a repeat looks like. Distinct keys
    that join alike (a value holding the separator, null next to "") only send the caller to
    its exact row-by-row check. A group-by would say it exactly but loads Arrow's query engine
    (and with it pandas: about half a second of every ingest).
    """
    if len(key) == 1:
        return bool(pc.count_distinct(data.column(key[0]), mode="all").as_py() < data.num_rows)
    parts = [pc.cast(data.column(c), pa.string()) for c in key]
    joined = pc.binary_join_element_wise(
        *parts, "\x00", null_handling="replace", null_replacement=""
    )
    return bool(pc.count_distinct(joined, mode="all").as_py() < data.num_rows)


def _fresh_groups(
    data: pa.Table,
    group: tuple[str, ...],
    full_key: tuple[str, ...],
    stored: Mapping[tuple[str, ...], Any],
) -> pa.Array | None:
    """Rows whose group is not stored and whose full key is new in the batch (None: all).

    The common case — new trajectories, no repeated keys — is decided on unique ids and one
    group-by, without touching rows one by one.
    """
    if data.num_rows == 0:
        return None
    ids = pc.unique(data.column(group[0])).to_pylist()
    known = stored.get(group, ())
    hit = any(i in known for i in ids)
    if not hit and not _may_repeat(data, full_key):
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
    data: pa.Table, unique: tuple[tuple[str, ...], ...], stored: Mapping[tuple[str, ...], Any]
) -> pa.Array | None:
    """Rows none of whose unique keys is stored or seen earlier in the batch (None: all)."""
    columns = {c: data.column(c).to_pylist() for key in unique for c in key}
    seen: dict[tuple[str, ...], set[Any]] = {key: set() for key in unique}
    known = {key: stored.get(key, ()) for key in unique}
    mask = []
    for i in range(data.num_rows):
        fresh = True
        values = []
        for key in unique:
            value = columns[key[0]][i] if len(key) == 1 else tuple(columns[c][i] for c in key)
            values.append(value)
            if value is not None and (value in known[key] or value in seen[key]):
                fresh = False
        if fresh:
            for key, value in zip(unique, values, strict=True):
                if value is not None:
                    seen[key].add(value)
        mask.append(fresh)
    return None if all(mask) else pa.array(mask, pa.bool_())
