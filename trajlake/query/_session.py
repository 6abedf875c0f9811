"""Read-only DuckDB sessions pinned to one lake snapshot, with a view per table.

Fast path: each view is `read_parquet([...])` over the exact files of the pinned Delta
version, which equals the table when it has no deletion vectors or partition columns (the
lake writes none). Otherwise, and for object stores, the view scans delta-rs's Arrow dataset.
The session is sandboxed: only the lake's directory is readable, and only queries run. Queries
run under limits: an optional timeout, Ctrl-C, and the database's memory and thread limits.

`sql(store, query, ...)` and `open_session(store, ...)` are how every layer queries a lake: they
take the storage object, which knows nothing of DuckDB, and find its database in `_database`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import pyarrow as pa

from trajlake.errors import QueryOutOfMemory, QueryTimeout, ReadOnlyQuery, TrajlakeError
from trajlake.query._database import lake_database, view_catalog
from trajlake.query._limits import QueryLimits, check_timeout
from trajlake.query._views import (
    DERIVED_VIEWS,
    ViewCatalog,
    register_arrow_views,
    sandboxed_database,
    views_named_in,
)
from trajlake.schema import TABLES

if TYPE_CHECKING:
    import polars as pl

    from trajlake.lake import LakeStore, Snapshot, SnapshotRef

log = logging.getLogger(__name__)
T = TypeVar("T")
SqlParams = Sequence[Any] | Mapping[str, Any] | None
"""Values bound to a query's placeholders: a sequence for `?`, a mapping for `$name`."""

_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?P<analyze>ANALY[SZ]E\s+)?(?P<inner>.*)$", re.I | re.S)


class QueryResult:
    """A materialised query result; convert it to the library you work in."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def to_arrow(self) -> pa.Table:
        """As a pyarrow Table."""
        return self._table

    def to_polars(self) -> pl.DataFrame:
        """As a Polars DataFrame."""
        import polars as pl

        frame = pl.from_arrow(self._table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def to_pandas(self) -> Any:
        """As a pandas DataFrame (needs pandas)."""
        return self._table.to_pandas()

    def to_duckdb(
        self, connection: duckdb.DuckDBPyConnection | None = None
    ) -> duckdb.DuckDBPyRelation:
        """As a DuckDB relation (on `connection`, or DuckDB's default connection)."""
        con = connection or duckdb.default_connection()
        return con.from_arrow(self._table)

    def to_dicts(self) -> list[dict[str, Any]]:
        """As a list of row dicts."""
        rows: list[dict[str, Any]] = self._table.to_pylist()
        return rows

    @property
    def columns(self) -> list[str]:
        """Column names."""
        return list(self._table.column_names)

    def rows(self) -> list[tuple[Any, ...]]:
        """As a list of row tuples."""
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns, strict=True)) if columns else []

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_dicts())

    def __repr__(self) -> str:
        return f"QueryResult({self._table.num_rows} rows × {self._table.num_columns} columns)"


