"""`LakeStore`: open or create a lake, commit atomically across tables, resolve snapshots, tags.

This is storage only. Querying (DuckDB), ingest and export live in the layers above and take a
store as an argument; the user-facing `trajlake.api.Lake` composes them on top of this class.
So the store knows no caller: where an upper layer keeps per-store state (the query layer's
DuckDB database), the store offers generic hooks (`on_close`, `files_epoch`) and nothing more.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa

from trajlake.errors import LakeAlreadyExists, LakeCorrupt, LakeNotFound, StorageUnreachable
from trajlake.lake._commit import CommitContext, CommitResult, commit_tables, recover
from trajlake.lake._dedupe import KeyIndex
from trajlake.lake._lock import commit_lock
from trajlake.lake._log import Snapshot, SnapshotLog, Tag, utc_now
from trajlake.lake._storage import LakeLocation, MetadataStore, parse_location
from trajlake.lake._tables import TableStore, validate_table_name
from trajlake.records import trajectories_to_tables
from trajlake.schema import SCHEMA_VERSION, TABLES, CanonicalTrajectory

if TYPE_CHECKING:
    from trajlake.lake._maintain import MaintenanceReport
    from trajlake.lake._validate import ValidationReport
    from trajlake.lake._writer import BufferedWriter

log = logging.getLogger(__name__)

LAKE_FORMAT_VERSION = 1
_OPEN_LAKES: weakref.WeakSet[LakeStore] = weakref.WeakSet()
_S = TypeVar("_S", bound="LakeStore")


@atexit.register
def _finish_background_work() -> None:
    # Let a running compaction commit or give up cleanly rather than die mid-write.
    for lake in list(_OPEN_LAKES):
        lake.wait_for_maintenance(timeout=60)


_CONFIG = ("_trajlake", "lake.json")
SnapshotRef = int | str | dt.datetime | None
"""A snapshot reference: id, tag name, 'latest', an ISO timestamp string, a datetime or None."""


@dataclass(frozen=True)
class LakeSettings:
    """Per-lake maintenance settings, stored in `_trajlake/lake.json`."""

    auto_maintain_every: int = 50
    """Run incremental maintenance after this many commits (0 disables it)."""
    compact_min_files: int = 16
    """Compact a table once it has at least this many small files."""
    target_file_mb: int = 100
    """Target size of compacted Parquet files."""
    log_versions: int = 100
    """Delta log versions kept per table for time travel (tagged versions are always kept)."""
    retention_hours: int = 168
    """Data files removed by compaction are deleted only after this long (and never if tagged)."""


def open_store(
    uri: str | os.PathLike[str],
    *,
    create: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> LakeStore:
    """Open the lake storage at `uri` (see `LakeStore.open`); `trajlake.open_lake` gives the
    user-facing `Lake`, which adds ingest, SQL and export on top."""
    return LakeStore.open(uri, create=create, storage_options=storage_options)


def init_store(
    uri: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> LakeStore:
    """Create new lake storage at `uri` (see `LakeStore.init`)."""
    return LakeStore.init(uri, storage_options=storage_options)


def _reachable_exists(store: MetadataStore, uri: str) -> bool:
    """Whether the lake's config exists; storage that cannot be reached is a TrajlakeError."""
    try:
        return store.exists(*_CONFIG)
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        raise
    except Exception as e:  # credentials, endpoint, network: whatever the backend raises
        raise StorageUnreachable(
            f"cannot reach the lake storage at {uri!r}: {type(e).__name__}: {e}; check the "
            "credentials and endpoint (--storage-option KEY=VALUE or TRAJLAKE_STORAGE_OPTIONS)"
        ) from e


