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
from typing import Any

import pyarrow as pa

from trajlake.lake._dedupe import KeyIndex
from trajlake.lake._log import Snapshot, SnapshotLog
from trajlake.lake._tables import TableStore, check_schema, validate_table_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    """What one commit stored."""

    snapshot: Snapshot
    added: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    previous_id: int | None = None
    """The head before the commit (equal to `snapshot_id` when nothing was new)."""

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
) -> CommitResult:
    """Append rows to several tables in one snapshot (see `Lake.commit`)."""
    # Every table is checked before anything is written: a bad one fails the whole commit.
    tables = {validate_table_name(n): check_schema(n, t) for n, t in tables.items()}
    commit_id = uuid.uuid4().hex
    with ctx.lock():
        head = recover(ctx, ctx.log.latest())
        deduped = ctx.keys.dedupe(tables, head.tables, content=dedupe)
        to_write = {n: t for n, t in deduped.tables.items() if t.num_rows}
        added = {n: t.num_rows for n, t in deduped.tables.items()}
        if not to_write:
            return CommitResult(head, added, deduped.duplicates, head.snapshot_id)
        versions = dict(head.tables)
        ctx.log.begin(commit_id, sorted(to_write))
        target = ctx.settings.target_file_mb * 1024 * 1024
        for name, data in to_write.items():
            before = head.tables[name]
            versions[name], files = ctx.tables.append(
                name, data, commit_id=commit_id, next_version=before + 1, target_file_bytes=target
            )
            uris = [ctx.tables.data_uri(name, f.path) for f in files]
            ctx.keys.remember(name, before, versions[name], uris, data)
        info = {"commit_id": commit_id, "added": added, **(summary or {})}
        snap = head.successor(operation, versions, info)
        ctx.log.append(snap)
        ctx.log.end()
    return CommitResult(snap, added, deduped.duplicates, head.snapshot_id)


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