class QuerySession:
    """A DuckDB connection whose views show the lake at one snapshot. Read-only."""

    def __init__(
        self,
        lake: LakeStore,
        snapshot: Snapshot,
        *,
        views: Collection[str] | None = None,
        timeout: float | None = None,
        memory_limit: int | str | None = None,
        threads: int | None = None,
    ) -> None:
        """Open a session; `views` limits it to some views (each costs a file listing once).

        Args:
            timeout: Seconds each query may run before it is stopped with `QueryTimeout`
                (None: no limit). A relation's watchdog counts from `relation()`.
            memory_limit: Bytes, or a size such as '8GB', DuckDB may hold for the session's
                queries (None: min(4 GiB, half the memory)); past it a query spills to the
                lake's private area where it can, else fails with `QueryOutOfMemory`.
            threads: DuckDB threads (None: the usable cores, at most 8).
        """
        self.lake = lake
        self.snapshot = snapshot
        self.timeout = check_timeout(timeout)
        self.limits = QueryLimits.resolve(memory_limit, threads)
        wanted = set(TABLES) | set(DERIVED_VIEWS) if views is None else set(views)
        self._own_database: duckdb.DuckDBPyConnection | None = None
        self._watchdogs: list[threading.Timer] = []
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._arrow_sources: list[Any] = []
        local = lake.location.is_local and all(lake.tables_store.can_scan_files(t) for t in TABLES)
        if self.limits == QueryLimits.default():
            # A cursor of the lake's sandboxed database: opening one costs microseconds where a
            # new DuckDB database costs ~15 ms.
            self.connection = lake_database(lake).cursor()
            catalog = view_catalog(lake) if local else None
        else:  # memory and threads are per database, and the lake's is locked
            root = lake.location.uri if lake.location.is_local else None
            self._own_database = sandboxed_database(root, self.limits)
            self.connection = self._own_database.cursor()
            catalog = ViewCatalog(self._own_database) if local else None
        self._schema: str | None = None
        if catalog is not None:
            self._schema = catalog.schema_for(lake, snapshot, wanted)
            self.connection.execute(f"USE {self._schema}")
        else:
            self._arrow_sources = register_arrow_views(lake, snapshot, self.connection, wanted)

    def check_read_only(self, query: str) -> None:
        """Raise ReadOnlyQuery unless every statement only reads."""
        try:
            statements = self.connection.extract_statements(query)
        except duckdb.Error as e:
            raise TrajlakeError(f"SQL error: {e}") from e
        for statement in statements:
            self._check_statement(statement.type.name, statement.query)

    def _check_statement(self, kind: str, text: str) -> None:
        if kind == "SELECT":
            return
        if kind == "EXPLAIN":
            match = _EXPLAIN.match(text)
            # EXPLAIN ANALYZE executes its statement; plain EXPLAIN only plans a query.
            if match and not match.group("analyze"):
                inner = self.connection.extract_statements(match.group("inner"))
                if all(s.type.name == "SELECT" for s in inner):
                    return
            kind = "EXPLAIN ANALYZE or EXPLAIN of a non-query"
        raise ReadOnlyQuery(
            f"{kind} statements are not allowed: lake queries are read-only "
            "(write data with `trajlake ingest` or the Python API)"
        )

    def sql(self, query: str, params: SqlParams = None) -> QueryResult:
        """Run a read-only query and materialise its result (within the session's timeout).

        `params` binds values to the query's placeholders (`?` with a sequence, `$name` with a
        mapping), so values never need quoting into the SQL text.
        """
        self.check_read_only(query)
        log.debug("query started (timeout %s s): %.200s", self.timeout, query)
        try:
            table = self._bounded(lambda: _materialise(self.connection, query, params))
        except duckdb.OutOfMemoryException as e:
            raise QueryOutOfMemory(
                f"query needs more memory than its {self.limits.describe()} limit; raise it with "
                "memory_limit=SIZE (CLI: --memory-limit SIZE, e.g. 16GB) or select fewer rows "
                f"or columns ({_first_line(e)})"
            ) from e
        except duckdb.InterruptException as e:
            raise TrajlakeError("query interrupted") from e
        except duckdb.Error as e:
            raise TrajlakeError(f"SQL error: {e}") from e
        return QueryResult(table)

    def relation(
        self, query: str, *, own_cursor: bool = False, params: SqlParams = None
    ) -> duckdb.DuckDBPyRelation:
        """A lazy DuckDB relation, for streaming large results (`to_arrow_reader`).

        With `own_cursor`, it runs on a separate cursor, so other queries can run on the
        session while its result is still being read. With a session timeout it always has
        its own cursor, and a watchdog interrupts it (DuckDB's `InterruptException`) once the
        timeout has passed since this call.
        """
        self.check_read_only(query)
        connection = self.connection
        if own_cursor or self.timeout is not None:
            connection = self.cursor()
        if self.timeout is not None:
            watchdog = threading.Timer(self.timeout, connection.interrupt)
            watchdog.daemon = True
            watchdog.start()
            self._watchdogs.append(watchdog)
        return connection.sql(query, params=params)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """Another connection seeing the same views (closed with the session)."""
        cursor = self.connection.cursor()
        if self._schema is not None:  # a cursor does not inherit `USE`
            cursor.execute(f"USE {self._schema}")
        else:
            # Arrow registrations and temporary views belong to one connection.
            self._arrow_sources += register_arrow_views(
                self.lake, self.snapshot, cursor, set(TABLES) | set(DERIVED_VIEWS)
            )
        self._cursors.append(cursor)
        return cursor

    def _bounded(self, work: Callable[[], T]) -> T:
        """Run `work` on a worker thread and wait for it, so that both the timeout and Ctrl-C
        (which Python delivers to the main thread only) can interrupt DuckDB mid-query."""
        on_main = threading.current_thread() is threading.main_thread()
        if self.timeout is None and not on_main:
            return work()
        outcome: dict[str, Any] = {}
        done = threading.Event()
        # An Event, not Thread.join: a join cut short by Ctrl-C can mark a running thread as
        # finished (CPython bpo-45274), and the wait below would then return at once.
        worker = threading.Thread(target=_capture, args=(work, outcome, done), daemon=True)
        worker.start()
        try:
            finished = done.wait(self.timeout)
        except BaseException:  # Ctrl-C: stop the query, then let the interrupt through
            self._interrupt(done)
            raise
        if not finished:
            self._interrupt(done)
            if "value" not in outcome:  # it may have finished just as the time ran out
                raise QueryTimeout(
                    f"query stopped after its {self.timeout:g} s timeout; raise the limit with "
                    "timeout=SECONDS (CLI: --timeout SECONDS, 0 for none)"
                ) from outcome.get("error")
        if "error" in outcome:
            raise outcome["error"]
        value: T = outcome["value"]
        return value

    def _interrupt(self, done: threading.Event) -> None:
        self.connection.interrupt()
        if not done.wait(30):  # DuckDB checks for interrupts between chunks of work
            log.warning("an interrupted query is still running in the background")

    def close(self) -> None:
        """Close the DuckDB connection (and the session's own database, if it has one)."""
        for watchdog in self._watchdogs:
            watchdog.cancel()
        for cursor in self._cursors:
            cursor.close()
        self.connection.close()
        if self._own_database is not None:
            self._own_database.close()  # DuckDB removes its spill directory here

    def __enter__(self) -> QuerySession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_session(
    store: LakeStore,
    at: SnapshotRef = None,
    *,
    timeout: float | None = None,
    memory_limit: int | str | None = None,
    threads: int | None = None,
) -> QuerySession:
    """A read-only DuckDB session with a view per table, pinned to one snapshot (limits as in
    `sql`); close it, or use it as a context manager."""
    return QuerySession(
        store, store.snapshot(at), timeout=timeout, memory_limit=memory_limit, threads=threads
    )


