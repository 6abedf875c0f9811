"""Limits that keep one hostile file from costing more than its share of memory and time.

A `FileWatch` records, for the file being read, what its reading ran into: damaged or
truncated compressed data, a decompressed size past the limit, bad records beyond the cap,
non-finite numbers read as null. `GuardedReader` sits under every opened source: it turns
decompression errors into a clean end of data (the records read before the damage are kept)
and stops a decompression bomb at the limit.
"""

from __future__ import annotations

import io
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import IO, Any

GiB = 1 << 30
MiB = 1 << 20

try:  # zstandard is what fsspec decompresses .zst with; its errors are data errors too
    from zstandard import ZstdError as _ZstdError

    _DATA_ERRORS: tuple[type[BaseException], ...] = (
        EOFError,
        OSError,
        zlib.error,
        lzma.LZMAError,
        _ZstdError,
    )
except ImportError:  # pragma: no cover - zstandard is a dependency
    _DATA_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)


@dataclass(frozen=True)
class Limits:
    """How much one file may cost before it is cut off (each cut is a quarantine row).

    The decompressed limit of a compressed file is `max_decompression_ratio` times its size
    on disk, but never below `decompressed_floor_bytes` (small files of repetitive text) nor
    above `max_decompressed_bytes`. The 80 trajectory files over 10 kB of the shared corpus
    compress 1.1–31× with `gzip -9` and 1.1–40× with `zstd -19` (measured on a 2-core
    machine); a bomb compresses 1,000× (gzip) to 30,000× (zstd), so 100× stops bombs early
    and leaves real files alone. Plain files are not limited: their size on disk is their size.
    """

    max_decompressed_bytes: int = 16 * GiB
    max_decompression_ratio: float = 100.0
    decompressed_floor_bytes: int = 64 * MiB
    max_line_bytes: int = 128 * MiB
    max_bad_records: int = 1000
    give_up_bad_fraction: float = 0.9
    """Stop reading a file once `max_bad_records` are bad and this share of its records is."""

    def decompressed_limit(self, compressed_size: int | None) -> int:
        """Bytes a compressed file of this size may decompress to."""
        if compressed_size is None:
            return self.max_decompressed_bytes
        by_ratio = int(compressed_size * self.max_decompression_ratio)
        return min(self.max_decompressed_bytes, max(self.decompressed_floor_bytes, by_ratio))


@dataclass
class FileWatch:
    """What reading one file (or one chunk of it) ran into; read after the adapter is done."""

    limits: Limits = field(default_factory=Limits)
    damage: str | None = None
    """Why the data ended early (damaged compressed stream, read error, size limit)."""
    damage_line: int | None = None
    damage_offset: int | None = None
    non_finite_parsed: int = 0
    """NaN/Infinity read as null by the JSON parser, not yet noted on a trajectory."""
    good: int = 0
    bad: int = 0
    overflow: int = 0
    """Bad records counted but not stored one by one (beyond `max_bad_records`)."""
    stopped_at_line: int | None = None
    """Where reading stopped because the file is mostly bad records."""
    notes: list[str] = field(default_factory=list)
    """Values cleaned on the way (e.g. non-finite numbers stored as null), for the report."""

    def fail(self, reason: str, line: int | None = None, offset: int | None = None) -> None:
        """Record the first reason the data ended early (later ones follow from it)."""
        if self.damage is None:
            self.damage, self.damage_line, self.damage_offset = reason, line, offset


_ACTIVE: ContextVar[FileWatch | None] = ContextVar("trajlake_file_watch", default=None)


def current_watch() -> FileWatch:
    """The watch of the file being read, or a fresh default one outside `watching`."""
    watch = _ACTIVE.get()
    return watch if watch is not None else FileWatch()


@contextmanager
def watching(limits: Limits) -> Iterator[FileWatch]:
    """Make a fresh watch the current one for the sources opened inside the block."""
    watch = FileWatch(limits)
    token = _ACTIVE.set(watch)
    try:
        yield watch
    finally:
        _ACTIVE.reset(token)


class GuardedReader(io.RawIOBase):
    """A raw binary stream over an opened source: errors and the size limit end the data.

    Byte positions are those of the decompressed data (for plain files: of the file), so
    seeking (zip members, line-aligned chunks) works as on the file underneath.
    """

    def __init__(self, inner: IO[bytes], watch: FileWatch, limit: int | None, name: str) -> None:
        self._inner = inner
        self._watch = watch
        self._limit = limit
        self._name = name
        self._pos = 0
        self._lines = 0
        self._ended = False
        # read1 returns what one decompression step gives: little is lost at a damage point.
        self._read = getattr(inner, "read1", inner.read)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        # Not for compressed data: a rewind decompresses it all again, and a prepass over
        # a bomb would read it twice; adapters have a forward-only path for streams.
        return self._limit is None and bool(self._inner.seekable())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = self._inner.seek(offset, whence)
        self._ended = False
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._ended or not len(view):
            return 0
        want = len(view)
        if self._limit is not None:
            want = min(want, self._limit - self._pos + 1)  # one byte more tells the limit is hit
        try:
            data = self._read(want)
        except _DATA_ERRORS as e:
            self._end(f"{self._what(e)} at byte {self._pos} of the decompressed data: {e}")
            return 0
        if self._limit is not None and self._pos + len(data) > self._limit:
            data = data[: self._limit - self._pos]
            self._end(
                f"decompresses to more than {self._limit} bytes (max_decompression_ratio × "
                "size on disk, or max_decompressed_bytes): reading stopped there "
                "(a decompression bomb?)"
            )
        self._scan(data)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def _what(self, error: BaseException) -> str:
        if isinstance(error, EOFError):
            return "compressed data ends early (truncated file?)"
        if isinstance(error, OSError) and not _is_decoder_error(error):
            return "read error"
        return "damaged compressed data"

    def _end(self, reason: str) -> None:
        self._ended = True
        self._watch.fail(reason, self._lines + 1 if self._limit is not None else None, self._pos)

    def _scan(self, data: bytes) -> None:
        """Count lines of decompressed data, so a damage point is reported with its line.

        Plain files are not scanned (it would cost a pass over every byte): their only
        damage is a read error, reported by byte offset.
        """
        if self._limit is not None:
            self._lines += data.count(b"\n")


def _is_decoder_error(error: OSError) -> bool:
    """gzip's BadGzipFile and bz2's invalid-data errors are OSErrors without an errno."""
    return error.errno is None


def guard(inner: IO[bytes], name: str, compressed_size: int | None, compressed: bool) -> IO[bytes]:
    """A buffered guarded stream over `inner`, watched by the current file watch."""
    watch = current_watch()
    limit = watch.limits.decompressed_limit(compressed_size) if compressed else None
    return io.BufferedReader(GuardedReader(inner, watch, limit, name), 1 << 20)
