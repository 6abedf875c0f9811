"""Resource limits of lake queries: memory, threads and the spill directory, their defaults, and
the DuckDB settings that apply them before a sandboxed database is locked.

Kept apart from the session so that the CLI can check `--memory-limit` and `_views` can set up a
database without importing the session. Limits are per database, which is why a session with
non-default limits opens its own (see `_session.QuerySession`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import secrets
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import duckdb

log = logging.getLogger(__name__)

MiB = 2**20
GiB = 2**30
MEMORY_CAP = 4 * GiB
"""Default memory limit: this or half the machine's (or container's) memory, the smaller."""
MIN_MEMORY = 32 * MiB
"""Below this DuckDB cannot run ordinary scans; a smaller limit is a typo."""
THREAD_CAP = 8
"""Default threads: the usable cores, at most this many (each thread needs its own buffers)."""
SPILL_CAP = 16 * GiB
"""Spill budget: this or half the free space of the lake's disk, the smaller."""
SPILL_PREFIX = "sqltmp-"
"""Spill directories are `<lake>/_trajlake/sqltmp-<host>-<pid>-<random>`."""

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*$", re.I)


def parse_size(value: int | str, what: str = "memory_limit") -> int:
    """Bytes in `value`: an int, or a string such as '2GB', '512MiB', '300MB' (DuckDB's units)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{what} must be a number of bytes or a size such as '4GB', not {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(f"{what} {value!r} is not a size (examples: '4GB', '512MiB')")
        size = int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])
    if size < MIN_MEMORY:
        raise ValueError(f"{what} {value!r} is below the minimum of {MIN_MEMORY // MiB} MiB")
    return size


def check_timeout(timeout: float | None) -> float | None:
    """`timeout` if it is None or a positive, finite number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    return float(timeout)


def machine_memory() -> int:
    """Memory this process may use: the physical RAM, or the cgroup (container) limit if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit_file).read_text().strip()))
    return total


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class QueryLimits:
    """What one sandboxed database may use: `memory_limit` bytes and `threads` threads."""

    memory_limit: int
    threads: int

    @classmethod
    def default(cls) -> QueryLimits:
        """min(4 GiB, half the memory) and min(usable cores, 8) threads."""
        memory = max(MIN_MEMORY, min(MEMORY_CAP, machine_memory() // 2))
        return cls(memory_limit=memory, threads=min(usable_cores(), THREAD_CAP))

    @classmethod
    def resolve(cls, memory_limit: int | str | None, threads: int | None) -> QueryLimits:
        """The defaults with what the caller set replaced (validated)."""
        default = cls.default()
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(f"threads must be a positive integer, not {threads!r}")
        return cls(
            memory_limit=default.memory_limit if memory_limit is None else parse_size(memory_limit),
            threads=default.threads if threads is None else threads,
        )

    def describe(self) -> str:
        """The memory limit as DuckDB prints it (e.g. '4.0 GiB')."""
        if self.memory_limit >= GiB:
            return f"{self.memory_limit / GiB:.1f} GiB"
        return f"{self.memory_limit / MiB:.1f} MiB"


def _host() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_spill_dirs(private: Path) -> None:
    """Remove spill directories that processes of this host left behind when killed."""
    pattern = re.compile(rf"^{SPILL_PREFIX}{re.escape(_host())}-(\d+)-[0-9a-f]+$")
    with contextlib.suppress(OSError):
        for entry in private.iterdir():
            match = pattern.match(entry.name)
            if match and entry.is_dir() and not _alive(int(match.group(1))):
                log.info("removing the spill directory of a dead process: %s", entry)
                shutil.rmtree(entry, ignore_errors=True)


def spill_directory(lake_root: str) -> str | None:
    """A fresh spill directory name inside the lake's private area, or None where the lake is
    read-only to this process. DuckDB creates it on the first spill and removes it on close."""
    private = Path(lake_root) / "_trajlake"
    if not os.access(private, os.W_OK | os.X_OK):
        log.info("%s is not writable: lake queries will not spill to disk", private)
        return None
    remove_stale_spill_dirs(private)
    return str(private / f"{SPILL_PREFIX}{_host()}-{os.getpid()}-{secrets.token_hex(4)}")


def sql_literal(text: str) -> str:
    """`text` as a SQL string literal. Only for statements DuckDB binds no parameters in
    (`SET`, view definitions); queries pass values as parameters (`lake.sql(query, params)`)."""
    return "'" + text.replace("'", "''") + "'"


def apply_limits(db: duckdb.DuckDBPyConnection, lake_root: str | None, limits: QueryLimits) -> None:
    """Set memory, threads and the spill directory. DuckDB lets SQL read its temp directory even
    with external access off, so it must be inside the lake (already readable) or disabled."""
    db.execute(f"SET memory_limit='{limits.memory_limit}B'")
    db.execute(f"SET threads={limits.threads}")
    spill = None if lake_root is None else spill_directory(lake_root)
    db.execute(f"SET temp_directory={sql_literal(spill or '')}")
    if spill is not None:
        free = shutil.disk_usage(Path(spill).parent).free
        db.execute(f"SET max_temp_directory_size='{max(MIN_MEMORY, min(SPILL_CAP, free // 2))}B'")
