"""Parquet files and Delta commits written directly, for the two hot paths: appends and compaction.

delta-rs's writer costs ~15 ms of planning per call whatever the size, and sizes row groups by
rows; a small commit must take a few ms. Under the lake's commit lock the next version of a
table is known, so trajlake writes the Parquet files with pyarrow (zstd, row groups sized by
bytes) and the commit file itself: a plain protocol-(1, 2) Delta commit of `add`/`remove`
actions, created atomically so an existing version is never overwritten. Table creation,
checkpoints, restore and vacuum stay with delta-rs.

Writing the log by hand is only correct for tables whose protocol asks no more than that, so
every commit first checks the table's protocol (`_delta_protocol.check_protocol`), and checks it
again against any commit another writer slipped in first. The format details it relies on
(the commit JSON, delta-rs's handles, pyarrow's Parquet) are why the majors of deltalake,
pyarrow and duckdb are bounded in pyproject.toml.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajlake.lake._delta_protocol import TableProtocol, check_protocol
from trajlake.lake._storage import LakeLocation

ROW_GROUP_BYTES = 64 * 1024 * 1024
"""Target uncompressed bytes per row group: message rows can carry megabytes of text."""
_STAT_STRINGS = frozenset(
    {"trajectory_id", "task_id", "run_id", "thread", "role", "run_name", "model_id", "call_id"}
)
_MAX_STAT_CHARS = 64
_MAX_VERSION_SKIPS = 1000


@functools.cache
def _engine() -> str:
    try:
        return f"trajlake/{version('trajlake')}"
    except PackageNotFoundError:
        return "trajlake"


@dataclass(frozen=True)
class DataFile:
    """A Parquet file written into a table folder, not yet committed."""

    path: str
    """Path relative to the table root (what the Delta log records)."""
    size: int
    rows: int
    stats: str

    def add_action(self, data_change: bool = True) -> dict[str, Any]:
        """The Delta `add` action for this file."""
        return {
            "add": {
                "path": self.path,
                "partitionValues": {},
                "size": self.size,
                "modificationTime": int(time.time() * 1000),
                "dataChange": data_change,
                "stats": self.stats,
            }
        }


def remove_action(path: str, size: int | None, *, data_change: bool = False) -> dict[str, Any]:
    """A Delta `remove` action: compaction keeps the rows (`dataChange` false), the rewrite
    of an update takes some out (true). The file itself stays for older versions."""
    action: dict[str, Any] = {
        "path": path,
        "deletionTimestamp": int(time.time() * 1000),
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": {},
    }
    if size is not None:
        action["size"] = size
    return {"remove": action}


def file_stats(data: pa.Table) -> str:
    """Delta per-file statistics: row count, null counts and min/max of id-like columns.

    Only columns whose min/max are exact are included (integers, short strings), so a reader
    that skips files by these statistics can never skip a matching row.
    """
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in data.schema:
        column = data.column(field.name)
        is_int = pa.types.is_integer(field.type)
        is_key = pa.types.is_string(field.type) and field.name in _STAT_STRINGS
        if not (is_int or is_key):
            continue
        nulls[field.name] = column.null_count
        if column.null_count == len(column) or len(column) == 0:
            continue
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if is_key and max(len(low), len(high)) > _MAX_STAT_CHARS:
            continue
        minimum[field.name], maximum[field.name] = low, high
    stats = {"numRecords": data.num_rows, "minValues": minimum, "maxValues": maximum}
    stats["nullCount"] = nulls
    return json.dumps(stats, separators=(",", ":"))


def _rows_per(data: pa.Table, target_bytes: int) -> int:
    row_bytes = max(1, data.nbytes // max(1, data.num_rows))
    return int(max(1, target_bytes // row_bytes))


def write_data_files(
    location: LakeLocation, table: str, data: pa.Table, *, target_file_bytes: int
) -> list[DataFile]:
    """Write `data` as zstd Parquet files of about `target_file_bytes` (uncompressed) each."""
    files = []
    per_file = _rows_per(data, target_file_bytes)
    row_group = min(per_file, _rows_per(data, ROW_GROUP_BYTES))
    fs = None if location.is_local else location.filesystem()
    for start in range(0, max(1, data.num_rows), per_file):
        part = data.slice(start, per_file)
        name = f"part-{uuid.uuid4().hex}-c000.zstd.parquet"
        target = location.join("tables", table, name)
        if fs is None:
            pq.write_table(part, target, compression="zstd", row_group_size=row_group)
            size = os.path.getsize(target)
        else:
            with fs.open(target, "wb") as f:
                pq.write_table(part, f, compression="zstd", row_group_size=row_group)
            size = int(fs.size(target))
        files.append(DataFile(name, size, part.num_rows, file_stats(part)))
    return files


def _log_path(location: LakeLocation, table: str, log_version: int) -> str:
    return location.join("tables", table, "_delta_log", f"{log_version:020d}.json")


def _create_exclusive(location: LakeLocation, path: str, payload: bytes) -> bool:
    """Create `path` with `payload` unless it exists; True if created."""
    if location.is_local:
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(payload)
        try:
            os.link(tmp, path)  # atomic, and fails if a commit of that version exists
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
    try:
        location.filesystem().pipe_file(path, payload, mode="create")  # a conditional put
    except FileExistsError:
        return False
    return True


def commit_actions(
    location: LakeLocation,
    table: str,
    next_version: int,
    actions: Sequence[dict[str, Any]],
    *,
    operation: str,
    commit_id: str,
    blind_append: bool,
    protocol: TableProtocol,
) -> int:
    """Write a Delta commit at `next_version` (or the first free one after); return its version.

    `protocol` is the table's, read from its freshly updated handle (`TableProtocol.of`); a table
    whose protocol this writer does not implement is refused with `UnsupportedTableFeature`
    before anything is committed (data files already written stay unreferenced, for vacuum).
    A taken version means another writer committed first (a delta-rs compaction of a crashed
    maintenance run, or a foreign writer): appends commute, so the next version is used, once
    that commit's protocol and metadata changes, if any, pass the same check.
    """
    removes_data = any(
        a.get("remove", {}).get("dataChange", True) for a in actions if "remove" in a
    )
    check_protocol(table, protocol, removes_data=removes_data)
    info = {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": {"mode": "Append"} if blind_append else {},
            "isBlindAppend": blind_append,
            "engineInfo": _engine(),
            "trajlake.commit": commit_id,
        }
    }
    lines = [json.dumps(info, separators=(",", ":"))]
    lines += [json.dumps(a, separators=(",", ":")) for a in actions]
    payload = ("\n".join(lines) + "\n").encode()
    for log_version in range(next_version, next_version + _MAX_VERSION_SKIPS):
        path = _log_path(location, table, log_version)
        if _create_exclusive(location, path, payload):
            return log_version
        taken = _read_actions(location, path)
        if any("protocol" in a or "metaData" in a for a in taken):
            protocol = protocol.after(taken)
            check_protocol(table, protocol, removes_data=removes_data)
    raise RuntimeError(f"no free Delta version for {table} after {next_version}")


def _read_actions(location: LakeLocation, path: str) -> list[dict[str, Any]]:
    """The actions of a committed log entry (one JSON object per line)."""
    if location.is_local:
        with open(path, "rb") as f:
            text = f.read()
    else:
        text = bytes(location.filesystem().cat_file(path))
    return [json.loads(line) for line in text.splitlines() if line.strip()]
