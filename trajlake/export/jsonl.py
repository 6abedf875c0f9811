"""Canonical JSONL export: one trajectory with its messages per line, lossless for round trips.

Trajectories are read in id order, a chunk at a time, so memory is bounded by the chunk, not
by the export. Output goes to any fsspec URL; `.gz`/`.zst` suffixes compress.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import fsspec
from fsspec.utils import infer_compression

from trajlake._names import refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.query import QuerySession, open_session, where_ids
from trajlake.records import assemble_canonical, table_to_rows

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

_CHUNK = 500


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote."""

    path: str
    snapshot_id: int
    trajectories: int
    messages: int
    bytes_written: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "snapshot": self.snapshot_id,
            "trajectories": self.trajectories,
            "messages": self.messages,
            "bytes": self.bytes_written,
            "seconds": round(self.seconds, 3),
        }


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _drop_nulls(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None}


def encode_line(obj: dict[str, Any]) -> str:
    """One canonical JSONL line (nulls omitted: absent means unknown)."""
    out = _drop_nulls(obj)
    out["messages"] = [_drop_nulls(m) for m in obj.get("messages", [])]
    return json.dumps(out, ensure_ascii=False, default=_json_default)


def _id_chunks(
    session: QuerySession, where: str | None, ids: Sequence[str] | None
) -> Iterator[list[str]]:
    if ids is not None:
        for i in range(0, len(ids), _CHUNK):
            yield list(ids[i : i + _CHUNK])
        return
    condition = where_ids(where)
    session.check_read_only(f"SELECT 1 FROM trajectories WHERE {condition}")
    # Keyset pagination: each page is a fresh query, so the chunk queries in between run on
    # the same session, and memory holds one page of ids.
    last: str | None = None
    while True:
        after = "" if last is None else "AND trajectory_id > $last"
        page = session.connection.execute(
            f"SELECT trajectory_id FROM trajectories WHERE {condition} {after} "
            f"ORDER BY trajectory_id LIMIT {_CHUNK}",
            {} if last is None else {"last": last},
        ).fetchall()
        if not page:
            return
        chunk = [row[0] for row in page]
        yield chunk
        last = chunk[-1]


def iter_canonical(
    lake: LakeStore,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    ids: Sequence[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Canonical trajectory objects at a snapshot, optionally filtered by a SQL WHERE clause."""
    with open_session(lake, at) as session:
        for chunk in _id_chunks(session, where, ids):
            session.connection.execute(
                "CREATE OR REPLACE TEMP TABLE __ids AS SELECT unnest(?) AS id", [chunk]
            )
            trajectories = session.connection.sql(
                "SELECT t.* FROM trajectories t JOIN __ids ON t.trajectory_id = __ids.id "
                "ORDER BY t.trajectory_id"
            ).to_arrow_table()
            messages = session.connection.sql(
                "SELECT m.* FROM messages m JOIN __ids ON m.trajectory_id = __ids.id "
                "ORDER BY m.trajectory_id, m.thread = 'main' DESC, m.thread, m.idx"
            ).to_arrow_table()
            yield from assemble_canonical(
                table_to_rows("trajectories", trajectories), table_to_rows("messages", messages)
            )


def read_canonical(
    lake: LakeStore,
    *,
    at: SnapshotRef = None,
    ids: Sequence[str] | None = None,
    where: str | None = None,
) -> list[dict[str, Any]]:
    """Canonical trajectory objects, materialised (for small selections)."""
    return list(iter_canonical(lake, at=at, where=where, ids=ids))


def _open_output(path: str) -> Any:
    return fsspec.open(path, "wt", encoding="utf-8", compression=infer_compression(path))


def export_jsonl(
    lake: LakeStore,
    out: str,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    progress: Progress | None = None,
) -> ExportReport:
    """Write the trajectories selected by `where` at snapshot `at` as canonical JSONL to `out`.

    Raises:
        OutputInsideLake: `out` lies inside the lake (checked before anything is written).
    """
    refuse_inside_lake(out, lake.location.uri, what="export")
    progress = progress or NullProgress()
    start = time.perf_counter()
    snapshot = lake.snapshot(at)
    count = messages = written = 0
    progress.start("export", None)
    with _open_output(out) as f:
        stream: IO[str] = f
        for obj in iter_canonical(lake, at=snapshot.snapshot_id, where=where):
            line = encode_line(obj) + "\n"
            stream.write(line)
            written += len(line.encode("utf-8"))
            count += 1
            messages += len(obj["messages"])
            progress.advance(1)
    progress.finish()
    return ExportReport(
        out, snapshot.snapshot_id, count, messages, written, time.perf_counter() - start
    )
