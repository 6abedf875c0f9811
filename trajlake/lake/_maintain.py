"""Maintenance: compaction, checkpoints, log expiry and vacuum that never break a tag.

Delta's commit cost grows with the number of log files and live data files, so small commits
stay flat only if both are bounded. Compaction merges small files in size tiers (each byte is
rewritten a few times, not on every run) and does its heavy work outside the commit lock,
taking the lock only to commit; it never changes rows. Expiry keeps the newest `log_versions`
versions of each table loadable plus a checkpoint at every tagged version; vacuum keeps every
data file that a tagged version or a version inside the window still references.
"""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from trajlake.lake._delta_commit import DataFile, commit_actions, remove_action, write_data_files
from trajlake.lake._delta_protocol import TableProtocol
from trajlake.lake._tables import TableStore
from trajlake.schema import PRIMARY_KEYS, SORT_KEYS

if TYPE_CHECKING:
    from trajlake.lake._store import LakeStore

log = logging.getLogger(__name__)
_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet|crc)$")
_TIER_BASE = 8.0
"""Files within a factor of this in size form one compaction tier."""


@dataclass
class TableMaintenance:
    """What maintenance did to one table."""

    files_before: int = 0
    files_after: int = 0
    files_compacted: int = 0
    compacted: bool = False
    checkpoint_version: int | None = None
    log_files_removed: int = 0
    data_files_vacuumed: int = 0


@dataclass
class MaintenanceReport:
    """What one maintenance run did, per table, and the snapshot it wrote (if any)."""

    tables: dict[str, TableMaintenance] = field(default_factory=dict)
    snapshot_id: int | None = None
    seconds: float = 0.0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "snapshot_id": self.snapshot_id,
            "seconds": round(self.seconds, 3),
            "dry_run": self.dry_run,
            "tables": {n: vars(t) for n, t in self.tables.items()},
        }


@dataclass
class _Plan:
    """Small files of one table chosen for merging, and the merged files once written."""

    table: str
    version: int
    paths: list[str]
    sizes: dict[str, int]
    merged: list[DataFile] = field(default_factory=list)


def tagged_versions(lake: LakeStore) -> dict[str, set[int]]:
    """Table versions that tags pin: these stay loadable and their files stay on disk."""
    versions: dict[str, set[int]] = {}
    for tag in lake.snapshot_log.tags():
        snap = lake.snapshot_log.get(tag.snapshot_id)
        for name, version in snap.tables.items():
            versions.setdefault(name, set()).add(version)
    return versions


def protect_versions(tables: TableStore, versions: dict[str, int]) -> None:
    """Write a Delta checkpoint at each pinned version so it survives log expiry."""
    for name, version in versions.items():
        if not _checkpoint_exists(tables, name, version):
            tables.at_version(name, version).create_checkpoint()
        latest = tables.handle(name)
        if int(latest.version()) != version:
            # Keep `_last_checkpoint` pointing at the newest state so opening stays cheap.
            latest.create_checkpoint()


def _log_files(tables: TableStore, name: str) -> list[tuple[int, str, str]]:
    fs = tables.location.filesystem()
    entries = []
    for path in fs.ls(tables.location.join("tables", name, "_delta_log"), detail=False):
        base = str(path).rsplit("/", 1)[-1]
        m = _LOG_FILE.match(base)
        if m:
            entries.append((int(m.group(1)), m.group(2), str(path)))
    return sorted(entries)


def _checkpoint_exists(tables: TableStore, name: str, version: int) -> bool:
    return any(v == version and k == "checkpoint.parquet" for v, k, _ in _log_files(tables, name))


# Compaction -----------------------------------------------------------------------------------


def _tier(size: int) -> int:
    return int(math.log(max(size, 1), _TIER_BASE))


