"""SFT export output: rolling JSONL / Parquet shards, written into a staging folder installed
into the export folder only when the whole export succeeded.

Local paths and object stores alike (fsspec): the staging folder is a hidden sibling of the
export folder (`.<name>.partial-<random>`). Installing a new folder is one rename on local disks
(on object stores: a copy of each file, then the staging prefix is deleted). Into an existing
folder, the previous export's files go first (its `manifest.json` before its shards), then the
new shards, then the new `manifest.json`: a folder with a manifest holds a complete export.
Files of other names in the folder are left alone.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

SHARD_GLOB = "[0-9][0-9][0-9][0-9][0-9]"
"""The number part of a shard name `<split>-NNNNN.<ext>`."""


class Shards:
    """Rolling shard files `<split>-NNNNN.<ext>` of about `limit` bytes each."""

    def __init__(self, fs: Any, root: str, split: str, ext: str, limit: int) -> None:
        self.fs, self.root, self.split, self.ext, self.limit = fs, root, split, ext, limit
        self.files: list[dict[str, Any]] = []
        self._f: Any = None
        self._size = 0
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        if self._f is None:
            name = f"{self.split}-{len(self.files):05d}.{self.ext}"
            self._f = self.fs.open(f"{self.root}/{name}", "wb")
            self.files.append({"path": name})
        self._f.write(data)
        self._hash.update(data)
        self._size += len(data)
        if self._size >= self.limit:
            self.close()

    def close(self) -> None:
        if self._f is None:
            return
        self._f.close()
        self.files[-1].update(bytes=self._size, sha256=self._hash.hexdigest())
        self._f, self._size, self._hash = None, 0, hashlib.sha256()


TOKENIZED_SCHEMA = pa.schema(
    [
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("labels", pa.list_(pa.int32()), nullable=False),
        pa.field("loss_weight", pa.list_(pa.float32()), nullable=False),
        pa.field("attention_mask", pa.list_(pa.int8()), nullable=False),
    ]
)
"""Rows of the tokenized format (Parquet): what trainers read directly."""
_ROWS_PER_GROUP = 512


class ParquetShards:
    """Rolling zstd Parquet shards `<split>-NNNNN.parquet` of about `limit` bytes
    (uncompressed), each file's size and sha256 recorded. A shard rolls only between calls of
    `write_rows`, so rows written together (an RL group) never span two shards."""

    def __init__(
        self, fs: Any, root: str, split: str, limit: int, schema: pa.Schema = TOKENIZED_SCHEMA
    ) -> None:
        self.fs, self.root, self.split, self.limit = fs, root, split, limit
        self.schema = schema
        self.files: list[dict[str, Any]] = []
        self._rows: list[dict[str, Any]] = []
        self._f: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._size = 0

    def write_row(self, row: dict[str, Any]) -> None:
        self.write_rows([{k: row[k] for k in self.schema.names}])

    def write_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Add rows (written in row groups of about 512 rows)."""
        self._rows.extend(rows)
        if len(self._rows) >= _ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        if self._writer is None:
            name = f"{self.split}-{len(self.files):05d}.parquet"
            self._f = self.fs.open(f"{self.root}/{name}", "wb")
            self._writer = pq.ParquetWriter(self._f, self.schema, compression="zstd")
            self.files.append({"path": name})
        table = pa.Table.from_pylist(self._rows, schema=self.schema)
        self._writer.write_table(table)
        self._size += table.nbytes
        self._rows = []
        if self._size >= self.limit:
            self._roll()

    def _roll(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._f.close()
        digest = hashlib.sha256()
        size = 0
        with self.fs.open(f"{self.root}/{self.files[-1]['path']}", "rb") as f:
            while block := f.read(1 << 20):  # a shard is never held in memory whole
                digest.update(block)
                size += len(block)
        self.files[-1].update(bytes=size, sha256=digest.hexdigest())
        self._writer, self._f, self._size = None, None, 0

    def close(self) -> None:
        self._flush()
        self._roll()


class StagedFolder:
    """A staging folder beside `out`: write into `root`, then `install()` or `discard()`."""

    def __init__(self, out: str) -> None:
        self.fs, target = fsspec.core.url_to_fs(out)
        self.target = target.rstrip("/") or "/"
        parent, _, name = self.target.rpartition("/")
        self.root = f"{parent}/.{name}.partial-{uuid.uuid4().hex[:12]}"
        if self.fs.exists(self.target) and not self.fs.isdir(self.target):
            raise ValueError(f"SFT export folder {out!r} is a file, not a folder")
        self.fs.makedirs(self.root, exist_ok=True)

    def install(self) -> None:
        """Make the staged files the export in `out` (see the module docstring)."""
        fs, target = self.fs, self.target
        if not fs.exists(target):
            fs.mv(self.root, target, recursive=True)
            return
        old = [f"{target}/manifest.json"] if fs.exists(f"{target}/manifest.json") else []
        for split in ("train", "val"):
            old += sorted(fs.glob(f"{target}/{split}-{SHARD_GLOB}.*"))
        for path in old:
            fs.rm(path)
        staged = sorted(
            p for p in fs.ls(self.root, detail=False) if not p.endswith("manifest.json")
        )
        for path in [*staged, f"{self.root}/manifest.json"]:
            fs.mv(path, f"{target}/{path.rstrip('/').rpartition('/')[2]}")
        fs.rm(self.root, recursive=True)

    def discard(self) -> None:
        """Remove the staging folder and whatever was written into it."""
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
