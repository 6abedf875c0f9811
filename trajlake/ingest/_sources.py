"""Input sources: paths, directories (recursive), globs and fsspec URLs, plain or compressed.

A path that cannot be read as a file (a broken link, a FIFO, a socket) is kept with the reason,
so the batch reports it instead of stopping on it; every opened source is guarded
(`trajlake.ingest._limits`): damaged compressed data ends the data, a bomb stops at a limit.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import fsspec
from fsspec.utils import infer_compression

from trajlake.errors import TrajlakeError
from trajlake.ingest._limits import guard

_SKIP_NAMES = {".DS_Store", ".gitignore", ".gitattributes", "LICENSE", "LICENSE.txt", "NOTICE"}
# A lake's own metadata folders (`_trajlake`, `_delta_log`) and tool folders hold no rollouts.
_SKIP_DIRS = {".git", "__pycache__", "_trajlake", "_delta_log"}


@dataclass(frozen=True)
class SourceFile:
    """One input file: its URI as reported to users, and how to open it."""

    uri: str
    size: int | None
    storage_options: Mapping[str, Any] | None = None
    problem: str | None = None
    """Why the path cannot be read as a file (it is quarantined, never opened)."""

    @property
    def name(self) -> str:
        """Base name without compression suffix."""
        base = self.uri.rstrip("/").rsplit("/", 1)[-1]
        for suffix in (".gz", ".zst", ".bz2", ".xz"):
            if base.endswith(suffix):
                return base[: -len(suffix)]
        return base

    @property
    def is_compressed(self) -> bool:
        """Whether the file is decompressed on reading (so offsets are not file offsets)."""
        return infer_compression(self.uri) is not None

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """Open for binary reading, decompressing by suffix (.gz, .zst, .bz2, .xz).

        The stream is buffered (zstandard's reader alone cannot iterate lines) and guarded:
        damaged data and the decompressed-size limit end it, recorded in the current watch.
        """
        if self.problem is not None:
            raise OSError(f"{self.uri}: {self.problem}")
        compression = infer_compression(self.uri)
        options = self.storage_options or {}
        with fsspec.open(self.uri, "rb", compression=compression, **options) as f:
            yield guard(f, self.uri, self.size, compression is not None)


def _walk_local(root: str) -> Iterator[str]:
    for directory, dirs, files in os.walk(root):
        # Sorted: a folder ingests in the same order on every system and every run.
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            # Hidden files are read: some tools log there (aider's `.aider.chat.history.md`).
            if name not in _SKIP_NAMES:
                yield os.path.join(directory, name)


def _expand_local(path: str) -> list[str]:
    if any(ch in path for ch in "*?["):
        matches = sorted(glob.glob(path, recursive=True))
        return [m for p in matches for m in (list(_walk_local(p)) if os.path.isdir(p) else [p])]
    if os.path.isdir(path):
        return list(_walk_local(path))
    if os.path.lexists(path):  # a file, or a path that is no readable file: reported later
        return [path]
    raise TrajlakeError(f"input not found: {path!r}")


def _local_source(path: str) -> SourceFile:
    """A local file with its size, or with the reason it cannot be read as a file."""
    uri = os.path.abspath(path)
    try:
        info = os.stat(path)
    except OSError as e:
        broken = os.path.islink(path)
        reason = "broken symbolic link" if broken else "cannot read"
        return SourceFile(uri, None, problem=f"{reason} ({e.strerror or e})")
    if not stat.S_ISREG(info.st_mode):
        kind = "FIFO" if stat.S_ISFIFO(info.st_mode) else "socket or device"
        return SourceFile(uri, None, problem=f"not a regular file ({kind})")
    return SourceFile(uri, info.st_size)


def _expand_remote(url: str, storage_options: Mapping[str, Any] | None) -> list[SourceFile]:
    fs, _, paths = fsspec.get_fs_token_paths(url, storage_options=dict(storage_options or {}))
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    found: list[SourceFile] = []
    for path in paths:
        if fs.isdir(path):
            for sub in sorted(fs.find(path)):
                found.append(SourceFile(f"{protocol}://{sub}", fs.size(sub), storage_options))
        else:
            size = fs.size(path) if fs.exists(path) else None
            uri = path if "://" in path else f"{protocol}://{path}"
            found.append(
                SourceFile(uri if protocol not in ("http", "https") else url, size, storage_options)
            )
    if not found:
        raise TrajlakeError(f"input not found: {url!r}")
    return found


def expand_sources(
    inputs: Sequence[str | os.PathLike[str]], storage_options: Mapping[str, Any] | None = None
) -> list[SourceFile]:
    """Every file named by the inputs, in a stable order, each once."""
    seen: set[str] = set()
    out: list[SourceFile] = []
    for item in inputs:
        text = os.fspath(item)
        if "://" in text and not text.startswith("file://"):
            files = _expand_remote(text, storage_options)
        else:
            local = text.removeprefix("file://")
            files = [_local_source(p) for p in _expand_local(local)]
        for f in files:
            if f.uri not in seen:
                seen.add(f.uri)
                out.append(f)
    return out


def read_head(source: SourceFile, size: int = 65536) -> bytes:
    """The first bytes of a (decompressed) file, for format detection."""
    with source.open() as f:
        return f.read(size)
