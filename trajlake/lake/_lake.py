"""`Lake`: open/create a lake, commit data atomically across tables, resolve snapshots and tags."""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import os
import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import duckdb
import pyarrow as pa

from trajlake._progress import Progress
from trajlake.errors import (
    LakeAlreadyExists,
    LakeCorrupt,
    LakeNotFound,
    NoSuchTrajectory,
    StorageUnreachable,
)
from trajlake.lake._commit import CommitContext, CommitResult, commit_tables, recover
from trajlake.lake._dedupe import KeyIndex
from trajlake.lake._lock import commit_lock
from trajlake.lake._log import Snapshot, SnapshotLog, Tag, utc_now
from trajlake.lake._storage import LakeLocation, MetadataStore, parse_location
from trajlake.lake._tables import TableStore, validate_table_name
from trajlake.records import trajectories_to_tables
from trajlake.schema import SCHEMA_VERSION, TABLES, CanonicalTrajectory, Stage

if TYPE_CHECKING:
    from trajlake._query_views import ViewCatalog
    from trajlake.export.jsonl import ExportReport
    from trajlake.export.sft import SftExportReport
    from trajlake.ingest import IngestReport
    from trajlake.ingest.labels import LabelFormat, LabelReport
    from trajlake.ingest.redact import AllowList
    from trajlake.lake._maintain import MaintenanceReport
    from trajlake.lake._validate import ValidationReport
    from trajlake.lake._writer import BufferedWriter
    from trajlake.query import QueryResult, QuerySession

log = logging.getLogger(__name__)

LAKE_FORMAT_VERSION = 1
_OPEN_LAKES: weakref.WeakSet[Lake] = weakref.WeakSet()


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


