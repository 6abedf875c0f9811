"""Trajectory identity: whether a trajectory whose id is taken is a duplicate, an update or a
conflict.

Same id and same content hash: a duplicate. Same id and messages that extend the stored ones
(every stored message is still there, unchanged, at its thread and position; a live session
read again later): an update, the longer one becomes current. Messages that are a part of the
stored ones: an older version, counted as a duplicate. Anything else: a conflict, kept under
a derived id `<id>~<hash8>` with `attrs.id_conflict_of`. Messages are compared only for ids
that collide with another content hash, on the fields the content hash covers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from trajlake.errors import InvalidRecord

COMPARED_COLUMNS = ("trajectory_id", "thread", "idx", "role", "content", "reasoning", "tool_calls")
"""Message columns read to compare two versions of a trajectory."""
EXAMPLES_KEPT = 20
"""Examples of each kind kept per commit (and per ingest report)."""
_CONFLICT_SEP = "~"

Kind = Literal["added", "updated", "duplicate", "conflict"]
Relation = Literal["same", "extends", "older", "differs"]
Fingerprints = dict[tuple[str, int], str]
"""(thread, idx) → the message's compared fields, joined."""


def conflict_id(trajectory_id: str, content_hash: str | None) -> str:
    """The id a conflicting trajectory is kept under: deterministic, so re-ingest adds nothing."""
    return f"{trajectory_id}{_CONFLICT_SEP}{(content_hash or 'nohash')[:8]}"


def conflict_base(trajectory_id: str) -> str | None:
    """The id a conflict copy was derived from (None: not a conflict copy)."""
    base, sep, suffix = trajectory_id.rpartition(_CONFLICT_SEP)
    return base if sep and base and len(suffix) == 8 else None


@dataclass(frozen=True)
class IdentityExample:
    """One trajectory whose id was taken, what became of it, and where it was read."""

    kind: Kind
    trajectory_id: str
    source: str | None
    detail: str
    stored_as: str | None = None
    """For conflicts (and updates of a conflict copy): the id it was stored under."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {"kind": self.kind, "trajectory_id": self.trajectory_id, "source": self.source}
        if self.stored_as is not None:
            out["stored_as"] = self.stored_as
        return {**out, "detail": self.detail}


@dataclass
class _Version:
    """One version of a trajectory: stored (row None) or a row of the batch."""

    trajectory_id: str
    content_hash: str | None
    row: int | None = None
    messages: list[int] = field(default_factory=list)
    """Positions of its rows in the batch's messages (batch versions)."""
    kind: Kind = "added"
    stored_as: str | None = None
    detail: str = ""


@dataclass
class Resolution:
    """What to write for the rows of the batch whose id collides."""

    versions: list[_Version]
    """Every batch version of a colliding id, with its decision."""
    replaced: set[str]
    """Stored ids whose rows are replaced by an update."""


def relation(old: Fingerprints, new: Fingerprints) -> Relation:
    """How `new` relates to `old`: the same messages, an extension, an older part, or not."""
    if len(old) <= len(new) and all(new.get(k) == v for k, v in old.items()):
        return "same" if len(old) == len(new) else "extends"
    if all(old.get(k) == v for k, v in new.items()):
        return "older"
    return "differs"


def fingerprints(messages: pa.Table) -> pa.Array:
    """Each message's compared fields (role, content, reasoning, tool-call names and arguments)
    joined into one string, computed on the Arrow columns."""
    if messages.num_rows == 0:
        return pa.array([], pa.string())
    calls = messages.column("tool_calls").combine_chunks()
    offsets = pc.subtract(calls.offsets, calls.offsets[0])
    flat = pc.list_flatten(calls)
    pairs = pc.binary_join_element_wise(
        pc.fill_null(pc.struct_field(flat, "name"), ""),
        pc.fill_null(pc.struct_field(flat, "arguments"), ""),
        "\x1f",
    )
    # A null list and an empty one read alike: neither has a call.
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, pairs), "\x1d")
    return pc.binary_join_element_wise(
        pc.fill_null(messages.column("role").cast(pa.string()), ""),
        pc.fill_null(messages.column("content"), ""),
        pc.fill_null(messages.column("reasoning"), ""),
        pc.fill_null(joined, ""),
        "\x1e",
    )


def stored_fingerprints(stored: pa.Table) -> dict[str, Fingerprints]:
    """Fingerprints of stored messages, per trajectory id."""
    out: dict[str, Fingerprints] = {}
    prints = fingerprints(stored).to_pylist()
    ids = stored.column("trajectory_id").to_pylist()
    threads = stored.column("thread").to_pylist()
    idxs = stored.column("idx").to_pylist()
    for tid, thread, idx, fp in zip(ids, threads, idxs, prints, strict=True):
        out.setdefault(tid, {})[(thread, idx)] = fp
    return out


