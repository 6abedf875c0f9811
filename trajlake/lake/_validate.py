"""`validate`: check that the lake's snapshots are complete and readable, and name the file
when one in the lake's metadata is not what the lake wrote there."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trajlake.errors import LakeCorrupt, NoSuchSnapshot, SnapshotExpired
from trajlake.schema import TABLES

if TYPE_CHECKING:
    from trajlake.lake._storage import LakeLocation
    from trajlake.lake._store import LakeStore

_DELTA_ACTIONS = frozenset(
    {"add", "remove", "metaData", "protocol", "commitInfo", "txn", "cdc", "domainMetadata"}
    | {"checkpointMetadata", "sidecar"}
)
"""The action keys a Delta commit file's lines may hold (one per line)."""
_COMMIT = re.compile(r"(\d{20})\.json")


@dataclass
class ValidationReport:
    """Problems found (empty when the lake is sound), and what was checked."""

    snapshots_checked: int = 0
    snapshots_expired: int = 0
    problems: list[str] = field(default_factory=list)
    orphan_versions: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok,
            "snapshots_checked": self.snapshots_checked,
            "snapshots_expired": self.snapshots_expired,
            "orphan_versions": self.orphan_versions,
            "problems": self.problems,
        }


def _foreign_line(text: bytes) -> str | None:
    """Why a commit file is not a Delta commit (None when every line is one action)."""
    if not text.strip():
        return "empty"
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError:
            return f"line {number} is not JSON"
        if not isinstance(action, dict) or len(action) != 1 or set(action) - _DELTA_ACTIONS:
            keys = sorted(action)[:4] if isinstance(action, dict) else type(action).__name__
            return f"line {number} is not a Delta action (keys {keys})"
    return None


def foreign_log_entries(location: LakeLocation, table: str) -> list[str]:
    """Files of a table's Delta log that break it: commit-named files that hold no Delta
    commit, and a commit that follows a gap in the versions. Reads every commit, so it is
    called once reading the table has failed."""
    fs = location.filesystem()
    folder = location.join("tables", table, "_delta_log")
    try:
        names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False))
    except FileNotFoundError:
        return [f"{folder} is missing"]
    found, previous = [], None
    for name in names:
        match = _COMMIT.fullmatch(name)
        if match is None:
            continue
        path, version = f"{folder}/{name}", int(match.group(1))
        why = _foreign_line(fs.cat_file(path))
        if why is not None:
            found.append(f"{path}: {why}")
        elif previous is not None and version != previous + 1:
            found.append(f"{path}: follows version {previous} (the versions between are missing)")
        previous = version
    return found


def unreadable_log(location: LakeLocation, table: str, error: Exception) -> LakeCorrupt:
    """The error for a table whose Delta log does not load, naming the files that break it."""
    found = foreign_log_entries(location, table)
    if not found:
        return LakeCorrupt(f"table {table!r}: its Delta log cannot be read: {error}")
    return LakeCorrupt(
        f"table {table!r}: its Delta log cannot be read: {'; '.join(found[:3])}; if another "
        "program wrote these files, move them out of the lake"
    )


def _check_snapshot(
    lake: LakeStore, snapshot_id: int, report: ValidationReport, tagged: bool
) -> None:
    try:
        snap = lake.snapshot_log.get(snapshot_id)
    except NoSuchSnapshot:
        report.problems.append(f"snapshot {snapshot_id} is missing from the log")
        return
    except LakeCorrupt as e:
        report.problems.append(str(e))
        return
    missing_tables = [t for t in TABLES if t not in snap.tables]
    if missing_tables:
        report.problems.append(f"snapshot {snapshot_id} does not pin tables {missing_tables}")
    for name, version in snap.tables.items():
        try:
            files = lake.tables_store.files(name, version)
        except LakeCorrupt as e:
            report.problems.append(f"snapshot {snapshot_id}: {e}")
            return
        except SnapshotExpired:
            if tagged:
                report.problems.append(
                    f"tagged snapshot {snapshot_id}: {name}@{version} cannot load"
                )
            else:
                report.snapshots_expired += 1
            return
        if lake.location.is_local:
            absent = [f for f in files if not os.path.exists(f.removeprefix("file://"))]
            if absent:
                report.problems.append(
                    f"snapshot {snapshot_id}: {name}@{version} misses {len(absent)} file(s), "
                    f"e.g. {absent[0]}"
                )
    report.snapshots_checked += 1


def _tagged(lake: LakeStore, report: ValidationReport) -> set[int]:
    """Snapshots named by tags; a tag file that does not read is a problem naming it."""
    tagged = set()
    for file in lake.snapshot_log.tag_files():
        if not file.endswith(".json"):
            continue
        try:
            tagged.add(lake.snapshot_log.get_tag(file.removesuffix(".json")).snapshot_id)
        except (LakeCorrupt, ValueError) as e:
            report.problems.append(f"tag file {file!r}: {e}")
    return tagged


def _check_orphans(lake: LakeStore, report: ValidationReport) -> None:
    # Under the lock, so a commit or compaction in flight is not mistaken for an orphan.
    with lake.locked():
        head = lake.snapshot_log.latest()
        for name, pinned in head.tables.items():
            try:
                latest = lake.tables_store.latest_version(name)
            except LakeCorrupt as e:
                report.problems.append(str(e))
                continue
            if latest > pinned:
                # Not an error: the next commit or `maintain` undoes them. Reported to be seen.
                report.orphan_versions[name] = latest - pinned
            elif latest < pinned:
                report.problems.append(f"table {name} is at version {latest} < pinned {pinned}")


def validate_lake(lake: LakeStore) -> ValidationReport:
    """Check every snapshot in the window and every tag; report orphans of crashed writers."""
    report = ValidationReport()
    tagged = _tagged(lake, report)
    try:
        head = lake.snapshot_log.latest()
    except LakeCorrupt as e:
        report.problems.append(str(e))
        return report
    window = lake.settings.log_versions
    recent = range(max(0, head.snapshot_id - window), head.snapshot_id + 1)
    for snapshot_id in sorted(set(recent) | tagged):
        _check_snapshot(lake, snapshot_id, report, snapshot_id in tagged)
    _check_orphans(lake, report)
    return report
