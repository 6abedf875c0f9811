"""SFT export: selected trajectories → train/val shards in a trainer's format, plus a manifest.

Streaming (one chunk of trajectories in memory), deterministic (same arguments on the same
snapshot → byte-identical shards and manifest), self-checked (fails loudly), to any fsspec URL.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

import trajlake
from trajlake._names import refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.errors import NoSuchSnapshot, SftSelfCheckFailed, TrajlakeError, missing_extra
from trajlake.export._sft_formats import FORMATTERS, SFT_FORMATS, encode_row
from trajlake.export._sft_select import (
    SftConversation,
    Split,
    check_mask_rule,
    credit_weights,
    select_conversations,
    split_of,
)
from trajlake.records import rows_for_table

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, Snapshot, SnapshotRef

_CHECK_CHUNK = 500


@dataclass
class SplitCounts:
    """What one split holds."""

    trajectories: int = 0
    samples: int = 0
    turns: int = 0
    trained_turns: int = 0
    trained_tokens: int | None = 0
    """Stored completion tokens of trained turns (tokenized: trained tokens); None if unknown."""
    files: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SftExportReport:
    """What an SFT export wrote."""

    path: str
    format: str
    snapshot_id: int
    manifest: str
    splits: dict[str, SplitCounts]
    seconds: float
    export_id: str | None = None
    """Key of the export's row in the lake's `exports` table."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "format": self.format,
            "snapshot": self.snapshot_id,
            "manifest": self.manifest,
            "splits": {name: asdict(counts) for name, counts in self.splits.items()},
            "seconds": round(self.seconds, 3),
            "export_id": self.export_id,
        }

    def summary(self) -> str:
        """One line for people."""
        parts = [
            f"{name}: {c.samples} samples from {c.trajectories} trajectories, "
            f"{c.trained_turns}/{c.turns} turns trained"
            for name, c in self.splits.items()
        ]
        return f"{self.format} export of snapshot {self.snapshot_id} to {self.path}: " + "; ".join(
            parts or ["nothing selected"]
        )


class _Shards:
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


class _ParquetShards:
    """Rolling zstd Parquet shards `<split>-NNNNN.parquet` of about `limit` bytes (uncompressed)."""

    def __init__(self, fs: Any, root: str, split: str, limit: int) -> None:
        self.fs, self.root, self.split, self.limit = fs, root, split, limit
        self.files: list[dict[str, Any]] = []
        self._rows: list[dict[str, Any]] = []
        self._f: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._size = 0

    def write_row(self, row: dict[str, Any]) -> None:
        self._rows.append({k: row[k] for k in TOKENIZED_SCHEMA.names})
        if len(self._rows) >= _ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        if self._writer is None:
            name = f"{self.split}-{len(self.files):05d}.parquet"
            self._f = self.fs.open(f"{self.root}/{name}", "wb")
            self._writer = pq.ParquetWriter(self._f, TOKENIZED_SCHEMA, compression="zstd")
            self.files.append({"path": name})
        table = pa.Table.from_pylist(self._rows, schema=TOKENIZED_SCHEMA)
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
        path = f"{self.root}/{self.files[-1]['path']}"
        with self.fs.open(path, "rb") as f:
            data = f.read()
        self.files[-1].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        self._writer, self._f, self._size = None, None, 0

    def close(self) -> None:
        self._flush()
        self._roll()


def _check_conversation(conv: SftConversation, allow_untrained: bool) -> None:
    for m, w in zip(conv.messages, conv.weights, strict=True):
        # By construction only assistant turns carry a weight, so no all-ones mask can occur.
        assert w is None or m["role"] == "assistant", conv.trajectory_id
    if conv.trained_messages == 0 and not allow_untrained:
        raise SftSelfCheckFailed(
            f"trajectory {conv.trajectory_id!r} has no trained turn (every weight is 0); "
            "narrow --where, lower --min-weight, or pass allow_untrained / --allow-untrained"
        )


