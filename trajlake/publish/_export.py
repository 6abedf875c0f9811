"""An existing export folder (SFT, RL groups) as a dataset folder: its shards and manifest as
written, plus a generated card with one config whose splits are the export's splits.

The export is recognised by its `manifest.json`: shards listed per split (`splits.<name>.files`,
as the SFT export writes them) or as one list (`files` / `shards`, split from the file name).
Every listed shard is checked against its size and sha256 before anything is staged, so a
folder that changed since its export is refused, not published under a manifest that lies.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trajlake._names import refuse_inside_lake
from trajlake.publish._card import export_card, export_rows
from trajlake.publish._folder import (
    CARD,
    MANIFEST,
    PublishError,
    PublishFolder,
    check_repo_id,
    prepare_folder,
    write_text,
)
from trajlake.publish._provenance import trajectory_provenance
from trajlake.publish._snapshot import default_license
from trajlake.query import open_session

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

__all__ = ["read_export", "write_export_folder"]

_HASH_CHUNK = 1024 * 1024


def _load_manifest(folder: str) -> dict[str, Any]:
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError as e:
        raise PublishError(f"{folder} is not an export folder: it has no {MANIFEST}") from e
    except ValueError as e:
        raise PublishError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(manifest, dict):
        raise PublishError(f"{path}: expected a JSON object")
    return manifest


def _split_of(path: str) -> str:
    stem = posixpath.basename(path).split("-", 1)[0]
    return stem if "-" in posixpath.basename(path) and stem else "train"


def _listed_files(manifest: Mapping[str, Any], where: str) -> dict[str, list[dict[str, Any]]]:
    """Split → its shard entries, from either manifest layout (file order kept)."""
    splits = manifest.get("splits")
    if isinstance(splits, Mapping) and all(
        isinstance(c, Mapping) and "files" in c for c in splits.values()
    ):
        listed = {name: list(counts["files"]) for name, counts in splits.items()}
        field = "splits.<split>.files"
    else:
        entries = manifest.get("files", manifest.get("shards"))
        if not isinstance(entries, list):
            raise PublishError(
                f"{where}: lists no shards (expected `splits.<split>.files`, `files` or `shards`)"
            )
        listed = {}
        for entry in entries:
            name = entry.get("path") if isinstance(entry, Mapping) else None
            listed.setdefault(_split_of(str(name)), []).append(entry)
        field = "files"
    for split, files in listed.items():
        for i, entry in enumerate(files):
            if not (
                isinstance(entry, Mapping)
                and isinstance(entry.get("path"), str)
                and isinstance(entry.get("sha256"), str)
            ):
                raise PublishError(
                    f"{where}: {field} entry {i} of split {split!r} needs `path` and `sha256`"
                )
    return {split: files for split, files in listed.items() if files}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(folder: str, entry: Mapping[str, Any]) -> str:
    relative = entry["path"]
    if posixpath.isabs(relative) or ".." in relative.split("/"):
        raise PublishError(f"{MANIFEST}: shard path {relative!r} leaves the export folder")
    path = os.path.join(folder, *relative.split("/"))
    if not os.path.isfile(path):
        raise PublishError(f"{path}: listed in {MANIFEST} but missing")
    size = entry.get("bytes")
    if isinstance(size, int) and os.path.getsize(path) != size:
        raise PublishError(
            f"{path}: {os.path.getsize(path)} bytes, the manifest says {size}: the folder "
            "changed since its export; export again"
        )
    if _sha256(path) != entry["sha256"]:
        raise PublishError(
            f"{path}: sha256 differs from {MANIFEST}: the folder changed since its export; "
            "export again"
        )
    return path


def read_export(folder: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], str]:
    """(manifest, split → verified shard entries, kind) of the export folder `folder`."""
    folder = os.path.abspath(folder)
    manifest = _load_manifest(folder)
    splits = _listed_files(manifest, os.path.join(folder, MANIFEST))
    if not splits:
        raise PublishError(f"{os.path.join(folder, MANIFEST)}: the export holds no shard")
    for files in splits.values():
        for entry in files:
            _verify(folder, entry)
    return manifest, splits, _kind(manifest)


def _kind(manifest: Mapping[str, Any]) -> str:
    """`groups` (RL groups), `sft`, the manifest's own `kind`, or `export`."""
    kind = manifest.get("kind")
    if isinstance(kind, str) and kind:
        return kind
    if manifest.get("format") == "groups":
        return "groups"
    return "sft" if "mask_rule" in manifest else "export"


