"""The lake's storage: versioned Delta tables pinned together by snapshots, tags, maintenance.

Storage only: `LakeStore` knows nothing of SQL, ingest or export, which live in the layers above
and take a store as an argument. Users open a lake with `trajlake.open_lake`, which returns the
user-facing `trajlake.api.Lake` (a `LakeStore` with `.ingest`, `.sql`, `.export_sft`, …);
`open_store`/`init_store` open the bare storage.
"""

from trajlake.lake._commit import CommitResult
from trajlake.lake._identity import IdentityExample
from trajlake.lake._log import Snapshot, Tag
from trajlake.lake._maintain import MaintenanceReport
from trajlake.lake._store import LakeSettings, LakeStore, SnapshotRef, init_store, open_store
from trajlake.lake._validate import ValidationReport
from trajlake.lake._writer import BufferedWriter

__all__ = [
    "BufferedWriter",
    "CommitResult",
    "IdentityExample",
    "LakeSettings",
    "LakeStore",
    "MaintenanceReport",
    "Snapshot",
    "SnapshotRef",
    "Tag",
    "ValidationReport",
    "init_store",
    "open_store",
]