def open_lake(
    uri: str | os.PathLike[str],
    *,
    create: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> Lake:
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
        return Lake._create(location, store)
    return Lake(location, store)


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


def init_lake(
    uri: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> Lake:
    """Create a new lake (LakeAlreadyExists if one is there)."""
    location = parse_location(uri, storage_options)
    store = MetadataStore(location)
    if _reachable_exists(store, os.fspath(uri)):
        raise LakeAlreadyExists(f"a lake already exists at {os.fspath(uri)!r}")
    return Lake._create(location, store)


class Lake:
    """A trajectory lake: versioned Delta tables pinned together by lake snapshots."""

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
        self._duckdb: duckdb.DuckDBPyConnection | None = None
        self._views: ViewCatalog | None = None
        self._duckdb_mutex = threading.Lock()
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
    def _create(cls, location: LakeLocation, store: MetadataStore) -> Lake:
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
        return f"Lake({self.uri!r})"

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
        """Finish background maintenance; the lake object stays usable."""
        self.wait_for_maintenance()

    def __enter__(self) -> Lake:
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

    def ingest(
        self,
        inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        format: str = "auto",
        generation: int | None = None,
        run_id: str | None = None,
        stage: Stage | None = None,
        strict: bool = False,
        batch_size: int = 1000,
        redact: bool = True,
        redact_personal: bool = False,
        allow_list: str | os.PathLike[str] | AllowList | None = None,
        dedupe_content: bool = False,
        workers: int | None = None,
        labels: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest trajectory files (paths, directories, globs, fsspec URLs, .gz/.zst).

        Args:
            inputs: one input or several.
            format: a format name (`trajlake.ingest.format_names()`) or 'auto' (by content).
            generation, run_id, stage: set on every ingested trajectory; `run_id` also
                scopes every id (`<id>@<run_id>`), so runs that reuse rollout ids stay apart.
            strict: raise on the first bad record instead of quarantining it, and on a
                trajectory id taken by other messages (checked per commit, before it is
                written) instead of keeping it under a derived id.
            batch_size: trajectories per commit (memory stays bounded by it).
            redact: replace secrets with typed placeholders (`<SECRET:openai_key:1>`).
            redact_personal: also replace personal data (e-mail addresses, phone numbers).
            allow_list: values never redacted: an allow-list file (see docs/redaction.md) or
                a `trajlake.ingest.redact.AllowList`.
            dedupe_content: also skip trajectories whose content hash is already stored
                (the same rollout from two sources; off by default because distinct samples
                can share their text — the `duplicates` view lists such groups).
            workers: parsing processes for big inputs (None: one per core).
            labels: verifier outputs to attach right after (see `label`); the label report
                is in `IngestReport.labels`.
            storage_options: fsspec options for remote inputs.
            progress: receives progress (bytes read).
        """
        from trajlake.ingest import IngestOptions, ingest

        items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
        options = IngestOptions(
            generation=generation,
            run_id=run_id,
            stage=stage,
            strict=strict,
            batch_size=batch_size,
            redact=redact,
            redact_personal=redact_personal,
            allow_list=allow_list,
            dedupe_content=dedupe_content,
            workers=workers,
        )
        report = ingest(
            self,
            [os.fspath(i) for i in items],
            format=format,
            options=options,
            storage_options=storage_options,
            progress=progress,
        )
        if labels is not None:
            report.labels = self.label(
                labels, run_id=run_id, storage_options=storage_options
            ).to_dict()
            report.snapshot_id = report.labels["snapshot"]
        return report

    def label(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        format: LabelFormat = "auto",
        run_id: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> LabelReport:
        """Attach verifier outcomes (SWE-bench, sb-cli, Terminal-Bench, CSV/JSONL) as labels.

        Labels match trajectories by id, else by task id + run id; the `outcomes` view gives
        each trajectory's effective outcome. Re-labelling with the same files adds nothing.
        """
        from trajlake.ingest.labels import attach_labels

        return attach_labels(
            self, paths, format=format, run_id=run_id, storage_options=storage_options
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

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """The lake's sandboxed DuckDB database (query sessions are cursors of it)."""
        from trajlake._query_views import sandboxed_database

        with self._duckdb_mutex:
            if self._duckdb is None:
                root = self.location.uri if self.location.is_local else None
                self._duckdb = sandboxed_database(root)
            return self._duckdb

    def view_catalog(self) -> ViewCatalog:
        """Per-snapshot view schemas of the lake's database (built lazily, kept for reuse)."""
        from trajlake._query_views import ViewCatalog

        db = self.duckdb()
        with self._duckdb_mutex:
            if self._views is None:
                self._views = ViewCatalog(self, db)
            return self._views

    def query(
        self,
        at: SnapshotRef = None,
        *,
        timeout: float | None = None,
        memory_limit: int | str | None = None,
        threads: int | None = None,
    ) -> QuerySession:
        """A read-only DuckDB session with a view per table, pinned to one snapshot (limits as
        in `sql`)."""
        from trajlake.query import QuerySession

        return QuerySession(
            self, self.snapshot(at), timeout=timeout, memory_limit=memory_limit, threads=threads
        )

    def sql(
        self,
        query: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        at: SnapshotRef = None,
        timeout: float | None = None,
        memory_limit: int | str | None = None,
        threads: int | None = None,
    ) -> QueryResult:
        """Run read-only SQL on a pinned snapshot; convert with to_arrow/to_polars/to_pandas.

        `params` binds values to placeholders (`?` with a sequence, `$name` with a mapping):
        `lake.sql("SELECT * FROM trajectories WHERE task_id = ?", [task])` needs no quoting.

        `timeout` (seconds, default none) stops a longer query with `QueryTimeout`; Ctrl-C
        stops it with KeyboardInterrupt. `memory_limit` (bytes or '8GB'; default min(4 GiB,
        half the memory)) and `threads` (default min(cores, 8)) bound DuckDB; a query over the
        limit spills to `_trajlake/sqltmp-*` where it can, else fails with `QueryOutOfMemory`.
        """
        from trajlake._query_views import views_named_in
        from trajlake.query import QuerySession

        snapshot = self.snapshot(at)
        with QuerySession(
            self,
            snapshot,
            views=views_named_in(query),
            timeout=timeout,
            memory_limit=memory_limit,
            threads=threads,
        ) as session:
            return session.sql(query, params)

    def export_jsonl(
        self,
        out: str,
        *,
        at: SnapshotRef = None,
        where: str | None = None,
        progress: Progress | None = None,
    ) -> ExportReport:
        """Write canonical JSONL (one trajectory per line) of the selected trajectories."""
        from trajlake.export.jsonl import export_jsonl

        return export_jsonl(self, out, at=at, where=where, progress=progress)

    def export_atif(
        self,
        out: str,
        *,
        at: SnapshotRef = None,
        where: str | None = None,
        progress: Progress | None = None,
    ) -> ExportReport:
        """Write Harbor ATIF trajectories: a folder of `<id>.json` + `manifest.jsonl`, or one
        `.jsonl` file (see `trajlake.export.atif.export_atif`)."""
        from trajlake.export.atif import export_atif

        return export_atif(self, out, at=at, where=where, progress=progress)

    def export_sft(self, out: str, *, format: str, **options: Any) -> SftExportReport:
        """Write a loss-weighted SFT dataset (see `trajlake.export.sft.export_sft` for options:
        at, where, credit, mask, min_weight, tokenizer, max_tokens, val_frac, seed, shard_mb)."""
        from trajlake.export.sft import export_sft

        return export_sft(self, out, format=format, **options)

    def trajectory(self, trajectory_id: str, *, at: SnapshotRef = None) -> CanonicalTrajectory:
        """One trajectory with all its messages, as a canonical record."""
        from trajlake.export.jsonl import read_canonical

        found = read_canonical(self, at=at, ids=[trajectory_id])
        if not found:
            raise NoSuchTrajectory(
                f"no trajectory {trajectory_id!r} at snapshot {self.snapshot(at).snapshot_id}"
            )
        return CanonicalTrajectory.model_validate(found[0])

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
            if self._views is not None:
                self._views.reset()
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
