"""Maintenance: compaction, checkpoints, log expiry and vacuum that never break a tag.

Delta's commit cost grows with the number of log files and live data files, so small commits
stay flat only if both are bounded. Expiry keeps the newest `log_versions` versions of each
table loadable plus a checkpoint at every tagged version; vacuum keeps every data file that
a tagged version or a version inside the window still references.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trajlake.lake._log import Snapshot, utc_now
from trajlake.lake._tables import TableStore

if TYPE_CHECKING:
    from trajlake.lake._lake import Lake

log = logging.getLogger(__name__)
_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet|crc)$")


@dataclass
class TableMaintenance:
    """What maintenance did to one table."""

    files_before: int = 0
    files_after: int = 0
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


def tagged_versions(lake: Lake) -> dict[str, set[int]]:
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


def _log_dir(tables: TableStore, name: str) -> str:
    return tables.location.join("tables", name, "_delta_log")


def _log_files(tables: TableStore, name: str) -> list[tuple[int, str, str]]:
    fs = tables.location.filesystem()
    entries = []
    for path in fs.ls(_log_dir(tables, name), detail=False):
        base = str(path).rsplit("/", 1)[-1]
        m = _LOG_FILE.match(base)
        if m:
            entries.append((int(m.group(1)), m.group(2), str(path)))
    return sorted(entries)


def _checkpoint_exists(tables: TableStore, name: str, version: int) -> bool:
    return any(v == version and k == "checkpoint.parquet" for v, k, _ in _log_files(tables, name))


def _compact(lake: Lake, name: str, report: TableMaintenance, incremental: bool) -> bool:
    settings = lake.settings
    dt_ = lake.tables_store.handle(name)
    target = settings.target_file_mb * 1024 * 1024
    sizes = dt_.get_add_actions(flatten=True).column("size_bytes").to_pylist()
    small = [s for s in sizes if s < target // 2]
    report.files_before = len(sizes)
    threshold = settings.compact_min_files if incremental else 2
    if len(small) < threshold:
        report.files_after = len(sizes)
        return False
    dt_.optimize.compact(target_size=target)
    dt_.update_incremental()
    report.files_after = len(dt_.file_uris())
    report.compacted = True
    return True


def _expire_log(lake: Lake, name: str, keep: set[int], report: TableMaintenance) -> None:
    """Delete log files older than the window, keeping checkpoints of tagged versions."""
    tables = lake.tables_store
    latest = int(tables.handle(name).version())
    files = _log_files(tables, name)
    checkpoints = [v for v, kind, _ in files if kind == "checkpoint.parquet"]
    eligible = [v for v in checkpoints if v <= latest - lake.settings.log_versions]
    if not eligible:
        return
    cutoff = max(eligible)
    fs = tables.location.filesystem()
    for version, kind, path in files:
        if version >= cutoff:
            continue
        if kind == "checkpoint.parquet" and version in keep:
            continue
        fs.rm_file(path)
        report.log_files_removed += 1


def _window_hours(lake: Lake, name: str) -> int:
    """Hours back to the oldest version kept loadable: files removed since must stay."""
    dt_ = lake.tables_store.handle(name)
    history = dt_.history(lake.settings.log_versions + 1)
    if not history:
        return lake.settings.retention_hours
    oldest_ms = min(int(h["timestamp"]) for h in history)
    age_h = (time.time() * 1000 - oldest_ms) / 3_600_000
    return max(lake.settings.retention_hours, math.ceil(age_h) + 1)


def _vacuum(lake: Lake, name: str, keep: set[int], report: TableMaintenance, full: bool) -> None:
    dt_ = lake.tables_store.handle(name)
    removed = dt_.vacuum(
        retention_hours=_window_hours(lake, name),
        dry_run=False,
        enforce_retention_duration=False,
        full=full,
        keep_versions=sorted(keep) or None,
    )
    report.data_files_vacuumed = len(removed)


def run_maintenance(
    lake: Lake, *, incremental: bool, vacuum: bool, dry_run: bool
) -> MaintenanceReport:
    """Run maintenance under the commit lock; write a snapshot if compaction changed versions."""
    start = time.perf_counter()
    report = MaintenanceReport(dry_run=dry_run)
    with lake.locked():
        head = lake.snapshot_log.latest()
        lake.recover(head, check_all=not incremental)
        keep = tagged_versions(lake)
        versions = dict(head.tables)
        for name in head.tables:
            table_report = report.tables.setdefault(name, TableMaintenance())
            if dry_run:
                sizes = lake.tables_store.handle(name).get_add_actions(flatten=True)
                table_report.files_before = table_report.files_after = sizes.num_rows
                continue
            if _compact(lake, name, table_report, incremental):
                versions[name] = lake.tables_store.latest_version(name)
            if versions[name] != head.tables[name] or not incremental:
                lake.tables_store.handle(name).create_checkpoint()
                table_report.checkpoint_version = versions[name]
            _expire_log(lake, name, keep.get(name, set()), table_report)
            if vacuum and (not incremental or table_report.compacted):
                _vacuum(lake, name, keep.get(name, set()), table_report, full=not incremental)
        if versions != head.tables:
            summary = {"compacted": [n for n, r in report.tables.items() if r.compacted]}
            snap = Snapshot(
                head.snapshot_id + 1, utc_now(), "maintain", versions, summary, head.snapshot_id
            )
            lake.snapshot_log.append(snap)
            report.snapshot_id = snap.snapshot_id
    report.seconds = time.perf_counter() - start
    log.info("maintenance done in %.3fs", report.seconds)
    return report
