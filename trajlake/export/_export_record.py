"""What every export of the lake does around its rows: the output folder made ready (stale shards
of an earlier, bigger export removed), the snapshot read (the head skips trailing export records,
so exporting twice writes the same files) and the `exports` row that records it.

Shared by the SFT export (`sft.py`) and the RL groups export (`groups.py`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import TYPE_CHECKING, Any

import fsspec

from trajlake.errors import NoSuchSnapshot
from trajlake.export._sft_output import SHARD_GLOB
from trajlake.records import rows_for_table

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, Snapshot, SnapshotRef


def prepare_out(out: str) -> tuple[Any, str]:
    fs, root = fsspec.core.url_to_fs(out)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    # Stale shards of an earlier, bigger export would otherwise sit beside the new ones.
    for split in ("train", "val"):
        for stale in fs.glob(f"{root}/{split}-{SHARD_GLOB}.*"):
            fs.rm(stale)
    return fs, root


def source_snapshot(lake: LakeStore, at: SnapshotRef) -> Snapshot:
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


def record_export(lake: LakeStore, manifest: dict[str, Any], uri: str) -> str:
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
