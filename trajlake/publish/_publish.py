"""`publish`: a lake snapshot (or an export folder) → a dataset folder → a Hub dataset repo.

The folder is built first, in `dry_run` when given (then nothing is uploaded) or in a temporary
directory removed after the upload. Public repos need a declared licence: a dataset published
for everyone without one grants no terms, and the lake does not know its sources' licences.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajlake.publish._export import write_export_folder
from trajlake.publish._folder import PublishFolder, check_repo_id
from trajlake.publish._snapshot import DEFAULT_SHARD_MB, write_snapshot_folder
from trajlake.publish._upload import UploadResult, upload

if TYPE_CHECKING:
    from trajlake._progress import Progress
    from trajlake.lake import LakeStore, SnapshotRef

__all__ = ["PublishReport", "publish"]


@dataclass(frozen=True)
class PublishReport:
    """What a publish wrote and, unless it was a dry run, where it went."""

    repo_id: str
    folder: PublishFolder
    upload: UploadResult | None
    """None for a dry run."""

    @property
    def dry_run(self) -> bool:
        """Nothing was uploaded."""
        return self.upload is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (a dry run's `folder.path` is the folder left on disk)."""
        return {
            "repo_id": self.repo_id,
            "dry_run": self.dry_run,
            "commit_message": self.folder.commit_message(),
            "folder": self.folder.to_dict(),
            "upload": self.upload.to_dict() if self.upload else None,
        }

    def summary(self) -> str:
        """One line for people."""
        configs = ", ".join(f"{n} ({c['rows']} rows)" for n, c in self.folder.configs.items())
        what = f"snapshot {self.folder.snapshot_id}: {configs}"
        if self.upload is None:
            return f"dry run: wrote {what} to {self.folder.path} (nothing uploaded)"
        visibility = "private" if self.upload.private else "public"
        return f"published {what} to {self.upload.repo_url} ({visibility})"


def _check_visibility_licence(private: bool, license: str | None) -> None:
    if not private and not (license and license.strip()):
        raise ValueError(
            "a public dataset needs a licence: pass --license ID (e.g. apache-2.0, cc-by-4.0, "
            "other), or publish it private (the default)"
        )


def _build(
    lake: LakeStore | None, out: str, repo_id: str, from_export: str | None, **options: Any
) -> PublishFolder:
    if from_export is not None:
        unused = [k for k in ("at", "where", "tables") if options.get(k) is not None]
        if unused:
            raise ValueError(
                f"{', '.join(unused)} select rows of a snapshot; an export folder is "
                "published as it was exported"
            )
        return write_export_folder(
            from_export,
            out,
            repo_id=repo_id,
            license=options["license"],
            pretty_name=options["pretty_name"],
            lake=lake,
        )
    if lake is None:
        raise ValueError("publishing a snapshot needs the lake (or pass from_export)")
    return write_snapshot_folder(lake, out, repo_id=repo_id, **options)


def publish(
    lake: LakeStore | None,
    repo_id: str,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    tables: Sequence[str] | None = None,
    private: bool = True,
    license: str | None = None,
    pretty_name: str | None = None,
    from_export: str | os.PathLike[str] | None = None,
    dry_run: str | os.PathLike[str] | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    shard_mb: float = DEFAULT_SHARD_MB,
    progress: Progress | None = None,
    show_upload_progress: bool = False,
) -> PublishReport:
    """Publish snapshot `at` (or the export folder `from_export`) as the Hub dataset `repo_id`.

    Args:
        lake: The lake (may be None with `from_export`: then the card lists no sources).
        repo_id: `namespace/name` of the dataset repo.
        at, where, tables, shard_mb: What to publish (see `write_snapshot_folder`).
        private: Create the repo private (default); an existing repo must match.
        license: Licence id for the card; required when `private` is False.
        pretty_name: Title of the card.
        from_export: An SFT or groups export folder (with its manifest.json) to publish.
        dry_run: Write the folder here and upload nothing (no token needed).
        token: Hub token (default: HF_TOKEN, then the stored login).
        endpoint: Hub URL (default: HF_ENDPOINT, then huggingface.co).
        progress: Receives one unit per row written.
        show_upload_progress: Let huggingface_hub draw its upload bars on stderr.
    """
    check_repo_id(repo_id)
    _check_visibility_licence(private, license)
    export = os.fspath(from_export) if from_export is not None else None
    options: dict[str, Any] = {"license": license, "pretty_name": pretty_name}
    snapshot_options = {"at": at, "where": where, "tables": tables}
    if export is None:
        options |= snapshot_options | {"shard_mb": shard_mb, "progress": progress}
    else:
        options |= snapshot_options
    if dry_run is not None:
        folder = _build(lake, os.fspath(dry_run), repo_id, export, **options)
        return PublishReport(repo_id, folder, None)
    with tempfile.TemporaryDirectory(prefix="trajlake-publish-") as staging:
        folder = _build(lake, staging, repo_id, export, **options)
        result = upload(
            folder,
            repo_id,
            private=private,
            token=token,
            endpoint=endpoint,
            show_progress=show_upload_progress,
        )
    return PublishReport(repo_id, folder, result)
