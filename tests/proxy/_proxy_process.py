"""A real `trajlake proxy` process for durability tests: started as a subprocess (optionally
with a per-file size limit, so its spool runs out of space), killed with SIGKILL or stopped
with SIGTERM, its log kept in a file."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import requests


def _limit_file_size(max_bytes: int) -> Callable[[], None]:
    """Runs in the child before exec: writes past `max_bytes` fail with EFBIG (SIGXFSZ,
    which would kill the process, is ignored; both survive exec)."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return apply


class ProxyProcess:
    """`python -m trajlake proxy --lake LAKE --spool-dir SPOOL --upstream URL --port 0 ...`.

    Args:
        lake_dir, spool, upstream: As for the CLI.
        log: File that receives the process's stderr.
        args: More CLI options.
        max_file_bytes: If set, the process cannot grow any file past this size.
    """

    def __init__(
        self,
        lake_dir: Path,
        spool: Path,
        upstream: str,
        log: Path,
        args: Sequence[str] = (),
        max_file_bytes: int | None = None,
    ) -> None:
        command = [sys.executable, "-m", "trajlake", "proxy", "--lake", str(lake_dir)]
        command += ["--spool-dir", str(spool), "--upstream", upstream, "--port", "0", *args]
        self.log = log
        self._log_file = open(log, "ab")  # noqa: SIM115 (closed by stop)
        start = self._log_file.tell()
        preexec = None if max_file_bytes is None else _limit_file_size(max_file_bytes)
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=self._log_file, preexec_fn=preexec
        )
        self.url = self._wait_listening(start)

    def _wait_listening(self, start: int, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[start:].decode(errors="replace")
            for line in text.splitlines():
                if "recording proxy on http://" in line:
                    return line.split()[3]
            if self.process.poll() is not None:
                raise AssertionError(f"the proxy exited ({self.process.returncode}):\n{text}")
            time.sleep(0.05)
        self.stop(signal.SIGKILL)
        raise AssertionError(f"the proxy did not start within {timeout} s")

    def health(self) -> dict[str, object]:
        reply = requests.get(f"{self.url}/health", timeout=10)
        reply.raise_for_status()
        body: dict[str, object] = reply.json()
        return body

    def wait_for(self, key: str, value: int, timeout: float = 20.0) -> None:
        """Poll /health until its counter `key` reaches `value`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.health().get(key)
            if isinstance(seen, int) and seen >= value:
                return
            time.sleep(0.05)
        raise AssertionError(f"/health {key} did not reach {value}: {self.health()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send `sig` and wait; returns the exit code (-9 after SIGKILL)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        finally:
            self._log_file.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process.poll() is None:
            self.stop(signal.SIGKILL)


def spool_bytes(spool: Path) -> int:
    """Total size of the spool's files: its line files and body files."""
    return sum(p.stat().st_size for p in spool.rglob("*") if p.is_file())


def file_mode(path: Path) -> int:
    """Permission bits of a file or folder."""
    return os.stat(path).st_mode & 0o777
