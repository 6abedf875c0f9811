"""The lake's Delta tables: creation, appends, versions and pinned file lists.

Tables are plain Delta (no partitions, no deletion vectors), so any Delta reader can open
them and DuckDB can scan the pinned file list directly. Appends happen under the lake's
commit lock, so each append's new version is known exactly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from trajlake.errors import LakeCorrupt, NoSuchTable, SchemaMismatch, SnapshotExpired
from trajlake.lake._delta_commit import DataFile, commit_actions, write_data_files
from trajlake.lake._storage import LakeLocation
from trajlake.schema import TABLES, table_schema

TABLE_CONFIGURATION = {
    # trajlake expires old log entries itself, keeping the versions tags and snapshots need.
    "delta.enableExpiredLogCleanup": "false",
    "delta.checkpointInterval": "100",
}


def validate_table_name(name: str) -> str:
    """Only the lake's own tables exist; anything else (paths, SQL) is refused."""
    if name not in TABLES:
        raise NoSuchTable(f"no table {name!r}; tables are: {', '.join(TABLES)}")
    return name


def check_schema(table: str, data: pa.Table) -> pa.Table:
    """Cast data to the table schema, or name the columns that do not fit and the fix."""
    schema = table_schema(table)
    if data.schema.equals(schema, check_metadata=False):
        return data
    missing = [n for n in schema.names if n not in data.column_names]
    extra = [n for n in data.column_names if n not in schema.names]
    if extra:
        raise SchemaMismatch(
            f"table {table!r} has no column(s) {extra}; build rows from the record types in "
            f"trajlake.schema (`trajlake schema --table {table}` shows the columns)"
        )
    if missing:
        raise SchemaMismatch(f"data for {table!r} lacks column(s) {missing}")
    try:
        return data.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
        bad = [
            f"{f.name}: {data.schema.field(f.name).type} (expected {f.type})"
            for f in schema
            if not data.schema.field(f.name).type.equals(f.type)
        ]
        raise SchemaMismatch(f"data for {table!r} does not match its schema: {bad}: {e}") from e


@dataclass
class TableChanges:
    """What Delta commits between two versions did to a table's files."""

    data_added: list[str] = field(default_factory=list)
    """Files added with new rows (paths relative to the table root)."""
    removed: set[str] = field(default_factory=set)
    """Files removed, whether their rows went too or moved (compaction)."""
    data_removed: bool = False
    """Some commit removed rows (restore, delete): cached keys must be rebuilt."""


