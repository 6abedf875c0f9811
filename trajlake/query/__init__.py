"""Querying a lake: read-only DuckDB SQL at a pinned snapshot, over a view per table.

The layer between storage and everything that reads it. `sql(store, query, params, at=...)`
and `open_session(store, at)` take a `trajlake.lake.LakeStore` (storage knows nothing of
DuckDB); the per-store sandboxed database and its view catalog are kept here (`_database`).
`where_ids` is the one `--where` contract; `parse_size` and `QueryLimits` the resource limits.
"""

from trajlake.query._database import lake_database, view_catalog
from trajlake.query._limits import QueryLimits, parse_size
from trajlake.query._session import QueryResult, QuerySession, SqlParams, open_session, sql
from trajlake.query._views import (
    DERIVED_VIEWS,
    SHELL_TOOLS,
    VIEW_TABLES,
    ViewCatalog,
    outcomes_sql,
    views_named_in,
)
from trajlake.query._where import selected_ids_sql, where_ids

__all__ = [
    "DERIVED_VIEWS",
    "SHELL_TOOLS",
    "VIEW_TABLES",
    "QueryLimits",
    "QueryResult",
    "QuerySession",
    "SqlParams",
    "ViewCatalog",
    "lake_database",
    "open_session",
    "outcomes_sql",
    "parse_size",
    "selected_ids_sql",
    "sql",
    "view_catalog",
    "views_named_in",
    "where_ids",
]
