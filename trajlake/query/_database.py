"""The per-lake sandboxed DuckDB database that query sessions are cursors of, and its views.

Opening a DuckDB database costs ~15 ms and a snapshot's views cost a file listing, so both are
kept per store and shared by every query on it. They live here rather than on the store because
storage knows nothing of DuckDB: the cache is keyed weakly by the store object (a store that is
dropped takes its database with it), and the store's generic `on_close` hook empties its entry.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from trajlake.query._views import ViewCatalog, sandboxed_database

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

__all__ = ["lake_database", "view_catalog"]


@dataclass(frozen=True)
class _Database:
    connection: duckdb.DuckDBPyConnection
    catalog: ViewCatalog


_DATABASES: weakref.WeakKeyDictionary[LakeStore, _Database] = weakref.WeakKeyDictionary()
# One lock for the whole cache: opening a database is rare (once per store) and quick.
_MUTEX = threading.Lock()


def _database(store: LakeStore) -> _Database:
    with _MUTEX:
        found = _DATABASES.get(store)
        if found is None:
            root = store.location.uri if store.location.is_local else None
            connection = sandboxed_database(root)
            found = _DATABASES[store] = _Database(connection, ViewCatalog(connection))
            # A weak reference: the hook is held by the store, and must not keep it alive.
            store.on_close(_releaser(weakref.ref(store)))
        return found


def _releaser(ref: weakref.ref[LakeStore]) -> Callable[[], None]:
    def release() -> None:
        store = ref()
        if store is None:
            return
        with _MUTEX:
            found = _DATABASES.pop(store, None)
        if found is not None:
            found.connection.close()

    return release


def lake_database(store: LakeStore) -> duckdb.DuckDBPyConnection:
    """The store's sandboxed DuckDB database (opened on first use, closed with the store)."""
    return _database(store).connection


def view_catalog(store: LakeStore) -> ViewCatalog:
    """Per-snapshot view schemas in the store's database (built lazily, kept for reuse)."""
    return _database(store).catalog