def _check_weights(
    lake: LakeStore, credit: str, min_weight: float, snapshot: int, batch: list[SftConversation]
) -> None:
    """Re-read the run's rows and compare every assistant weight with weight×mask."""
    stored = credit_weights(lake, credit, [c.trajectory_id for c in batch], at=snapshot)
    for conv in batch:
        for m, w, turn in zip(conv.messages, conv.weights, conv.turns, strict=True):
            if w is None:
                continue
            expected = stored.get(conv.trajectory_id, {}).get(turn) if turn is not None else None
            if expected is None or (expected if expected >= min_weight else 0.0) != w:
                raise SftSelfCheckFailed(
                    f"weight {w} of turn {turn} of {conv.trajectory_id!r} does not match credit "
                    f"run {credit!r} ({expected}); the export is inconsistent with the run"
                )
            assert m["role"] == "assistant"


def _load_tokenizer(tokenizer: Any) -> tuple[Any, str, str | None]:
    """(tokenizer object, its name, sha256 of its chat template)."""
    if isinstance(tokenizer, str):
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise missing_extra("transformers", "hf") from e
        name = tokenizer
        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    else:
        name = str(getattr(tokenizer, "name_or_path", type(tokenizer).__name__))
    template = getattr(tokenizer, "chat_template", None)
    digest = hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) else None
    return tokenizer, name, digest


def _tokenized_rows(
    tokenizer: Any,
    convs: Iterator[tuple[Split, SftConversation]],
    max_tokens: int | None,
    stats: Any,
) -> Iterator[tuple[Split, dict[str, Any]]]:
    """Tokenized rows with their split, each verified by decoding against its conversation."""
    try:
        from trajlake.export.tokenize import tokenize_conversations, verify_sample
    except ImportError as e:
        raise TrajlakeError(
            "the tokenized SFT format needs trajlake.export.tokenize, not in this installation"
        ) from e
    pending: collections.OrderedDict[str, tuple[Split, SftConversation]] = collections.OrderedDict()

    def feed() -> Iterator[SftConversation]:
        for split, conv in convs:
            pending[conv.trajectory_id] = (split, conv)
            yield conv

    rows = tokenize_conversations(tokenizer, feed(), max_tokens=max_tokens, stats=stats)
    for row in rows:
        tid = row["trajectory_id"]
        while pending and next(iter(pending)) != tid:
            pending.popitem(last=False)
        split, conv = pending[tid]
        # The self-check of every export: weighted tokens decode to the trained turns.
        verify_sample(tokenizer, row, conv)
        yield split, row


def _new_token_stats() -> Any:
    from trajlake.export.tokenize import TokenizedStats

    return TokenizedStats()


def _check_tokenized(row: dict[str, Any], allow_untrained: bool) -> int:
    weights = row["loss_weight"]
    trained = sum(1 for w in weights if w > 0)
    where = f"sample {row.get('sample_index')} of {row['trajectory_id']!r}"
    if trained == 0 and not allow_untrained:
        raise SftSelfCheckFailed(f"{where} has no trained token; see --allow-untrained")
    attended = sum(1 for a in row.get("attention_mask") or weights if a)
    if trained >= attended and trained > 0:
        raise SftSelfCheckFailed(f"{where} trains on every token (all-ones mask)")
    return trained


def _add(total: int | None, more: int | None) -> int | None:
    return None if total is None or more is None else total + more


def _prepare_out(out: str) -> tuple[Any, str]:
    fs, root = fsspec.core.url_to_fs(out)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    # Stale shards of an earlier, bigger export would otherwise sit beside the new ones.
    for split in ("train", "val"):
        for stale in fs.glob(f"{root}/{split}-[0-9][0-9][0-9][0-9][0-9].*"):
            fs.rm(stale)
    return fs, root