class LakeStore:
    """A trajectory lake's storage: versioned Delta tables pinned together by lake snapshots.

    Layers above take a store and add what they own (`trajlake.query.sql(store, ...)`,
    `trajlake.export.jsonl.export_jsonl(store, ...)`); `trajlake.api.Lake` subclasses it to
    offer all of that as methods.
    """

    @classmethod
    def open(
        cls: type[_S],
        uri: str | os.PathLike[str],
        *,
        create: bool = False,
        storage_options: Mapping[str, str] | None = None,
    ) -> _S:
        """Open the lake at `uri` (local path, `memory://NAME`, `s3://…`, `gs://…`, `az://…`).

        Args:
            uri: where the lake lives.
            create: create the lake if it does not exist yet.
            storage_options: delta-rs storage options for object stores (credentials, endpoint).
        """
        location = parse_location(uri, storage_options)
        store = MetadataStore(location)
        if not _reachable_exists(store, os.fspath(uri)):
            if not create:
                raise LakeNotFound(
                    f"no trajlake lake at {os.fspath(uri)!r}; create one with "
                    f"`trajlake init --lake {os.fspath(uri)}` or open_lake(..., create=True)"
                )
            return cls._create(location, store)
        return cls(location, store)

    @classmethod
    def init(
        cls: type[_S],
        uri: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> _S:
        """Create a new lake (LakeAlreadyExists if one is there)."""
        location = parse_location(uri, storage_options)
        store = MetadataStore(location)
        if _reachable_exists(store, os.fspath(uri)):
            raise LakeAlreadyExists(f"a lake already exists at {os.fspath(uri)!r}")
        return cls._create(location, store)

    def __init__(self, location: LakeLocation, store: MetadataStore) -> None:
        self.location = location
        self._store = store
        config = json.loads(store.read(*_CONFIG))
        if config.get("format_version", 0) > LAKE_FORMAT_VERSION:
            raise LakeCorrupt(
                f"lake format {config['format_version']} is newer than this trajlake supports "
                f"({LAKE_FORMAT_VERSION}); upgrade trajlake"
            )
        self.settings = LakeSettings(**config.get("settings", {}))
        self._config = config
        self._log = SnapshotLog(store)
        self._tables = TableStore(location)
        self._keys = KeyIndex(location, self._tables)
        self._commits_since_maintenance = 0
        self._maintenance_thread: threading.Thread | None = None
        # State that layers above keep per store (the query layer's DuckDB database) is
        # released through these; the store never looks at what they hold.
        self._close_hooks: list[Callable[[], None]] = []
        self._hooks_mutex = threading.Lock()
        self._files_epoch = 0
        if not set(TABLES) <= set(config.get("tables", ())):
            self._add_new_tables()
        _OPEN_LAKES.add(self)

    def _add_new_tables(self) -> None:
        """Create tables this trajlake has and the lake predates (empty, at the version 0
        that older snapshots pin implicitly: see `Snapshot.from_json`)."""
        with self._lock():
            config = json.loads(self._store.read(*_CONFIG))
            self._tables.create_all()
            config["tables"] = list(TABLES)
            self._store.write(json.dumps(config, indent=2).encode(), *_CONFIG)
            self._config = config

    @classmethod
    def _create(cls: type[_S], location: LakeLocation, store: MetadataStore) -> _S:
        with commit_lock(location.uri, location.storage_options):
            if not store.exists(*_CONFIG):
                versions = TableStore(location).create_all()
                snapshot = Snapshot(0, utc_now(), "init", versions, {}, None)
                SnapshotLog(store).append(snapshot)
                config = {
                    "format": "trajlake",
                    "format_version": LAKE_FORMAT_VERSION,
                    "schema_version": SCHEMA_VERSION,
                    "tables": list(TABLES),
                    "created_at": utc_now(),
                    "settings": asdict(LakeSettings()),
                }
                # Written last: a lake exists once its config does.
                store.write(json.dumps(config, indent=2).encode(), *_CONFIG)
        return cls(location, store)

    @property
    def uri(self) -> str:
        """The lake's root URI (absolute path for local lakes)."""
        return self.location.uri

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    # Snapshots and tags --------------------------------------------------------------------

    def snapshot(self, at: SnapshotRef = None) -> Snapshot:
        """Resolve a snapshot reference: None/'latest', an id, a tag name or a timestamp."""
        if at is None or at == "latest":
            return self._log.latest()
        if isinstance(at, bool):
            raise TypeError("snapshot reference must be an id, tag, timestamp or 'latest'")
        if isinstance(at, int):
            return self._log.get(at)
        if isinstance(at, dt.datetime):
            return self._log.at_time(at)
        if isinstance(at, str):
            text = at.strip()
            if text.isdigit():
                return self._log.get(int(text))
            if text.startswith("@") or re.match(r"^\d{4}-\d{2}-\d{2}", text):
                when = dt.datetime.fromisoformat(text.lstrip("@"))
                return self._log.at_time(when)
            return self._log.get(self._log.get_tag(text).snapshot_id)
        raise TypeError(f"cannot resolve snapshot reference {at!r}")

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot, oldest first."""
        return self._log.all()

    def tag(self, name: str, *, at: SnapshotRef = None, note: str = "") -> Tag:
        """Give a snapshot an immutable name; its table versions stay readable for good."""
        from trajlake.lake._maintain import protect_versions

        with self._lock():
            snap = self.snapshot(at)
            tag = self._log.create_tag(name, snap.snapshot_id, note)
            protect_versions(self._tables, snap.tables)
        return tag

    def tags(self) -> list[Tag]:
        """All tags."""
        return self._log.tags()

    # Writing ---------------------------------------------------------------------------------

    def _lock(self) -> Any:
        return commit_lock(self.location.uri, self.location.storage_options)

    def commit(
        self,
        tables: Mapping[str, pa.Table],
        *,
        operation: str = "append",
        summary: Mapping[str, Any] | None = None,
        dedupe_content: bool = False,
        on_conflict: Literal["keep", "fail"] = "keep",
    ) -> CommitResult:
        """Append rows to several tables in one snapshot: all of them become visible or none.

        Rows whose key is already stored are dropped (re-ingest is a no-op); messages follow
        their trajectories. A trajectory whose id is stored is a duplicate when its content
        hash (or its messages) are the same, an update when its messages extend the stored
        ones (the stored rows are replaced; older snapshots keep them), and a conflict
        otherwise: kept under `<id>~<hash8>` with `attrs.id_conflict_of`, or with
        `on_conflict="fail"` a TrajectoryIdConflict before anything is written. With
        `dedupe_content`, a new trajectory whose content hash is already stored is dropped
        too (the same rollout from another source). When nothing is new, no snapshot is
        created.
        """
        result = commit_tables(
            self._journal(),
            tables,
            operation=operation,
            summary=summary,
            dedupe=dedupe_content,
            on_conflict=on_conflict,
        )
        if result.snapshot_id == result.previous_id:
            return result
        self._commits_since_maintenance += 1
        every = self.settings.auto_maintain_every
        if every and self._commits_since_maintenance >= every:
            self._start_background_maintenance()
        return result

    def _start_background_maintenance(self) -> None:
        """Incremental maintenance in a background thread: commits never wait for compaction."""
        if self._maintenance_thread is not None and self._maintenance_thread.is_alive():
            return
        self._commits_since_maintenance = 0
        thread = threading.Thread(
            target=self._background_maintenance, name="trajlake-maintain", daemon=True
        )
        self._maintenance_thread = thread
        thread.start()

    def _background_maintenance(self) -> None:
        try:
            self.maintain(incremental=True)
        except Exception:  # a failed background run is retried later; commits are unaffected
            log.exception("background maintenance of %s failed", self.uri)

    def wait_for_maintenance(self, timeout: float | None = None) -> None:
        """Block until a background maintenance run (if any) has finished."""
        thread = self._maintenance_thread
        if thread is not None:
            thread.join(timeout)

    def close(self) -> None:
        """Finish background maintenance and release what layers above keep for this store
        (their `on_close` hooks); the lake object stays usable and they rebuild on next use."""
        self.wait_for_maintenance()
        with self._hooks_mutex:
            hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            hook()

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call `hook` once at the next `close()` (a layer above releasing its per-store state:
        the query layer closes its DuckDB database this way)."""
        with self._hooks_mutex:
            self._close_hooks.append(hook)

    @property
    def files_epoch(self) -> int:
        """Grows whenever cached data-file lists may name deleted files (after a vacuum), so a
        layer that caches file lists (the query layer's views) knows to rebuild them."""
        return self._files_epoch

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def recover(self, head: Snapshot, *, check_all: bool = False) -> Snapshot:
        """Undo what a writer that died mid-commit left behind; return the (new) head.

        Call under the commit lock (see `trajlake.lake._commit.recover`).
        """
        return recover(self._journal(), head, check_all=check_all)

    def _journal(self) -> CommitContext:
        return CommitContext(self._log, self._tables, self._keys, self.settings, self._lock)

    def write(
        self,
        trajectories: Iterable[CanonicalTrajectory | Mapping[str, Any]],
        *,
        operation: str = "write",
        summary: Mapping[str, Any] | None = None,
        dedupe_content: bool = False,
        on_conflict: Literal["keep", "fail"] = "keep",
    ) -> CommitResult:
        """Store canonical trajectories (records or dicts) with their messages in one commit.

        Taken ids are duplicates, updates or conflicts as in `commit`. With `dedupe_content`,
        trajectories whose content hash is already stored are skipped.
        """
        records = [
            t if isinstance(t, CanonicalTrajectory) else CanonicalTrajectory.model_validate(t)
            for t in trajectories
        ]
        tables = trajectories_to_tables(records)
        return self.commit(
            tables,
            operation=operation,
            summary=summary,
            dedupe_content=dedupe_content,
            on_conflict=on_conflict,
        )

    def writer(self, *, max_trajectories: int = 256, max_seconds: float = 5.0) -> BufferedWriter:
        """A buffered writer: push trajectories one at a time, committed in batches."""
        from trajlake.lake._writer import BufferedWriter

        return BufferedWriter(self, max_trajectories=max_trajectories, max_seconds=max_seconds)

    # Reading ---------------------------------------------------------------------------------

    def table_files(self, table: str, at: SnapshotRef = None) -> list[str]:
        """Data files of a table at a snapshot (for engines that read Parquet directly)."""
        snap = self.snapshot(at)
        return list(self._tables.files(table, snap.tables[validate_table_name(table)]))

    def table_version(self, table: str, at: SnapshotRef = None) -> int:
        """The Delta version of a table pinned by a snapshot (for other Delta readers)."""
        return int(self.snapshot(at).tables[validate_table_name(table)])

    def read_table(
        self, table: str, *, at: SnapshotRef = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """A whole table (or some columns) at a snapshot, as Arrow."""
        snap = self.snapshot(at)
        dt_ = self._tables.at_version(validate_table_name(table), snap.tables[table])
        return dt_.to_pyarrow_table(columns=list(columns) if columns else None)

    # Maintenance -----------------------------------------------------------------------------

    def maintain(
        self, *, incremental: bool = False, vacuum: bool = True, dry_run: bool = False
    ) -> MaintenanceReport:
        """Compact small files, checkpoint, expire old log entries and vacuum unneeded files.

        Never removes what a tag or a snapshot in the retention window still needs.
        """
        from trajlake.lake._maintain import run_maintenance

        report = run_maintenance(self, incremental=incremental, vacuum=vacuum, dry_run=dry_run)
        self._commits_since_maintenance = 0
        if not incremental:
            # File lists and views of expired versions may name files the vacuum deleted.
            self._tables.forget_files()
            self._files_epoch += 1
        return report

    def validate(self) -> ValidationReport:
        """Check that every snapshot's tables load and every pinned file exists."""
        from trajlake.lake._validate import validate_lake

        return validate_lake(self)

    # Internals used by sibling modules ------------------------------------------------------

    @property
    def tables_store(self) -> TableStore:
        """The Delta table handles (maintenance, validation, query)."""
        return self._tables

    @property
    def snapshot_log(self) -> SnapshotLog:
        """The snapshot log (maintenance, validation)."""
        return self._log

    def locked(self) -> Any:
        """The commit lock, for operations that must not interleave with commits."""
        return self._lock()

    def table_names(self) -> tuple[str, ...]:
        """Names of the lake's tables."""
        return TABLES
