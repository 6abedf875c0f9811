"""The lake: versioned Delta tables pinned together by snapshots, with tags and maintenance."""

from trajlake.lake._commit import CommitResult
from trajlake.lake._identity import IdentityExample
from trajlake.lake._lake import Lake, LakeSettings, SnapshotRef, init_lake, open_lake
from trajlake.lake._log import Snapshot, Tag
from trajlake.lake._maintain import MaintenanceReport
from trajlake.lake._validate import ValidationReport
from trajlake.lake._writer import BufferedWriter

__all__ = [
    "BufferedWriter",
    "CommitResult",
    "IdentityExample",
    "Lake",
    "LakeSettings",
    "MaintenanceReport",
    "Snapshot",
    "SnapshotRef",
    "Tag",
    "ValidationReport",
    "init_lake",
    "open_lake",
]
