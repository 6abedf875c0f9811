"""Where a lake lives: URI parsing, `memory://` lakes, and small metadata files on any store.

Delta tables are read and written by delta-rs with the lake's storage options; everything
else (snapshot log, tags, lake config) goes through fsspec on the same location.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec

from trajlake.errors import UnsupportedStorage, missing_extra

_OBJECT_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
_MEMORY_LAKES: dict[str, str] = {}
_MEMORY_LOCK = threading.Lock()


def _memory_root(name: str) -> str:
    """A process-private temporary directory standing in for `memory://name`.

    delta-rs's in-memory store is private to one table object, and DuckDB cannot read it,
    so a memory lake is a temp dir that lives as long as the process (removed at exit).
    """
    with _MEMORY_LOCK:
        root = _MEMORY_LAKES.get(name)
        if root is None:
            root = tempfile.mkdtemp(prefix="trajlake-memory-")
            _MEMORY_LAKES[name] = root
            atexit.register(shutil.rmtree, root, True)
        return root


@dataclass(frozen=True)
class LakeLocation:
    """A lake's root: a local directory or an object-store prefix, with its storage options."""

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        """True when the lake is a directory on this machine (fast paths apply)."""
        return "://" not in self.uri

    @property
    def scheme(self) -> str:
        """URI scheme ('file' for local lakes)."""
        return self.uri.split("://", 1)[0] if "://" in self.uri else "file"

    def join(self, *parts: str) -> str:
        """The URI (or local path) of a path under the lake root."""
        if self.is_local:
            return os.path.join(self.uri, *parts)
        return "/".join([self.uri.rstrip("/"), *parts])

    def table_uri(self, table: str) -> str:
        """URI of a Delta table of the lake."""
        return self.join("tables", table)

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """An fsspec filesystem for this location (object stores need their extra)."""
        if self.is_local:
            return fsspec.filesystem("file")
        try:
            return fsspec.filesystem(
                self.scheme, **_fsspec_options(self.scheme, self.storage_options)
            )
        except ImportError as e:
            extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}.get(self.scheme, "azure")
            raise missing_extra(str(e.name or self.scheme), extra) from e


def parse_location(
    uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None
) -> LakeLocation:
    """Normalise a user-supplied lake URI: local paths become absolute; memory:// a temp dir."""
    text = os.fspath(uri)
    options = dict(storage_options or {})
    if text.startswith("file://"):
        text = text[len("file://") :]
    if text.startswith("memory://"):
        return LakeLocation(_memory_root(text[len("memory://") :] or "default"), options)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        if scheme not in _OBJECT_SCHEMES:
            raise UnsupportedStorage(
                f"unsupported lake URI scheme {scheme!r} in {text!r}; use a local path, "
                f"memory://NAME or one of {', '.join(_OBJECT_SCHEMES)}"
            )
        return LakeLocation(text.rstrip("/"), options)
    return LakeLocation(os.path.abspath(os.path.expanduser(text)), options)


def _fsspec_options(scheme: str, options: Mapping[str, str]) -> dict[str, Any]:
    """Translate delta-rs storage options into the fsspec backend's keyword arguments."""
    upper = {k.upper(): v for k, v in options.items()}
    if scheme in ("s3", "s3a"):
        kwargs: dict[str, Any] = {}
        client: dict[str, Any] = {}
        if "AWS_ACCESS_KEY_ID" in upper:
            kwargs["key"] = upper["AWS_ACCESS_KEY_ID"]
        if "AWS_SECRET_ACCESS_KEY" in upper:
            kwargs["secret"] = upper["AWS_SECRET_ACCESS_KEY"]
        if "AWS_SESSION_TOKEN" in upper:
            kwargs["token"] = upper["AWS_SESSION_TOKEN"]
        endpoint = upper.get("AWS_ENDPOINT_URL") or upper.get("AWS_ENDPOINT")
        if endpoint:
            client["endpoint_url"] = endpoint
        region = upper.get("AWS_REGION") or upper.get("AWS_DEFAULT_REGION")
        if region:
            client["region_name"] = region
        if client:
            kwargs["client_kwargs"] = client
        kwargs["use_listings_cache"] = False
        return kwargs
    return {}


class MetadataStore:
    """Small JSON metadata files under the lake root, written atomically.

    Local writes go to a temp file and are renamed into place, so a killed process leaves
    either the old file or the new one; object-store puts are atomic already.
    """

    def __init__(self, location: LakeLocation) -> None:
        self.location = location
        self._fs = location.filesystem()

    def path(self, *parts: str) -> str:
        """Path of a metadata file, relative parts joined under the lake root."""
        return self.location.join(*parts)

    def exists(self, *parts: str) -> bool:
        """Whether a metadata file exists."""
        path = self.path(*parts)
        if self.location.is_local:
            return os.path.exists(path)
        return bool(self._fs.exists(path))

    def read(self, *parts: str) -> bytes:
        """Read a metadata file; FileNotFoundError when it is absent."""
        path = self.path(*parts)
        if self.location.is_local:
            with open(path, "rb") as f:
                return f.read()
        return bytes(self._fs.cat_file(path))

    def write(self, data: bytes, *parts: str, exclusive: bool = False) -> None:
        """Write a metadata file atomically; `exclusive` raises FileExistsError if it exists."""
        path = self.path(*parts)
        if not self.location.is_local:
            # mode="create" is a conditional put (If-None-Match): atomic on the store itself.
            self._fs.pipe_file(path, data, mode="create" if exclusive else "overwrite")
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            if exclusive:
                # link() fails if the target exists: an atomic create-if-absent with full content.
                os.link(tmp, path)
            else:
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def list(self, *parts: str) -> list[str]:
        """Names of the files directly under a metadata folder (empty when it is absent)."""
        path = self.path(*parts)
        if self.location.is_local:
            try:
                return sorted(os.listdir(path))
            except FileNotFoundError:
                return []
        try:
            return sorted(p.rsplit("/", 1)[-1] for p in self._fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    def delete(self, *parts: str) -> None:
        """Delete a metadata file if it exists."""
        path = self.path(*parts)
        if self.location.is_local:
            if os.path.exists(path):
                os.unlink(path)
        elif self._fs.exists(path):
            self._fs.rm_file(path)
