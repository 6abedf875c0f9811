"""The commit protocol: journal, data files, Delta commits, then the snapshot log entry.

Everything happens under the lake's commit lock. A commit journals the tables it is about to
write before writing any data, writes each table's files and Delta commit (the next version
is known: no one else writes while the lock is held), and last appends the snapshot log entry
— the commit point. A writer that dies before that leaves orphan versions no snapshot pins;
the next writer finds the journal and restores those tables, pinning the result.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from trajlake.errors import TrajectoryIdConflict
from trajlake.lake._dedupe import DedupeResult, KeyIndex
from trajlake.lake._identity import IdentityExample
from trajlake.lake._log import Snapshot, SnapshotLog
from trajlake.lake._tables import TableStore, check_schema, validate_table_name
from trajlake.schema import table_schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    """What one commit stored."""

    snapshot: Snapshot
    added: dict[str, int] = field(default_factory=dict)
    """Rows written per table (trajectories: new ids only; see `updated` and `conflicts`)."""
    duplicates: dict[str, int] = field(default_factory=dict)
    """Rows not written per table: already stored, or older versions of stored ones."""
    previous_id: int | None = None
    """The head before the commit (equal to `snapshot_id` when nothing was new)."""
    updated: dict[str, int] = field(default_factory=dict)
    """Trajectories that replaced a stored version they extend (the old one stays in older
    snapshots)."""
    conflicts: dict[str, int] = field(default_factory=dict)
    """Trajectories whose id was taken by other messages, stored under a derived id."""
    examples: tuple[IdentityExample, ...] = ()
    """Some of the duplicates, updates and conflicts, with where they were read."""

    @property
    def snapshot_id(self) -> int:
        """Id of the snapshot that holds the commit (the previous one if nothing was new)."""
        return self.snapshot.snapshot_id


@dataclass(frozen=True)
class CommitContext:
    """What a commit works with: the log, the tables, the key cache, settings and the lock."""

    log: SnapshotLog
    tables: TableStore
    keys: KeyIndex
    settings: Any
    lock: Callable[[], AbstractContextManager[Any]]


def commit_tables(
    ctx: CommitContext,
    tables: Mapping[str, pa.Table],
    *,
    operation: str,
    summary: Mapping[str, Any] | None,
    dedupe: bool,
    on_conflict: Literal["keep", "fail"] = "keep",
) -> CommitResult:
    """Append rows to several tables in one snapshot (see `LakeStore.commit`)."""
    # Every table is checked before anything is written: a bad one fails the whole commit.
    tables = {validate_table_name(n): check_schema(n, t) for n, t in tables.items()}
    commit_id = uuid.uuid4().hex
    with ctx.lock():
        head = recover(ctx, ctx.log.latest())
        deduped = ctx.keys.dedupe(tables, head.tables, content=dedupe)
        if on_conflict == "fail":
            _fail_on_conflicts(deduped)
        to_write = {n: t for n, t in deduped.tables.items() if t.num_rows}
        if deduped.replaced:  # an update replaces rows of both tables, with or without new ones
            for name in ("trajectories", "messages"):
                to_write.setdefault(
                    name, deduped.tables.get(name, table_schema(name).empty_table())
                )
        added = {n: t.num_rows for n, t in deduped.tables.items()}
        if "trajectories" in added:
            added["trajectories"] -= _written_elsewhere(deduped)
        if not to_write:
            return _result(head, added, deduped, head.snapshot_id)
        versions = dict(head.tables)
        for name in to_write:  # a table another Delta writer gave features: refused up front
            replaces = bool(deduped.replaced) and name in ("trajectories", "messages")
            ctx.tables.check_writable(name, removes_data=replaces)
        ctx.log.begin(commit_id, sorted(to_write))
        target = ctx.settings.target_file_mb * 1024 * 1024
        for name, data in to_write.items():
            versions[name] = _write_table(
                ctx, name, data, head.tables[name], deduped, commit_id, target
            )
        info = {
            "commit_id": commit_id,
            "added": added,
            **_identity_info(deduped),
            **(summary or {}),
        }
        snap = head.successor(operation, versions, info)
        ctx.log.append(snap)
        ctx.log.end()
    return _result(snap, added, deduped, head.snapshot_id)


def _write_table(
    ctx: CommitContext,
    name: str,
    data: pa.Table,
    before: int,
    deduped: DedupeResult,
    commit_id: str,
    target: int,
) -> int:
    """Append one table's rows, or (when it holds rows an update replaces) rewrite the files
    holding them; return the table's new version."""
    if deduped.replaced and name in ("trajectories", "messages"):
        done = ctx.tables.replace(
            name,
            deduped.replaced,
            data,
            commit_id=commit_id,
            next_version=before + 1,
            target_file_bytes=target,
        )
        if done is None:
            return before
        ctx.keys.remember(name, before, done.version, data, done.removed)
        return done.version
    version, _ = ctx.tables.append(
        name, data, commit_id=commit_id, next_version=before + 1, target_file_bytes=target
    )
    ctx.keys.remember(name, before, version, data)
    return version


def _written_elsewhere(deduped: DedupeResult) -> int:
    """Trajectory rows written as updates or conflict copies (not counted as added)."""
    return deduped.updated.get("trajectories", 0) + deduped.conflicts.get("trajectories", 0)


def _identity_info(deduped: DedupeResult) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for key in ("updated", "conflicts"):
        counts = {n: c for n, c in getattr(deduped, key).items() if c}
        if counts:
            info[key] = counts
    return info


def _fail_on_conflicts(deduped: DedupeResult) -> None:
    conflicts = [e for e in deduped.examples if e.kind == "conflict"]
    if not conflicts:
        return
    first = conflicts[0]
    total = deduped.conflicts.get("trajectories", 0)
    raise TrajectoryIdConflict(
        f"{first.source or 'input'}: trajectory id {first.trajectory_id!r} is already taken "
        f"by other messages ({total} such conflict(s) in this batch; nothing of it was "
        "committed); pass --run-id to give each run its own ids, or drop --strict to keep "
        f"both (the new one as {first.stored_as!r})"
    )


def _result(
    snap: Snapshot, added: dict[str, int], deduped: DedupeResult, previous: int
) -> CommitResult:
    return CommitResult(
        snap,
        added,
        deduped.duplicates,
        previous,
        deduped.updated,
        deduped.conflicts,
        deduped.examples,
    )


def recover(ctx: CommitContext, head: Snapshot, *, check_all: bool = False) -> Snapshot:
    """Undo what a writer that died mid-commit left behind; return the (new) head.

    Call under the commit lock. Only a journal left behind calls for a look (or `check_all`,
    used by full maintenance). Restoring creates Delta versions, so a snapshot pins them.
    """
    pending = ctx.log.pending()
    if pending is None and not check_all:
        return head
    names = list(head.tables) if check_all or pending is None else pending["tables"]
    restored = _undo_orphans(ctx, head, names)
    if restored:
        versions = {**head.tables, **restored}
        summary = {"restored": sorted(restored), "journal": pending}
        head = ctx.log.append(head.successor("recover", versions, summary))
    if pending is not None:
        ctx.log.end()
    return head


def _undo_orphans(ctx: CommitContext, head: Snapshot, names: Iterable[str]) -> dict[str, int]:
    """Restore tables to the versions the head pins; return their new versions."""
    restored = {}
    for name in names:
        pinned = head.tables[name]
        latest = ctx.tables.latest_version(name)
        if latest > pinned:
            log.warning("table %s: undoing orphan versions %d..%d", name, pinned + 1, latest)
            restored[name] = ctx.tables.restore(name, pinned)
    return restored
