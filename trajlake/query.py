"""Read-only DuckDB sessions pinned to one lake snapshot, with a view per table.

Fast path: each view is `read_parquet([...])` over the exact files of the pinned Delta
version, which equals the table when it has no deletion vectors or partition columns (the
lake writes none). Otherwise, and for object stores, the view scans delta-rs's Arrow dataset.
The session is sandboxed: only the lake's directory is readable, and only queries run.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from trajlake.errors import ReadOnlyQuery, TrajlakeError
from trajlake.schema import TABLES, table_schema

if TYPE_CHECKING:
    import polars as pl

    from trajlake.lake._lake import Lake
    from trajlake.lake._log import Snapshot

log = logging.getLogger(__name__)

_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?P<analyze>ANALY[SZ]E\s+)?(?P<inner>.*)$", re.I | re.S)

DERIVED_VIEWS: dict[str, str] = {
    "tool_calls": """
        SELECT trajectory_id, thread, idx, turn, tc.id AS call_id, tc.name AS tool_name,
               tc.arguments AS arguments, tc.type AS call_type
        FROM (SELECT trajectory_id, thread, idx, turn, unnest(tool_calls) AS tc
              FROM messages WHERE tool_calls IS NOT NULL)
    """,
    # Effective outcome: a label matched by trajectory id beats one matched by task + run,
    # which beats what the rollout recorded itself; among labels the newest wins.
    "outcomes": """
        WITH matched AS (
            SELECT t.trajectory_id, l.resolved, l.reward, l.source, l.created_at, l.label_id,
                   0 AS priority
            FROM trajectories t JOIN labels l ON l.trajectory_id = t.trajectory_id
            UNION ALL
            SELECT t.trajectory_id, l.resolved, l.reward, l.source, l.created_at, l.label_id,
                   1 AS priority
            FROM trajectories t JOIN labels l
              ON l.trajectory_id IS NULL AND l.task_id = t.task_id AND l.run_id = t.run_id
        ), best AS (
            SELECT * FROM matched
            QUALIFY row_number() OVER (PARTITION BY trajectory_id
                ORDER BY priority, created_at DESC NULLS LAST, label_id DESC) = 1
        )
        SELECT t.trajectory_id, t.task_id, t.run_id, t.generation,
               coalesce(b.resolved, t.resolved) AS resolved,
               coalesce(b.reward, t.reward) AS reward,
               CASE WHEN b.trajectory_id IS NOT NULL THEN 'label:' || b.source
                    ELSE t.outcome_source END AS outcome_source
        FROM trajectories t LEFT JOIN best b ON b.trajectory_id = t.trajectory_id
    """,
    # The same conversation stored under several ids (e.g. one rollout read from two formats).
    "duplicates": """
        SELECT content_hash, count(*) AS copies,
               list(trajectory_id ORDER BY trajectory_id) AS trajectory_ids
        FROM trajectories WHERE content_hash IS NOT NULL
        GROUP BY content_hash HAVING count(*) > 1
    """,
}


VIEW_TABLES: dict[str, set[str]] = {
    "tool_calls": {"messages"},
    "outcomes": {"trajectories", "labels"},
    "duplicates": {"trajectories"},
}
"""Tables each derived view reads."""


def views_named_in(query: str) -> set[str]:
    """Lake views a query mentions (a superset is harmless: it only costs a file listing)."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query.lower()))
    return words & (set(TABLES) | set(DERIVED_VIEWS))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


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


def sandboxed_database(lake_root: str | None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database that can read only the lake's folder and cannot be
    reconfigured (local lakes; object-store tables are scanned through Arrow datasets)."""
    db = duckdb.connect()
    if lake_root is not None:
        db.execute(f"SET allowed_directories=[{_quote(lake_root.rstrip('/') + '/')}]")
    db.execute("SET enable_external_access=false")
    db.execute("SET lock_configuration=true")
    return db


class QuerySession:
    """A DuckDB connection whose views show the lake at one snapshot. Read-only."""

    def __init__(
        self, lake: Lake, snapshot: Snapshot, *, views: Collection[str] | None = None
    ) -> None:
        """Open a session; `views` limits it to some views (each table costs a file listing)."""
        self.lake = lake
        self.snapshot = snapshot
        # A cursor of the lake's sandboxed database: opening one costs microseconds where a
        # new DuckDB database costs ~15 ms; its temporary views are its own.
        self.connection = lake.duckdb().cursor()
        self._arrow_sources: list[Any] = []
        wanted = set(TABLES) | set(DERIVED_VIEWS) if views is None else set(views)
        derived = [v for v in DERIVED_VIEWS if v in wanted]
        tables = wanted.intersection(TABLES).union(*(VIEW_TABLES[v] for v in derived))
        for table in TABLES:
            if table in tables:
                self._create_view(table)
        for name in derived:
            self.connection.execute(f"CREATE TEMP VIEW {name} AS {DERIVED_VIEWS[name]}")

    def _create_view(self, table: str) -> None:
        store = self.lake.tables_store
        version = self.snapshot.tables[table]
        con = self.connection
        if self.lake.location.is_local and store.can_scan_files(table):
            files = [f.removeprefix("file://") for f in store.files(table, version)]
            if files:
                listing = ", ".join(_quote(f) for f in files)
                con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM read_parquet([{listing}])")
                return
            source: Any = table_schema(table).empty_table()
        else:
            source = store.at_version(table, version).to_pyarrow_dataset()
        self._arrow_sources.append(source)
        con.register(f"__arrow_{table}", source)
        con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM __arrow_{table}")

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

    def sql(self, query: str) -> QueryResult:
        """Run a read-only query and materialise its result."""
        self.check_read_only(query)
        try:
            table = self.connection.sql(query).to_arrow_table()
        except duckdb.Error as e:
            raise TrajlakeError(f"SQL error: {e}") from e
        except AttributeError:  # a statement without result (e.g. EXPLAIN in some versions)
            table = pa.table({})
        return QueryResult(table)

    def relation(self, query: str, *, own_cursor: bool = False) -> duckdb.DuckDBPyRelation:
        """A lazy DuckDB relation, for streaming large results (`to_arrow_reader`).

        With `own_cursor`, it runs on a separate cursor, so other queries can run on the
        session while its result is still being read.
        """
        self.check_read_only(query)
        connection = self.connection.cursor() if own_cursor else self.connection
        return connection.sql(query)

    def close(self) -> None:
        """Close the DuckDB connection."""
        self.connection.close()

    def __enter__(self) -> QuerySession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