def source_of(trajectories: pa.Table, row: int) -> str | None:
    """`file:line` (or the file) a batch row was read from."""
    uri = trajectories.column("source_uri")[row].as_py()
    line = trajectories.column("source_line")[row].as_py()
    if uri is None:
        return None
    return f"{uri}:{line}" if line is not None else uri


class BatchMessages:
    """The batch's messages of colliding ids, attributed to the batch rows they belong to."""

    def __init__(self, messages: pa.Table | None, ids: set[str]) -> None:
        self.prints: list[str] = []
        self.keys: list[tuple[str, int]] = []
        self.positions: dict[str, list[int]] = {}
        self._batch_positions: list[int] = []
        if messages is None or not ids:
            return
        mine = pc.is_in(messages.column("trajectory_id"), value_set=pa.array(sorted(ids)))
        positions = pc.indices_nonzero(mine)
        sub = messages.select(list(COMPARED_COLUMNS)).take(positions)
        self.prints = fingerprints(sub).to_pylist()
        threads = sub.column("thread").to_pylist()
        self.keys = list(zip(threads, sub.column("idx").to_pylist(), strict=True))
        for i, tid in enumerate(sub.column("trajectory_id").to_pylist()):
            self.positions.setdefault(tid, []).append(i)
        self._batch_positions = positions.to_pylist()

    def attribute(
        self, tid: str, versions: Sequence[_Version], counts: Sequence[int | None]
    ) -> None:
        """Give each batch version of `tid` its message rows (batch order is kept per key)."""
        by_key: dict[tuple[str, int], list[int]] = {}
        for i in self.positions.get(tid, []):
            by_key.setdefault(self.keys[i], []).append(i)
        owners = _owners(by_key, counts)
        if owners is None:
            owners = _owners_of_consistent(by_key, counts, self.prints)
        if owners is None:
            raise InvalidRecord(
                f"trajectory id {tid!r} appears {len(versions)} times in one commit with "
                "different messages in several threads, which cannot be told apart; commit "
                "(or ingest) those records separately"
            )
        for key, rows in by_key.items():
            for i, j in zip(rows, owners[key], strict=True):
                if j is not None:
                    versions[j].messages.append(i)

    def prints_of(self, version: _Version) -> Fingerprints:
        """A batch version's fingerprints."""
        return {self.keys[i]: self.prints[i] for i in version.messages}

    def batch_positions(self, version: _Version) -> list[int]:
        """A version's rows in the batch's messages table."""
        return [self._batch_positions[i] for i in version.messages]


_Owners = dict[tuple[str, int], list[int | None]]
"""For each (thread, idx): the version owning each of its occurrences (None: no version)."""


def _owners(
    by_key: Mapping[tuple[str, int], list[int]], counts: Sequence[int | None]
) -> _Owners | None:
    """Which version owns each occurrence of a key, when the batch says so unambiguously."""
    m = len(counts)
    if all(len(rows) == m for rows in by_key.values()):
        return {key: list(range(m)) for key in by_key}  # every version has every message
    threads = {thread for thread, _ in by_key}
    if len(threads) != 1 or any(c is None for c in counts):
        return None
    # One thread: version j holds its first counts[j] positions.
    owners: _Owners = {}
    for rank, key in enumerate(sorted(by_key, key=lambda k: k[1])):
        holders: list[int | None] = [j for j, c in enumerate(counts) if c is not None and c > rank]
        if len(holders) != len(by_key[key]):
            return None
        owners[key] = holders
    return owners


def _owners_of_consistent(
    by_key: Mapping[tuple[str, int], list[int]],
    counts: Sequence[int | None],
    prints: Sequence[str],
) -> _Owners | None:
    """When every key's occurrences agree, the versions are parts of one conversation: the
    longest (holding every key) gets the first occurrence of each, the others none."""
    if any(len({prints[i] for i in rows}) > 1 for rows in by_key.values()):
        return None
    whole = [j for j, c in enumerate(counts) if c == len(by_key)]
    if not whole:
        return None
    # Later occurrences of a key repeat an older part: they belong to no version.
    return {key: [whole[0], *([None] * (len(rows) - 1))] for key, rows in by_key.items()}