def _stage(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)  # same file system: no copy of a large shard
    except OSError:
        shutil.copyfile(source, target)


def _lake_provenance(lake: LakeStore, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    snapshot = manifest.get("snapshot")
    if not isinstance(snapshot, Mapping) or not isinstance(snapshot.get("id"), int):
        return None
    where = manifest.get("where")
    with open_session(lake, snapshot["id"]) as session:
        return trajectory_provenance(session, where if isinstance(where, str) else None, [])


def _delete_patterns(files: list[str]) -> list[str]:
    """Patterns of the remote shards these replace (`train-*`, `val-*`, per folder)."""
    patterns = set()
    for path in files:
        head, name = posixpath.split(path)
        prefix = name.split("-", 1)[0] + "-*" if "-" in name else name
        patterns.add(posixpath.join(head, prefix) if head else prefix)
    return sorted(patterns)


def write_export_folder(
    export_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    repo_id: str | None = None,
    license: str | None = None,
    pretty_name: str | None = None,
    lake: LakeStore | None = None,
) -> PublishFolder:
    """Stage the export at `export_dir` with a dataset card in the folder `out`.

    Args:
        export_dir: An export folder with its `manifest.json` (SFT, RL groups).
        out: A local folder, new, empty or written by an earlier publish.
        repo_id, license, pretty_name: As for a snapshot (see `write_snapshot_folder`).
        lake: The lake exported from: adds the sources and redaction counts of the exported
            trajectories (read at the export's snapshot with its `where`).

    Raises:
        PublishError: No manifest, a shard missing or changed, or `out` holds other files.
    """
    if repo_id is not None:
        check_repo_id(repo_id)
    licence = default_license(license)
    source = os.path.abspath(os.fspath(export_dir))
    manifest, splits, kind = read_export(source)
    if os.path.abspath(os.fspath(out)) == source:
        raise ValueError("the publish folder must differ from the export folder")
    provenance = None
    if lake is not None:
        refuse_inside_lake(os.fspath(out), lake.location.uri, what="publish folder")
        provenance = _lake_provenance(lake, manifest)
    folder = prepare_folder(os.fspath(out))
    shards = [entry["path"] for files in splits.values() for entry in files]
    for relative in [*shards, MANIFEST]:
        parts = relative.split("/")
        _stage(os.path.join(source, *parts), os.path.join(folder, *parts))
    found = manifest.get("snapshot")
    snapshot: dict[str, Any] = found if isinstance(found, dict) else {}
    snapshot_id = snapshot.get("id") if isinstance(snapshot.get("id"), int) else None
    title = pretty_name or f"trajlake {kind} export of snapshot {snapshot_id}"
    card = export_card(
        manifest,
        splits,
        kind=kind,
        license=licence,
        pretty_name=title,
        repo_id=repo_id,
        provenance=provenance,
    )
    write_text(folder, CARD, card)
    files = [CARD, MANIFEST, *shards]
    return PublishFolder(
        path=folder,
        kind="trajlake-export",
        snapshot_id=snapshot_id,
        tags=[str(t) for t in snapshot.get("tags") or []],
        configs={"default": {"rows": export_rows(manifest, splits), "files": len(shards)}},
        files=files,
        delete_patterns=_delete_patterns(shards),
        bytes=sum(os.path.getsize(os.path.join(folder, *f.split("/"))) for f in files),
    )