def _plan(
    lake: LakeStore,
    store: TableStore,
    name: str,
    version: int,
    incremental: bool,
    report: TableMaintenance,
) -> _Plan | None:
    """Choose files to merge: a full tier of small files, or (full runs) every small file."""
    target = lake.settings.target_file_mb * 1024 * 1024
    actions = store.at_version(name, version).get_add_actions(flatten=True)
    paths = actions.column("path").to_pylist()
    sizes = dict(zip(paths, actions.column("size_bytes").to_pylist(), strict=True))
    report.files_before = report.files_after = len(paths)
    small = sorted((p for p in paths if sizes[p] < target // 2), key=lambda p: sizes[p])
    if incremental:
        tiers: dict[int, list[str]] = {}
        for p in small:
            tiers.setdefault(_tier(sizes[p]), []).append(p)
        full = [t for t in tiers.values() if len(t) >= lake.settings.compact_min_files]
        chosen = full[0] if full else []
    else:
        chosen = small if len(small) >= 2 else []
    budget, picked = 0, []
    for p in chosen:  # one run merges at most ~a target file's worth
        if budget >= target:
            break
        picked.append(p)
        budget += sizes[p]
    return _Plan(name, version, picked, sizes) if len(picked) >= 2 else None


def _read_files(lake: LakeStore, store: TableStore, name: str, paths: Iterable[str]) -> pa.Table:
    uris = [store.data_uri(name, p) for p in paths]
    if lake.location.is_local:
        return pq.read_table(uris)
    fs = lake.location.filesystem()
    return pq.read_table([u.split("://", 1)[1] for u in uris], filesystem=fs)


def _write_merged(lake: LakeStore, store: TableStore, plan: _Plan) -> None:
    data = _read_files(lake, store, plan.table, plan.paths)
    keys = SORT_KEYS.get(plan.table) or PRIMARY_KEYS[plan.table]
    data = data.sort_by([(k, "ascending") for k in keys])
    target = lake.settings.target_file_mb * 1024 * 1024
    plan.merged = write_data_files(lake.location, plan.table, data, target_file_bytes=target)


def _discard(lake: LakeStore, store: TableStore, plan: _Plan) -> None:
    fs = lake.location.filesystem()
    for f in plan.merged:
        uri = store.data_uri(plan.table, f.path)
        if fs.exists(uri):
            fs.rm_file(uri)


def _still_live(store: TableStore, plan: _Plan, version: int) -> bool:
    """Whether every planned file is still in the table at `version`.

    Reads only the commits since the plan (a few small JSON files), so the lock is held for
    milliseconds; falls back to the full file list when they are no longer in the log.
    """
    changes = store.changes(plan.table, plan.version, version)
    if changes is not None:
        return not changes.removed.intersection(plan.paths)
    live = {u.rsplit("/", 1)[-1] for u in store.files(plan.table, version)}
    return all(p.rsplit("/", 1)[-1] in live for p in plan.paths)


def _commit_plans(
    lake: LakeStore, store: TableStore, plans: list[_Plan], report: MaintenanceReport
) -> None:
    """Under the lock: swap merged files in, if the chosen files are all still live."""
    with lake.locked():
        head = lake.recover(lake.snapshot_log.latest())
        versions = dict(head.tables)
        commit_id = uuid.uuid4().hex
        for plan in plans:
            fs = lake.location.filesystem()
            merged_there = all(fs.exists(store.data_uri(plan.table, f.path)) for f in plan.merged)
            if not merged_there or not _still_live(store, plan, head.tables[plan.table]):
                # Another run merged some of them first, or a short-retention vacuum took
                # the merged files (written outside the lock) before they were committed.
                _discard(lake, store, plan)
                continue
            actions = [remove_action(p, plan.sizes[p]) for p in plan.paths]
            actions += [f.add_action(data_change=False) for f in plan.merged]
            versions[plan.table] = commit_actions(
                lake.location,
                plan.table,
                head.tables[plan.table] + 1,
                actions,
                operation="OPTIMIZE",
                commit_id=commit_id,
                blind_append=False,
                protocol=TableProtocol.of(store.handle(plan.table)),
            )
            table_report = report.tables[plan.table]
            table_report.compacted = True
            table_report.files_compacted = len(plan.paths)
            table_report.files_after = (
                table_report.files_before - len(plan.paths) + len(plan.merged)
            )
        if versions != head.tables:
            compacted = [p.table for p in plans if versions[p.table] != head.tables[p.table]]
            snap = head.successor("maintain", versions, {"compacted": compacted})
            lake.snapshot_log.append(snap)
            report.snapshot_id = snap.snapshot_id


# Log expiry and vacuum ------------------------------------------------------------------------


_CHECKPOINT_EVERY = 20
"""Versions between checkpoints: bounds the log replayed when a table is opened."""


def _checkpoint(
    lake: LakeStore, store: TableStore, name: str, report: TableMaintenance, *, force: bool
) -> None:
    handle = store.handle(name)
    latest = int(handle.version())
    checkpoints = [v for v, kind, _ in _log_files(store, name) if kind == "checkpoint.parquet"]
    if force or latest - max(checkpoints, default=-1) >= _CHECKPOINT_EVERY:
        handle.create_checkpoint()
        report.checkpoint_version = latest


def _expire_log(
    lake: LakeStore, store: TableStore, name: str, keep: set[int], report: TableMaintenance
) -> None:
    """Delete log files older than the window, keeping checkpoints of tagged versions."""
    latest = int(store.handle(name).version())
    files = _log_files(store, name)
    checkpoints = [v for v, kind, _ in files if kind == "checkpoint.parquet"]
    eligible = [v for v in checkpoints if v <= latest - lake.settings.log_versions]
    if not eligible:
        return
    cutoff = max(eligible)
    fs = store.location.filesystem()
    for version, kind, path in files:
        if version >= cutoff or (kind == "checkpoint.parquet" and version in keep):
            continue
        fs.rm_file(path)
        report.log_files_removed += 1


def _loadable_versions(store: TableStore, name: str, keep: set[int]) -> list[int]:
    """Versions that can still be loaded after expiry: the window, plus tagged versions."""
    latest = int(store.handle(name).version())
    kept = [v for v, kind, _ in _log_files(store, name) if kind == "json" or v not in keep]
    oldest = min(kept, default=latest)
    return sorted(set(range(oldest, latest + 1)) | keep)


def _vacuum(
    lake: LakeStore, store: TableStore, name: str, keep: set[int], report: TableMaintenance
) -> None:
    """Delete files no loadable version references. Under the lock.

    Files of no commit at all are deleted too; the lock keeps a commit in flight from losing
    its files, and compaction re-checks its merged files before committing them.
    """
    removed = store.handle(name).vacuum(
        retention_hours=lake.settings.retention_hours,
        dry_run=False,
        enforce_retention_duration=False,
        full=True,
        keep_versions=_loadable_versions(store, name, keep),
    )
    report.data_files_vacuumed = len(removed)


def _pin_latest(
    lake: LakeStore, store: TableStore, operation: str, summary: dict[str, Any]
) -> int | None:
    """Write a snapshot pinning tables whose latest version moved without changing rows
    (vacuum records its own versions). Under the lock; returns the snapshot id, if any."""
    head = lake.snapshot_log.latest()
    versions = {name: int(store.handle(name).version()) for name in head.tables}
    if versions == head.tables:
        return None
    snap = head.successor(operation, versions, summary)
    return lake.snapshot_log.append(snap).snapshot_id


def run_maintenance(
    lake: LakeStore, *, incremental: bool, vacuum: bool, dry_run: bool
) -> MaintenanceReport:
    """Compact, checkpoint, expire and (full runs) vacuum; see the module docstring."""
    start = time.perf_counter()
    report = MaintenanceReport(dry_run=dry_run)
    # Handles of its own: maintenance may run in a background thread beside commits.
    store = TableStore(lake.location)
    if not incremental and not dry_run:
        with lake.locked():
            lake.recover(lake.snapshot_log.latest(), check_all=True)
    head = lake.snapshot_log.latest()
    plans = []
    for name, version in head.tables.items():
        table_report = report.tables.setdefault(name, TableMaintenance())
        plan = _plan(lake, store, name, version, incremental, table_report)
        if plan is not None and not dry_run:
            _write_merged(lake, store, plan)
            plans.append(plan)
    if dry_run:
        report.seconds = time.perf_counter() - start
        return report
    if plans:
        _commit_plans(lake, store, plans, report)
    keep = tagged_versions(lake)
    for name, table_report in report.tables.items():
        _checkpoint(lake, store, name, table_report, force=not incremental)
        _expire_log(lake, store, name, keep.get(name, set()), table_report)
    if vacuum and not incremental:
        with lake.locked():
            for name, table_report in report.tables.items():
                _vacuum(lake, store, name, keep.get(name, set()), table_report)
            vacuumed = {n: r.data_files_vacuumed for n, r in report.tables.items()}
            pinned = _pin_latest(lake, store, "maintain", {"vacuumed": vacuumed})
            report.snapshot_id = pinned or report.snapshot_id
    report.seconds = time.perf_counter() - start
    log.info("maintenance done in %.3fs", report.seconds)
    return report