def resolve(
    trajectories: pa.Table,
    colliding: Mapping[str, list[int]],
    stored_hash: Mapping[str, str | None],
    copies: Mapping[str, list[str]],
    batch: BatchMessages,
    load_stored: Callable[[set[str]], dict[str, Fingerprints]],
) -> Resolution:
    """Decide every batch row of the colliding ids (id → its rows, in batch order)."""
    hashes = trajectories.column("content_hash").to_pylist()
    n_messages = trajectories.column("n_messages").to_pylist()
    plans: dict[str, list[_Version]] = {}
    for tid, rows in colliding.items():
        versions = [_Version(tid, hashes[r], r) for r in rows]
        if len(versions) > 1:
            batch.attribute(tid, versions, [n_messages[r] for r in rows])
        else:
            versions[0].messages = list(batch.positions.get(tid, []))
        plans[tid] = versions
    # Stored messages are read only for ids where some content hash differs.
    need: set[str] = set()
    for tid, versions in plans.items():
        known = {v.content_hash for v in versions}
        if tid in stored_hash:
            known.add(stored_hash[tid])
        if len(known) > 1:
            need.update(s for s in [tid, *copies.get(tid, ())] if s in stored_hash)
    stored = load_stored(need) if need else {}
    replaced: set[str] = set()
    out: list[_Version] = []
    for tid, versions in plans.items():
        _fold(tid, versions, stored_hash, copies.get(tid, []), stored, batch, replaced)
        out.extend(versions)
    return Resolution(out, replaced)


@dataclass
class _Current:
    """The version a newer one is compared with: stored (row None) or of the batch."""

    stored_as: str
    content_hash: str | None
    prints: Callable[[], Fingerprints]
    version: _Version | None = None


def _fold(
    tid: str,
    versions: list[_Version],
    stored_hash: Mapping[str, str | None],
    copies: Sequence[str],
    stored: Mapping[str, Fingerprints],
    batch: BatchMessages,
    replaced: set[str],
) -> None:
    """Apply the identity rules to the batch versions of one id, in batch order."""

    def of_stored(sid: str) -> _Current:
        return _Current(sid, stored_hash[sid], lambda: stored.get(sid, {}))

    lines: list[_Current] = [of_stored(s) for s in [tid, *copies] if s in stored_hash]
    for v in versions:
        _place(tid, v, lines, batch, replaced)


def _place(
    tid: str, v: _Version, lines: list[_Current], batch: BatchMessages, replaced: set[str]
) -> None:
    """Compare `v` with the current version of its id and of each conflict copy, in turn."""
    if not lines:  # the id is new: the first version takes it
        v.kind = "added"
        lines.append(_Current(tid, v.content_hash, _frozen(batch, v), v))
        return
    new_prints: Fingerprints | None = None
    for current in lines:
        if v.content_hash is not None and v.content_hash == current.content_hash:
            rel: Relation = "same"
        else:
            if new_prints is None:
                new_prints = batch.prints_of(v)
            rel = relation(current.prints(), new_prints)
        copy = current.stored_as != tid
        if rel in ("same", "older"):
            v.kind = "duplicate"
            v.detail = _duplicate_detail(rel, current, copy)
            return
        if rel == "extends":
            _supersede(tid, v, current, replaced)
            current.content_hash, current.version = v.content_hash, v
            current.prints = _frozen(batch, v)
            return
    v.kind = "conflict"
    v.stored_as = conflict_id(tid, v.content_hash)
    v.detail = "same id, other messages: kept under a derived id (--run-id separates runs)"
    lines.append(_Current(v.stored_as, v.content_hash, _frozen(batch, v), v))


def _supersede(tid: str, v: _Version, current: _Current, replaced: set[str]) -> None:
    """`v` extends `current`: it takes its place (an update of the stored one, or the batch's)."""
    older = current.version
    if older is None:  # the stored version
        v.kind = "updated"
        replaced.add(current.stored_as)
        copy = current.stored_as != tid
        v.stored_as = current.stored_as if copy else None
        what = f"conflict copy {current.stored_as}" if copy else "the stored trajectory"
        v.detail = f"extends {what}: the longer one is current"
        return
    v.kind, v.stored_as, v.detail = older.kind, older.stored_as, older.detail
    older.kind, older.stored_as = "duplicate", None
    older.detail = "an older version of a trajectory later in the same commit"


def _frozen(batch: BatchMessages, v: _Version) -> Callable[[], Fingerprints]:
    cache: list[Fingerprints] = []

    def prints() -> Fingerprints:
        if not cache:
            cache.append(batch.prints_of(v))
        return cache[0]

    return prints


def _duplicate_detail(rel: Relation, current: _Current, copy: bool) -> str:
    where = f"conflict copy {current.stored_as}" if copy else "the stored trajectory"
    if current.version is not None:
        where = "a trajectory earlier in the same commit"
    if rel == "older":
        return f"an older version: its messages are a part of {where}'s"
    return f"same messages as {where}"


def mark_conflict_attrs(attrs: str | None, of: str) -> str:
    """The `attrs` JSON of a conflict copy: the original's, plus `id_conflict_of`."""
    parsed = json.loads(attrs) if attrs else {}
    if not isinstance(parsed, dict):
        parsed = {"attrs": parsed}
    parsed["id_conflict_of"] = of
    return json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
