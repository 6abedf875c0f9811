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

from trajlake._query_views import DERIVED_VIEWS, register_arrow_views
from trajlake.errors import ReadOnlyQuery, TrajlakeError
from trajlake.schema import TABLES

if TYPE_CHECKING:
    import polars as pl

    from trajlake.lake._lake import Lake
    from trajlake.lake._log import Snapshot

log = logging.getLogger(__name__)

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
        self, lake: Lake, snapshot: Snapshot, *, views: Collection[str] | None = None
    ) -> None:
        """Open a session; `views` limits it to some views (each costs a file listing once)."""
        self.lake = lake
        self.snapshot = snapshot
        wanted = set(TABLES) | set(DERIVED_VIEWS) if views is None else set(views)
        # A cursor of the lake's sandboxed database: opening one costs microseconds where a
        # new DuckDB database costs ~15 ms.
        self.connection = lake.duckdb().cursor()
        self._arrow_sources: list[Any] = []
        if lake.location.is_local and all(lake.tables_store.can_scan_files(t) for t in TABLES):
            schema = lake.view_catalog().schema_for(snapshot, wanted)
            self.connection.execute(f"USE {schema}")
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
