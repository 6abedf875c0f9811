"""The lake's Delta tables: creation, appends, versions and pinned file lists.

Tables are plain Delta (no partitions, no deletion vectors), so any Delta reader can open
them and DuckDB can scan the pinned file list directly. Appends happen under the lake's
commit lock, so each append's new version is known exactly.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from trajlake.errors import LakeCorrupt, NoSuchTable, SchemaMismatch, SnapshotExpired
from trajlake.lake._delta_commit import (
    DataFile,
    commit_actions,
    remove_action,
    write_data_files,
)
from trajlake.lake._delta_protocol import TableProtocol, check_protocol
from trajlake.lake._storage import LakeLocation
from trajlake.lake._validate import unreadable_log
from trajlake.schema import TABLES, table_schema

TABLE_CONFIGURATION = {
    # trajlake expires old log entries itself, keeping the versions tags and snapshots need.
    "delta.enableExpiredLogCleanup": "false",
    "delta.checkpointInterval": "100",
}


def read_parquet(
    location: LakeLocation,
    uris: Sequence[str],
    columns: Sequence[str] | None = None,
    filters: pc.Expression | None = None,
) -> pa.Table:
    """Read data files of the lake (local or on an object store) as one Arrow table."""
    cols = list(columns) if columns is not None else None
    if location.is_local:
        return pq.read_table(list(uris), columns=cols, filters=filters)
    fs = location.filesystem()
    paths = [u.split("://", 1)[1] for u in uris]
    return pq.read_table(paths, columns=cols, filters=filters, filesystem=fs)


@dataclass(frozen=True)
class Replacement:
    """What replacing the rows of some trajectories did to one table."""

    version: int
    files: list[DataFile]
    """Files added: the rewritten survivors of touched files, then the new rows."""
    removed: pa.Table
    """The rows taken out (their keys leave the key cache)."""


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
    """Some commit removed rows (restore, an update's rewrite): cached keys must change."""
    events: list[tuple[bool, str]] = field(default_factory=list)
    """(added?, path) of every action that changed rows, in commit order."""

    def net_data_changes(self) -> tuple[list[str], list[str]]:
        """(files whose rows arrived, files whose rows left) between the two versions.

        A file removed and re-added in between (a restore undoing an update) changed
        nothing; actions without a data change (compaction) never count.
        """
        first: dict[str, bool] = {}
        last: dict[str, bool] = {}
        for added, path in self.events:
            first.setdefault(path, added)
            last[path] = added
        # A file whose first action is a removal was live before; its last action says after.
        arrived = [p for p, a in last.items() if a and first[p]]
        left = [p for p, a in last.items() if not a and not first[p]]
        return arrived, left


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
                except DeltaError as e:
                    raise unreadable_log(self.location, name, e) from e
                self._handles[name] = dt
            else:
                dt.update_incremental()
            return dt

    def check_writable(self, name: str, *, removes_data: bool = False) -> None:
        """Refuse, before any file is written, a table whose Delta protocol the lake's commit
        writer does not implement (`commit_actions` checks again when it commits)."""
        check_protocol(name, TableProtocol.of(self.handle(name)), removes_data=removes_data)

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
            protocol=TableProtocol.of(self.handle(name)),
        )
        return version, files

    def files_holding(self, name: str, version: int, ids: Collection[str]) -> list[tuple[str, int]]:
        """(path, size) of the files at `version` whose `trajectory_id` range covers an id.

        Decided on the per-file statistics of the Delta log (the lake writes exact min/max of
        ids up to 64 characters); a file without them is always a candidate.
        """
        handle = self.handle(name)
        dt = handle if int(handle.version()) == version else self.at_version(name, version)
        actions = pa.table(dt.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return []
        paths = actions.column("path").to_pylist()
        sizes = actions.column("size_bytes").to_pylist()
        names = actions.column_names
        lows = (
            actions.column("min.trajectory_id").to_pylist()
            if "min.trajectory_id" in names
            else None
        )
        highs = (
            actions.column("max.trajectory_id").to_pylist()
            if "max.trajectory_id" in names
            else None
        )
        wanted = sorted(ids)
        out = []
        for i, path in enumerate(paths):
            low = lows[i] if lows is not None else None
            high = highs[i] if highs is not None else None
            if low is not None and high is not None:
                at = bisect.bisect_left(wanted, low)
                if at == len(wanted) or wanted[at] > high:
                    continue
            out.append((unquote(path), int(sizes[i])))
        return out

    def rows_of(
        self, name: str, version: int, ids: Collection[str], columns: Sequence[str]
    ) -> pa.Table:
        """The rows of some trajectories at `version` (only files that may hold them are read)."""
        files = [self.data_uri(name, p) for p, _ in self.files_holding(name, version, ids)]
        schema = table_schema(name)
        if not files or not ids:
            return schema.empty_table().select(list(columns))
        wanted = pc.field("trajectory_id").isin(pa.array(sorted(ids), pa.string()))
        return read_parquet(self.location, files, columns, wanted)

    def replace(
        self,
        name: str,
        ids: Collection[str],
        data: pa.Table,
        *,
        commit_id: str,
        next_version: int,
        target_file_bytes: int,
    ) -> Replacement | None:
        """Copy-on-write: take the rows of `ids` out and add `data`, in one Delta commit.

        Files holding those rows are removed and their other rows written again into new
        files; nothing is deleted from storage, so older versions keep reading the old rows.
        Under the lock. None when there was nothing to change.
        """
        data = check_schema(name, data)
        value_set = pa.array(sorted(ids), pa.string())
        removes: list[dict[str, object]] = []
        files: list[DataFile] = []
        removed: list[pa.Table] = []
        for path, size in self.files_holding(name, next_version - 1, ids):
            uri = self.data_uri(name, path)
            held = read_parquet(self.location, [uri], ["trajectory_id"]).column("trajectory_id")
            if not pc.any(pc.is_in(held, value_set=value_set)).as_py():
                continue  # the statistics' range covers an id, the file does not hold it
            rows = read_parquet(self.location, [uri])
            hit = pc.is_in(rows.column("trajectory_id"), value_set=value_set)
            removed.append(rows.filter(hit))
            rest = check_schema(name, rows.filter(pc.invert(hit)))
            removes.append(remove_action(path, size, data_change=True))
            if rest.num_rows:
                files += write_data_files(
                    self.location, name, rest, target_file_bytes=target_file_bytes
                )
        if data.num_rows:
            files += write_data_files(
                self.location, name, data, target_file_bytes=target_file_bytes
            )
        if not removes and not files:
            return None
        version = commit_actions(
            self.location,
            name,
            next_version,
            [*removes, *(f.add_action() for f in files)],
            operation="WRITE",
            commit_id=commit_id,
            blind_append=False,
            protocol=TableProtocol.of(self.handle(name)),
        )
        schema = table_schema(name)
        gone = (
            pa.concat_tables([check_schema(name, r) for r in removed])
            if removed
            else schema.empty_table()
        )
        return Replacement(version, files, gone)

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
                    out.events.append((True, out.data_added[-1]))
                if "remove" in action:
                    path = unquote(action["remove"]["path"])
                    out.removed.add(path)
                    if action["remove"].get("dataChange", True):
                        out.data_removed = True
                        out.events.append((False, path))
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
