"""Lake tables at a pinned snapshot → zstd Parquet shards a Hugging Face dataset loads.

Each table is read through the query layer (DuckDB at one snapshot), filtered by the `--where`
contract (`trajectories`, and every table joined to it by `trajectory_id`), ordered by its
primary key so the same snapshot and selection always write the same bytes, and streamed into
shards of about `shard_bytes` each. Columns keep the lake's Arrow schema, except map columns
(`rewards`): `datasets` has no map feature, so they become lists of `{key, value}` structs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from trajlake._progress import NullProgress, Progress
from trajlake.query import selected_ids_sql, where_ids
from trajlake.schema import PRIMARY_KEYS, TABLES, table_schema

if TYPE_CHECKING:
    from trajlake.query import QuerySession

__all__ = [
    "DEFAULT_TABLES",
    "TRAJECTORY_TABLES",
    "ShardFile",
    "TableFiles",
    "check_tables",
    "hub_schema",
    "row_condition",
    "selection_sql",
    "write_table",
]

TRAJECTORY_TABLES = ("trajectories", "messages", "calls", "labels", "credits", "scores")
"""Tables whose rows belong to trajectories: `--where` filters them all consistently."""
DEFAULT_TABLES = TRAJECTORY_TABLES
"""Published unless `tables` says otherwise (those of them holding rows). `models` and
`exports` hold paths of the publisher's machine, `quarantine` raw bad records: only on request."""
_BATCH_ROWS = 1024
_ROW_GROUP_BYTES = 32 * 1024 * 1024
"""Uncompressed bytes per row group: by bytes, not rows, as message cells can be large."""
_HASH_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class ShardFile:
    """One Parquet shard: its path relative to the dataset folder, rows, bytes, sha256."""

    path: str
    rows: int
    bytes: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's entry)."""
        return {"path": self.path, "rows": self.rows, "bytes": self.bytes, "sha256": self.sha256}


@dataclass
class TableFiles:
    """What one table was written as."""

    table: str
    rows: int = 0
    files: list[ShardFile] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"rows": self.rows, "files": [f.to_dict() for f in self.files]}


def check_tables(tables: list[str] | tuple[str, ...], where: str | None) -> list[str]:
    """`tables` deduplicated in order, or ValueError naming an unknown table or one that
    `where` cannot filter (it has no `trajectory_id`)."""
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    unfilterable = [t for t in tables if t not in TRAJECTORY_TABLES]
    if where and where.strip() and unfilterable:
        raise ValueError(
            f"--where selects trajectories, and {', '.join(unfilterable)} has no trajectory_id "
            "to follow it: publish it without --where, or leave it out of --tables"
        )
    if not tables:
        raise ValueError("no table to publish: name at least one with --tables")
    return list(dict.fromkeys(tables))


def row_condition(table: str, where: str | None) -> str:
    """The predicate keeping `table`'s rows that belong to the trajectories `where` selects.

    Labels attached by task + run id (no `trajectory_id`) follow the trajectories they match,
    as in the `outcomes` view; calls without a trajectory id are kept only without `where`.
    """
    condition = where_ids(where)
    if table == "labels" and condition != "TRUE":
        selected = selected_ids_sql(where).replace(
            "SELECT t.trajectory_id", "SELECT t.task_id, t.run_id", 1
        )
        condition = (
            f"({condition} OR (trajectory_id IS NULL AND (task_id, run_id) IN ({selected})))"
        )
    return condition


def selection_sql(table: str, where: str | None) -> str:
    """The query reading `table`'s published rows in primary-key order (deterministic bytes)."""
    order = ", ".join(PRIMARY_KEYS[table])
    return f"SELECT * FROM {table} WHERE {row_condition(table, where)} ORDER BY {order}"


def hub_schema(table: str) -> pa.Schema:
    """The published schema of `table`: the lake's, with map columns as lists of structs."""
    fields = []
    for f in table_schema(table):
        if pa.types.is_map(f.type):
            entry = pa.struct(
                [pa.field("key", f.type.key_type), pa.field("value", f.type.item_type)]
            )
            f = pa.field(f.name, pa.list_(entry), nullable=f.nullable)
        fields.append(f)
    return pa.schema(fields, metadata=table_schema(table).metadata)