def _source_snapshot(lake: LakeStore, at: SnapshotRef) -> Snapshot:
    """The snapshot read: `at`; at the head, the one before trailing export records, which
    change no table an export reads (so exporting twice at the head writes the same files)."""
    snap = lake.snapshot(at)
    while at in (None, "latest") and snap.operation == "export" and snap.parent_id is not None:
        try:
            parent = lake.snapshot(snap.parent_id)
        except NoSuchSnapshot:
            break
        if {**parent.tables, "exports": 0} != {**snap.tables, "exports": 0}:
            break
        snap = parent
    return snap


def _record_export(lake: LakeStore, manifest: dict[str, Any], uri: str) -> str:
    """Commit the export's `exports` row (a no-op when the same export is already recorded)."""
    identity = json.dumps({"manifest": manifest, "uri": uri}, sort_keys=True, ensure_ascii=False)
    export_id = hashlib.sha256(identity.encode()).hexdigest()[:16]
    splits = manifest["splits"].items()
    row = {
        "export_id": export_id,
        "format": manifest["format"],
        "source_snapshot": manifest["snapshot"]["id"],
        "source_tags": manifest["snapshot"]["tags"],
        "credit_run": manifest["credit_run"],
        "mask": manifest["mask_rule"],
        "selection_sql": manifest["where"],
        "uri": uri,
        "manifest": manifest,
        "counts": {s: {k: v for k, v in c.items() if k != "files"} for s, c in splits},
        "created_at": dt.datetime.now(dt.UTC),
    }
    summary = {"export_id": export_id, "format": manifest["format"]}
    lake.commit({"exports": rows_for_table("exports", [row])}, operation="export", summary=summary)
    return export_id