class TableStore:
    """Delta table handles of one lake, kept open so appends replay only new log entries."""

    def __init__(self, location: LakeLocation) -> None:
        self.location = location
        self._handles: dict[str, DeltaTable] = {}
        self._files: dict[tuple[str, int], list[str]] = {}
        self._scannable: dict[str, bool] = {}
        self._mutex = threading.Lock()

    @property
    def storage_options(self) -> dict[str, str] | None:
        """delta-rs storage options (None for local lakes)."""
        return self.location.storage_options or None

    def create_all(self) -> dict[str, int]:
        """Create every table (empty, with its schema); return their versions."""
        versions = {}
        for name in TABLES:
            uri = self.location.table_uri(name)
            if DeltaTable.is_deltatable(uri, storage_options=self.storage_options):
                dt = DeltaTable(uri, storage_options=self.storage_options)
            else:
                dt = DeltaTable.create(
                    uri,
                    table_schema(name),
                    name=name,
                    configuration=TABLE_CONFIGURATION,
                    storage_options=self.storage_options,
                )
            self._handles[name] = dt
            versions[name] = int(dt.version())
        return versions

    def handle(self, name: str) -> DeltaTable:
        """The open handle of a table at its latest version."""
        validate_table_name(name)
        with self._mutex:
            dt = self._handles.get(name)
            if dt is None:
                try:
                    dt = DeltaTable(
                        self.location.table_uri(name), storage_options=self.storage_options
                    )
                except TableNotFoundError as e:
                    raise LakeCorrupt(f"table {name!r} is missing from the lake: {e}") from e
                self._handles[name] = dt
            else:
                dt.update_incremental()
            return dt

    def latest_version(self, name: str) -> int:
        """Latest Delta version of a table (including versions no snapshot pins yet)."""
        return int(self.handle(name).version())

    def append(
        self,
        name: str,
        data: pa.Table,
        *,
        commit_id: str,
        next_version: int,
        target_file_bytes: int,
    ) -> tuple[int, list[DataFile]]:
        """Write rows as new files and commit them; return (version, files). Under the lock."""
        data = check_schema(name, data)
        files = write_data_files(self.location, name, data, target_file_bytes=target_file_bytes)
        version = commit_actions(
            self.location,
            name,
            next_version,
            [f.add_action() for f in files],
            operation="WRITE",
            commit_id=commit_id,
            blind_append=True,
        )
        return version, files

    def restore(self, name: str, version: int) -> int:
        """Undo versions past `version` (a crashed writer's orphans); return the new version."""
        dt = self.handle(name)
        dt.restore(version)
        dt.update_incremental()
        return int(dt.version())

    def at_version(self, name: str, version: int) -> DeltaTable:
        """A fresh handle of a table at a pinned version (SnapshotExpired if it cannot load)."""
        validate_table_name(name)
        try:
            return DeltaTable(
                self.location.table_uri(name), version=version, storage_options=self.storage_options
            )
        except Exception as e:
            raise SnapshotExpired(
                f"table {name!r} version {version} can no longer be loaded ({e}); it fell "
                "out of the retention window — tag snapshots that must stay readable"
            ) from e

    def files(self, name: str, version: int) -> list[str]:
        """Data file URIs of a table at a pinned version (cached: a version never changes)."""
        key = (name, version)
        cached = self._files.get(key)
        if cached is None:
            handle = self._handles.get(name)
            if handle is not None and int(handle.version()) < version:
                handle.update_incremental()  # cheaper than loading the version afresh
            if handle is not None and int(handle.version()) == version:
                cached = list(handle.file_uris())
            else:
                cached = list(self.at_version(name, version).file_uris())
            self._files[key] = cached
        return cached

    def changes(self, name: str, after: int, upto: int) -> TableChanges | None:
        """File changes of versions after..upto, read from their commit files (None when
        one of them is no longer in the log)."""
        fs = self.location.filesystem() if not self.location.is_local else None
        out = TableChanges()
        for version in range(after + 1, upto + 1):
            path = self.location.join("tables", name, "_delta_log", f"{version:020d}.json")
            try:
                if fs is None:
                    with open(path, "rb") as f:
                        text = f.read()
                else:
                    text = bytes(fs.cat_file(path))
            except FileNotFoundError:
                return None
            for line in text.splitlines():
                action = json.loads(line) if line.strip() else {}
                if "add" in action and action["add"].get("dataChange", True):
                    out.data_added.append(unquote(action["add"]["path"]))
                if "remove" in action:
                    out.removed.add(unquote(action["remove"]["path"]))
                    out.data_removed |= bool(action["remove"].get("dataChange", True))
        return out

    def data_uri(self, name: str, relative_path: str) -> str:
        """URI of a data file from its path relative to the table root."""
        return self.location.join("tables", name, relative_path)

    def can_scan_files(self, name: str) -> bool:
        """True when reading the file list equals reading the table (no DVs or partitions).

        The lake creates its tables without partitions or deletion vectors; this guards
        against a table changed by another Delta writer. Checked once per process.
        """
        cached = self._scannable.get(name)
        if cached is None:
            dt = self.handle(name)
            features = dt.protocol().writer_features or []
            cached = not dt.metadata().partition_columns and "deletionVectors" not in features
            self._scannable[name] = cached
        return cached

    def forget_files(self) -> None:
        """Drop cached file lists (after a vacuum deleted files of expired versions)."""
        self._files.clear()
