"""Uploading a publish folder to the Hugging Face Hub as a dataset repo (`huggingface_hub`).

The repo is created private unless asked otherwise, and an existing repo whose visibility
differs from the one asked for is refused: `create_repo` ignores `private` for a repo that
exists, and data meant to stay private must not land in a public repo. Shards an earlier
publish left that this one does not replace are deleted in the same commit.

Large folders: where the installed `huggingface_hub` has `upload_large_folder` (resumable,
several commits; removed in huggingface_hub 2, whose `upload_folder` commits a large folder in
batches itself over Xet), it is used above `LARGE_FOLDER_BYTES` or `LARGE_FOLDER_FILES`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trajlake.errors import missing_extra
from trajlake.publish._folder import PublishError, PublishFolder

__all__ = ["LARGE_FOLDER_BYTES", "LARGE_FOLDER_FILES", "UploadResult", "resolve_token", "upload"]

log = logging.getLogger(__name__)

LARGE_FOLDER_BYTES = 5 * 1024**3
"""Above this many bytes, `upload_large_folder` where the installed huggingface_hub has it."""
LARGE_FOLDER_FILES = 1000
"""... or above this many files."""


@dataclass(frozen=True)
class UploadResult:
    """Where the folder went."""

    repo_id: str
    repo_url: str
    private: bool
    method: str
    """`upload_folder` or `upload_large_folder`."""
    commit_url: str | None
    commit_oid: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "repo_id": self.repo_id,
            "repo_url": self.repo_url,
            "private": self.private,
            "method": self.method,
            "commit_url": self.commit_url,
            "commit_oid": self.commit_oid,
        }


def _hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.utils  # not among the package's lazy attributes
    except ImportError as e:
        raise missing_extra("huggingface_hub", "hub") from e
    return huggingface_hub


def resolve_token(token: str | None) -> str:
    """`token`, else `HF_TOKEN`, else the token `hf auth login` stored; PublishError if none."""
    if token:
        return token
    found = _hub().get_token()  # HF_TOKEN first, then the stored token
    if not found:
        raise PublishError(
            "no Hugging Face token: pass --token, set HF_TOKEN, or log in with `hf auth login` "
            "(--dry-run DIR needs none)"
        )
    return str(found)


def _endpoint(endpoint: str | None) -> str | None:
    """`endpoint`, else `HF_ENDPOINT` read now (huggingface_hub reads it once, at import)."""
    return endpoint or os.environ.get("HF_ENDPOINT") or None


def _check_visibility(api: Any, repo_id: str, private: bool, token: str) -> None:
    info = api.repo_info(repo_id, repo_type="dataset", token=token)
    if info.private is not None and bool(info.private) != private:
        actual = "private" if info.private else "public"
        wanted = "--private" if private else "--public"
        raise PublishError(
            f"dataset repo {repo_id} exists and is {actual}, but {wanted} was asked for: "
            "change its visibility on the Hub first, or publish with the matching flag"
        )


def _is_large(folder: PublishFolder) -> bool:
    return folder.bytes > LARGE_FOLDER_BYTES or len(folder.files) > LARGE_FOLDER_FILES


def upload(
    folder: PublishFolder,
    repo_id: str,
    *,
    private: bool = True,
    token: str | None = None,
    endpoint: str | None = None,
    show_progress: bool = False,
) -> UploadResult:
    """Create the dataset repo `repo_id` (private by default) and upload `folder` to it.

    `show_progress` lets huggingface_hub draw its upload bars on stderr (off by default: the
    library does not draw; the CLI turns them on for a terminal).

    Raises:
        MissingExtra: huggingface_hub is not installed (extra `hub`).
        PublishError: No token, or the repo exists with another visibility.
    """
    hub = _hub()
    token = resolve_token(token)
    with _progress_bars(hub, show_progress):
        return _create_and_upload(hub, folder, repo_id, private, token, endpoint)


@contextlib.contextmanager
def _progress_bars(hub: Any, show: bool) -> Iterator[None]:
    """huggingface_hub's bars on or off for the upload, then as they were (a global switch)."""
    were_disabled = hub.utils.are_progress_bars_disabled()
    if show == were_disabled:
        (hub.utils.enable_progress_bars if show else hub.utils.disable_progress_bars)()
    try:
        yield
    finally:
        if show == were_disabled:
            (hub.utils.disable_progress_bars if show else hub.utils.enable_progress_bars)()


def _create_and_upload(
    hub: Any, folder: PublishFolder, repo_id: str, private: bool, token: str, endpoint: str | None
) -> UploadResult:
    api = hub.HfApi(endpoint=_endpoint(endpoint), token=token)
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    _check_visibility(api, repo_id, private, token)
    if _is_large(folder) and hasattr(api, "upload_large_folder"):
        log.info(
            "uploading %d files (%d bytes) with upload_large_folder",
            len(folder.files),
            folder.bytes,
        )
        api.upload_large_folder(
            repo_id=repo_id,
            folder_path=folder.path,
            repo_type="dataset",
            allow_patterns=folder.files,
        )
        return UploadResult(repo_id, str(url), private, "upload_large_folder", None, None)
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=folder.path,
        repo_type="dataset",
        commit_message=folder.commit_message(),
        allow_patterns=folder.files,
        delete_patterns=folder.delete_patterns,
    )
    return UploadResult(
        repo_id,
        str(url),
        private,
        "upload_folder",
        getattr(info, "commit_url", None),
        getattr(info, "oid", None),
    )