def export_sft(
    lake: LakeStore,
    out: str,
    *,
    format: str,
    at: SnapshotRef = None,
    where: str | None = None,
    credit: str | None = None,
    mask: str | None = None,
    min_weight: float = 0.0,
    tokenizer: Any = None,
    max_tokens: int | None = None,
    val_frac: float = 0.0,
    seed: int = 0,
    shard_mb: float = 100.0,
    allow_untrained: bool = False,
    progress: Progress | None = None,
) -> SftExportReport:
    """Write an SFT dataset of the selected trajectories to the folder `out` (path or URL).

    Args:
        lake: The lake, read at snapshot `at` (pinned once).
        out: Folder for `train-NNNNN.jsonl`, `val-NNNNN.jsonl` (`.parquet` for the tokenized
            format) and `manifest.json`.
        format: openai | trl | sharegpt | axolotl | tokenized (see `_sft_formats`).
        at, where: Snapshot and SQL condition on `trajectories`.
        credit: Credit run weighting assistant turns by weight×mask (default: all turns 1.0).
        mask: Mask rule the run must have been computed with (checked, not recomputed).
        min_weight: Turns weighted below this are not trained.
        tokenizer: Hugging Face tokenizer (name, path or object) for `tokenized`.
        max_tokens: Longest tokenized sample (`tokenized` only).
        val_frac, seed: Share of tasks in `val`, by a seeded hash of the task id.
        shard_mb: Roll to a new shard after about this many MB.
        allow_untrained: Keep samples without any trained turn instead of failing.
        progress: Receives one unit per trajectory.

    Raises:
        OutputInsideLake: `out` lies inside the lake (checked before anything is written).
        SftSelfCheckFailed: A sample has no trained turn (unless `allow_untrained`), trains on
            every token, or its weights differ from the credit run.
    """
    if format not in SFT_FORMATS:
        raise ValueError(f"unknown SFT format {format!r}; known: {', '.join(SFT_FORMATS)}")
    if (format == "tokenized") != (tokenizer is not None):
        raise ValueError("--tokenizer is required by, and only used by, --format tokenized")
    if max_tokens is not None and format != "tokenized":
        raise ValueError("--max-tokens applies to --format tokenized only")
    if shard_mb <= 0:
        raise ValueError(f"shard_mb must be positive, got {shard_mb}")
    split_of("", seed, val_frac)  # validates val_frac
    refuse_inside_lake(out, lake.location.uri, what="SFT export folder")
    progress = progress or NullProgress()
    start = time.perf_counter()
    snapshot = _source_snapshot(lake, at)
    snap = snapshot.snapshot_id
    mask_rule = check_mask_rule(lake, credit, mask, at=snap)
    tok_name = template_hash = None
    if tokenizer is not None:
        tokenizer, tok_name, template_hash = _load_tokenizer(tokenizer)
    fs, root = _prepare_out(out)
    limit = int(shard_mb * 1024 * 1024)
    shards = {s: _Shards(fs, root, s, "jsonl", limit) for s in ("train", "val")}
    parquet = {s: _ParquetShards(fs, root, s, limit) for s in ("train", "val")}
    counts: dict[str, SplitCounts] = {"train": SplitCounts(), "val": SplitCounts()}
    batch: list[SftConversation] = []

    def checked() -> Iterator[tuple[Split, SftConversation]]:
        for conv in select_conversations(
            lake, at=snap, where=where, credit=credit, min_weight=min_weight
        ):
            _check_conversation(conv, allow_untrained or format == "tokenized")
            if credit is not None:
                batch.append(conv)
                if len(batch) >= _CHECK_CHUNK:
                    _check_weights(lake, credit, min_weight, snap, batch)
                    batch.clear()
            split = split_of(conv.task_id or conv.trajectory_id, seed, val_frac)
            c = counts[split]
            c.trajectories += 1
            c.turns += sum(1 for m in conv.messages if m["role"] == "assistant")
            c.trained_turns += conv.trained_messages
            if format != "tokenized":
                c.samples += 1
                c.trained_tokens = _add(c.trained_tokens, conv.trained_tokens)
            progress.advance(1)
            yield split, conv

    progress.start("export sft", None)
    token_stats = _new_token_stats() if format == "tokenized" else None
    if format == "tokenized":
        for split, row in _tokenized_rows(tokenizer, checked(), max_tokens, token_stats):
            trained = _check_tokenized(row, allow_untrained)
            counts[split].samples += 1
            counts[split].trained_tokens = (counts[split].trained_tokens or 0) + trained
            parquet[split].write_row(row)
    else:
        to_row = FORMATTERS[format]
        for split, conv in checked():
            shards[split].write((encode_row(to_row(conv)) + "\n").encode())
    if batch and credit is not None:
        _check_weights(lake, credit, min_weight, snap, batch)
    for name, shard in shards.items():
        shard.close()
        parquet[name].close()
        counts[name].files = parquet[name].files if format == "tokenized" else shard.files
    progress.finish()
    splits = {s: c for s, c in counts.items() if c.trajectories or s == "train"}
    manifest = {
        "format": format,
        "lake": lake.uri,
        "snapshot": {
            "id": snap,
            "timestamp": snapshot.timestamp,
            "tags": sorted(t.name for t in lake.tags() if t.snapshot_id == snap),
        },
        "where": where,
        "credit_run": credit,
        "mask_rule": mask_rule,
        "min_weight": min_weight,
        "dedupe": "content_hash",
        "tokenizer": tok_name,
        "chat_template_sha256": template_hash,
        "tokenization": asdict(token_stats) if token_stats is not None else None,
        "max_tokens": max_tokens,
        "val_frac": val_frac,
        "seed": seed,
        "shard_mb": shard_mb,
        "splits": {s: asdict(c) for s, c in splits.items()},
        "trajlake_version": trajlake.__version__,
    }
    with fs.open(f"{root}/manifest.json", "wb") as f:
        f.write(
            (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
        )
    export_id = _record_export(lake, manifest, out if "://" in out else root)
    seconds = time.perf_counter() - start
    return SftExportReport(out, format, snap, f"{root}/manifest.json", splits, seconds, export_id)