def sql(
    store: LakeStore,
    query: str,
    params: SqlParams = None,
    *,
    at: SnapshotRef = None,
    timeout: float | None = None,
    memory_limit: int | str | None = None,
    threads: int | None = None,
) -> QueryResult:
    """Run read-only SQL on a pinned snapshot of `store`; convert with to_arrow/to_polars/….

    `params` binds values to placeholders (`?` with a sequence, `$name` with a mapping):
    `sql(lake, "SELECT * FROM trajectories WHERE task_id = ?", [task])` needs no quoting.

    `timeout` (seconds, default none) stops a longer query with `QueryTimeout`; Ctrl-C
    stops it with KeyboardInterrupt. `memory_limit` (bytes or '8GB'; default min(4 GiB,
    half the memory)) and `threads` (default min(cores, 8)) bound DuckDB; a query over the
    limit spills to `_trajlake/sqltmp-*` where it can, else fails with `QueryOutOfMemory`.
    """
    with QuerySession(
        store,
        store.snapshot(at),
        views=views_named_in(query),
        timeout=timeout,
        memory_limit=memory_limit,
        threads=threads,
    ) as session:
        return session.sql(query, params)


def _materialise(
    connection: duckdb.DuckDBPyConnection, query: str, params: SqlParams = None
) -> pa.Table:
    try:
        return connection.sql(query, params=params).to_arrow_table()
    except AttributeError:  # a statement without result (e.g. EXPLAIN in some versions)
        return pa.table({})


def _capture(work: Callable[[], Any], outcome: dict[str, Any], done: threading.Event) -> None:
    try:
        outcome["value"] = work()
    except BaseException as e:  # handed to the waiting thread, which raises it
        outcome["error"] = e
    finally:
        done.set()


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
