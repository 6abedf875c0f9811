"""A lake snapshot as a dataset folder: Parquet shards per table, `manifest.json`, `README.md`.

The snapshot is pinned once; every table, the provenance and the card are read from it, so
the folder is one consistent view even while others write to the lake. The same snapshot,
selection and options write byte-identical files (rows in key order, no timestamps of the
publish itself).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trajlake
from trajlake._names import refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.publish._card import snapshot_card
from trajlake.publish._folder import (
    CARD,
    MANIFEST,
    PublishError,
    PublishFolder,
    check_repo_id,
    prepare_folder,
    write_json,
    write_text,
)
from trajlake.publish._provenance import snapshot_info, trajectory_provenance
from trajlake.publish._tables import (
    DEFAULT_TABLES,
    TableFiles,
    check_tables,
    row_condition,
    write_table,
)
from trajlake.query import open_session

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef
    from trajlake.query import QuerySession

__all__ = ["default_license", "write_snapshot_folder"]

DEFAULT_SHARD_MB = 100.0


def default_license(license: str | None) -> str:
    """The card's `license:`: the given id in the Hub's lower-case spelling, else `unknown`."""
    if license is None:
        return "unknown"
    value = license.strip().lower()
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"invalid licence id {license!r}: use an id such as apache-2.0 or mit")
    return value


def _row_counts(session: QuerySession, tables: list[str], where: str | None) -> dict[str, int]:
    """Rows each table would publish (a bad `where` fails here, before anything is written)."""
    query = " UNION ALL ".join(
        f"SELECT {i} AS i, count(*) AS n FROM {t} WHERE {row_condition(t, where)}"
        for i, t in enumerate(tables)
    )
    counts = {row["i"]: int(row["n"]) for row in session.sql(query).to_dicts()}
    return {t: counts[i] for i, t in enumerate(tables)}


def write_snapshot_folder(
    lake: LakeStore,
    out: str | os.PathLike[str],
    *,
    repo_id: str | None = None,
    at: SnapshotRef = None,
    where: str | None = None,
    tables: Sequence[str] | None = None,
    license: str | None = None,
    pretty_name: str | None = None,
    shard_mb: float = DEFAULT_SHARD_MB,
    progress: Progress | None = None,
) -> PublishFolder:
    """Write the tables of snapshot `at` as a Hugging Face dataset folder at `out`.

    Args:
        lake: The lake, read at one pinned snapshot.
        out: A local folder, new, empty or written by an earlier publish.
        repo_id: The repo the card's loading examples name (None: a placeholder).
        at, where: Snapshot, and SQL condition on `trajectories` that every table follows.
        tables: Tables to publish (default: `DEFAULT_TABLES`). Tables without rows in the
            selection are not written (`datasets` cannot load an empty config); the manifest
            and the card list them.
        license: Licence id for the card (default `unknown`).
        pretty_name: Title of the card (default names the snapshot).
        shard_mb: Start a new Parquet shard after about this many MB (compressed).
        progress: Receives one unit per row written.

    Raises:
        ValueError: An unknown table, one `where` cannot filter, or a bad option.
        OutputInsideLake: `out` lies inside the lake.
        PublishError: `out` holds other files than an earlier publish, or no table has rows.
    """
    if shard_mb <= 0:
        raise ValueError(f"shard_mb must be positive, got {shard_mb}")
    if repo_id is not None:
        check_repo_id(repo_id)
    licence = default_license(license)
    refuse_inside_lake(os.fspath(out), lake.location.uri, what="publish folder")
    progress = progress or NullProgress()
    snapshot = lake.snapshot(at)
    with open_session(lake, snapshot.snapshot_id) as session:
        chosen = check_tables(list(tables) if tables is not None else DEFAULT_TABLES, where)
        counts = _row_counts(session, chosen, where)
        empty = [t for t in chosen if counts[t] == 0]
        if len(empty) == len(chosen):
            raise PublishError(
                f"nothing to publish: {', '.join(chosen)} hold no rows at snapshot "
                f"{snapshot.snapshot_id}" + (f" where {where}" if where else "")
            )
        folder = prepare_folder(os.fspath(out))
        progress.start("publish", sum(counts.values()))
        written: dict[str, TableFiles] = {}
        for table in (t for t in chosen if counts[t]):
            written[table] = write_table(
                session,
                table,
                folder,
                where=where,
                shard_bytes=int(shard_mb * 1024 * 1024),
                progress=progress,
            )
            if written[table].rows != counts[table]:  # one pinned snapshot: cannot differ
                raise PublishError(f"{table}: wrote {written[table].rows} of {counts[table]} rows")
        provenance = trajectory_provenance(session, where, list(written))
    progress.finish()
    info = snapshot_info(lake, snapshot)
    manifest: dict[str, Any] = {
        "kind": "trajlake-snapshot",
        "snapshot": info,
        "where": where if where and where.strip() else None,
        "tables": {t: files.to_dict() for t, files in written.items()},
        "empty_tables": empty,
        "provenance": provenance,
        "license": licence,
        "pretty_name": pretty_name or f"trajlake snapshot {snapshot.snapshot_id}",
        "shard_mb": shard_mb,
        "trajlake_version": trajlake.__version__,
    }
    write_json(folder, MANIFEST, manifest)
    write_text(folder, CARD, snapshot_card(manifest, repo_id))
    shards = [f.path for files in written.values() for f in files.files]
    return PublishFolder(
        path=folder,
        kind="trajlake-snapshot",
        snapshot_id=snapshot.snapshot_id,
        tags=info["tags"],
        configs={t: {"rows": w.rows, "files": len(w.files)} for t, w in written.items()},
        files=[CARD, MANIFEST, *shards],
        delete_patterns=["data/*"],
        bytes=_total_bytes(folder, [CARD, MANIFEST, *shards]),
    )


def _total_bytes(folder: str, files: list[str]) -> int:
    return sum(os.path.getsize(os.path.join(folder, *f.split("/"))) for f in files)