def _maps_as_lists(column: pa.Array, target: pa.DataType) -> pa.Array:
    """A map array as the list<struct<key, value>> it is stored as (same offsets, same nulls)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    assert isinstance(column, pa.MapArray)
    entries = pa.StructArray.from_arrays(
        [column.keys, column.items], fields=list(target.value_type)
    )
    return pa.ListArray.from_arrays(column.offsets, entries, type=target, mask=column.is_null())


def _to_hub(batch: pa.RecordBatch, table: str) -> pa.Table:
    """A query batch in the published schema (DuckDB spells time zones and list items its
    own way)."""
    lake = table_schema(table)
    data = pa.Table.from_batches([batch]).select(lake.names).cast(lake)
    target = hub_schema(table)
    for i, f in enumerate(target):
        if pa.types.is_map(lake.field(f.name).type):
            data = data.set_column(i, f, _maps_as_lists(data.column(i), f.type))
    return data.replace_schema_metadata(target.metadata)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _ShardWriter:
    """Rolling shards `data/<table>/train-NNNNN.parquet` of about `limit` bytes on disk."""

    def __init__(self, root: str, table: str, limit: int) -> None:
        self.root, self.table, self.limit = root, table, limit
        self.schema = hub_schema(table)
        self.done = TableFiles(table)
        self._writer: pq.ParquetWriter | None = None
        self._sink: Any = None
        self._rows = 0
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        # Row groups by bytes, and never larger than a shard, so small shards still roll.
        self._group_bytes = max(1, min(_ROW_GROUP_BYTES, limit))

    def _relative(self) -> str:
        return f"data/{self.table}/train-{len(self.done.files):05d}.parquet"

    def write(self, data: pa.Table) -> None:
        if data.num_rows == 0:
            return
        # A batch of big cells is cut into row-group-sized slices (by its mean row size).
        step = max(1, int(self._group_bytes * data.num_rows / max(data.nbytes, 1)))
        for start in range(0, data.num_rows, step):
            piece = data.slice(start, step)
            self._pending.append(piece)
            self._pending_bytes += piece.nbytes
            if self._pending_bytes >= self._group_bytes:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            path = os.path.join(self.root, *self._relative().split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._sink = open(path, "wb")  # noqa: SIM115 - closed in _roll
            self._writer = pq.ParquetWriter(self._sink, self.schema, compression="zstd")
        group = pa.concat_tables(self._pending)
        self._writer.write_table(group, row_group_size=group.num_rows)
        self._rows += group.num_rows
        self._pending, self._pending_bytes = [], 0
        if self._sink.tell() >= self.limit:
            self._roll()

    def _roll(self) -> None:
        if self._writer is None:
            return
        relative = self._relative()
        self._writer.close()
        self._sink.close()
        path = os.path.join(self.root, *relative.split("/"))
        self.done.files.append(
            ShardFile(relative, self._rows, os.path.getsize(path), _sha256(path))
        )
        self.done.rows += self._rows
        self._writer, self._sink, self._rows = None, None, 0

    def close(self) -> TableFiles:
        """Finish the last shard; a table without rows gets none (`datasets` cannot load a
        config with no rows, so the caller reports it instead)."""
        self._flush()
        self._roll()
        return self.done


def _batches(session: QuerySession, table: str, where: str | None) -> Iterator[pa.RecordBatch]:
    relation = session.relation(selection_sql(table, where), own_cursor=True)
    reader = relation.to_arrow_reader(_BATCH_ROWS)
    yield from reader


def write_table(
    session: QuerySession,
    table: str,
    root: str,
    *,
    where: str | None,
    shard_bytes: int,
    progress: Progress | None = None,
) -> TableFiles:
    """Write `table` as it is in the session's snapshot (filtered by `where`) under `root`."""
    progress = progress or NullProgress()
    writer = _ShardWriter(root, table, shard_bytes)
    for batch in _batches(session, table, where):
        writer.write(_to_hub(batch, table))
        progress.advance(batch.num_rows)
    return writer.close()
