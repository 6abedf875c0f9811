"""A publish folder: what is uploaded, as a local directory (the `--dry-run DIR` output).

`PublishFolder` describes one; `prepare_folder` makes the directory safe to (re)write: a new or
empty folder, or one an earlier publish wrote (its stale shards are removed), never a folder of
other files, since everything in it would be uploaded.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from trajlake.errors import PublishError

__all__ = [
    "MANIFEST",
    "PublishError",
    "PublishFolder",
    "check_repo_id",
    "prepare_folder",
    "write_json",
    "write_text",
]

MANIFEST = "manifest.json"
CARD = "README.md"
_REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")


def check_repo_id(repo_id: str) -> str:
    """`repo_id` itself when it is `name` or `namespace/name` as the Hub spells them."""
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".", "-")):
        raise ValueError(
            f"invalid Hugging Face repo id {repo_id!r}: use NAMESPACE/NAME (letters, digits, "
            "'-', '_', '.'), e.g. my-org/agent-rollouts"
        )
    return repo_id


@dataclass
class PublishFolder:
    """A local folder ready to upload as a Hub dataset repo."""

    path: str
    kind: str
    """`trajlake-snapshot` (tables of a lake snapshot) or `trajlake-export` (an export folder)."""
    snapshot_id: int | None
    tags: list[str]
    configs: dict[str, dict[str, int]]
    """Config (table, or `default` for an export) → {rows, files}."""
    files: list[str] = field(default_factory=list)
    """Every file, relative to `path`, card and manifest included."""
    delete_patterns: list[str] = field(default_factory=list)
    """Remote files these replace: stale shards of an earlier publish are deleted on upload."""
    bytes: int = 0

    def commit_message(self) -> str:
        """What the upload's commit says: which snapshot (and tags) it publishes."""
        if self.snapshot_id is None:  # an export whose manifest names no snapshot
            return "Publish trajlake export"
        what = "lake snapshot" if self.kind == "trajlake-snapshot" else "export of lake snapshot"
        tags = f" (tags: {', '.join(self.tags)})" if self.tags else ""
        return f"Publish trajlake {what} {self.snapshot_id}{tags}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "kind": self.kind,
            "snapshot": self.snapshot_id,
            "tags": self.tags,
            "configs": self.configs,
            "files": self.files,
            "bytes": self.bytes,
        }


def _card_tags(folder: str) -> list[Any]:
    """The `tags:` of the folder's dataset card front matter (empty when there is none)."""
    try:
        with open(os.path.join(folder, CARD), encoding="utf-8") as f:
            text = f.read()
        front = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else None
    except (OSError, IndexError, yaml.YAMLError):
        return []
    tags = front.get("tags") if isinstance(front, dict) else None
    return tags if isinstance(tags, list) else []


def _is_earlier_publish(folder: str) -> bool:
    """The folder holds a publish: a snapshot manifest, or an export staged with our card."""
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
            kind = json.load(f).get("kind")
    except (OSError, ValueError, AttributeError):
        return False
    return kind == "trajlake-snapshot" or "trajlake" in _card_tags(folder)


def prepare_folder(path: str) -> str:
    """Create `path` or clear what an earlier publish wrote there; refuse other folders."""
    if "://" in path:
        raise ValueError(f"the publish folder must be a local directory, got {path!r}")
    folder = os.path.abspath(path)
    if os.path.isfile(folder):
        raise ValueError(f"{path} is a file; the publish folder must be a directory")
    if os.path.isdir(folder) and os.listdir(folder):
        if not _is_earlier_publish(folder):
            raise PublishError(
                f"{path} is not empty and holds no earlier publish: choose a new or empty "
                "folder (everything in it would be uploaded)"
            )
        for stale in glob.glob(os.path.join(folder, "**", "*"), recursive=True):
            if os.path.isfile(stale):
                os.remove(stale)
    os.makedirs(folder, exist_ok=True)
    return folder


def write_text(folder: str, name: str, text: str) -> None:
    """Write a UTF-8 text file of the folder (LF line ends on every system)."""
    with open(os.path.join(folder, name), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def write_json(folder: str, name: str, value: Any) -> None:
    """Write JSON indented, keys in the order built (tables in publish order): the same
    manifest is the same bytes."""
    write_text(folder, name, json.dumps(value, indent=2, ensure_ascii=False) + "\n")
