"""Writer processes for the crash and concurrency tests (run through multiprocessing).

A writer commits batches of sample trajectories and, after each commit returns, appends one
JSON line to its progress file (flushed), so the parent knows which commits finished.
Not a test module.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.context
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)


def context() -> multiprocessing.context.BaseContext:
    """A 'forkserver' context that has imported trajlake once: children start in milliseconds.

    Spawned interpreters would each spend about a second importing deltalake and pyarrow.
    The server imports only (no lake is opened there), so no threads exist when it forks.
    """
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["trajlake", "trajlake.sample", "_writer_child"])
    return ctx


def write_batches(
    lake_uri: str,
    progress_path: str,
    indices: Sequence[int],
    *,
    batch: int,
    seed: int = 0,
    turns: int = 2,
    storage_options: dict[str, str] | None = None,
    start: Any = None,
    forever: bool = False,
) -> None:
    """Commit `indices` as sample trajectories in batches of `batch`; log each finished commit.

    `start` (an Event or Barrier) makes writers begin together; `forever` keeps going with
    fresh indices after `indices` (the crash test kills the process at a random moment).
    """
    import trajlake as tl
    from trajlake.sample import sample_trajectory

    if start is not None:
        start.wait()
    lake = tl.open_lake(lake_uri, storage_options=storage_options)
    todo = list(indices)
    next_index = max(todo, default=-1) + 1
    with open(progress_path, "a", encoding="utf-8") as progress:
        while todo or forever:
            if not todo:
                todo = list(range(next_index, next_index + batch))
                next_index += batch
            chunk, todo = todo[:batch], todo[batch:]
            records = [sample_trajectory(i, seed=seed, turns=turns) for i in chunk]
            result = lake.write(records)
            line = {
                "snapshot_id": result.snapshot_id,
                "ids": [r["trajectory_id"] for r in records],
                "added": result.added.get("trajectories", 0),
                "duplicates": result.duplicates.get("trajectories", 0),
            }
            progress.write(json.dumps(line) + "\n")
            progress.flush()
    # multiprocessing children skip atexit handlers: let background maintenance finish.
    lake.close()


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """Finished commits a writer reported; a torn last line (killed mid-write) is ignored."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def die_at(lake_uri: str, indices: Sequence[int], point: str, seed: int = 0) -> None:
    """Commit sample trajectories and SIGKILL ourselves at a precise point of the commit.

    `point` is 'before-log-entry' (data tables written, snapshot entry not yet) or
    'after-log-entry' (the snapshot entry is written, nothing after it has run).
    """
    import os
    import signal

    import trajlake as tl
    from trajlake.lake._log import SnapshotLog
    from trajlake.sample import sample_trajectory

    original = SnapshotLog.append

    def append(self: SnapshotLog, snap: Any) -> Any:
        if point == "before-log-entry":
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(self, snap)
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    SnapshotLog.append = append  # type: ignore[method-assign]
    lake = tl.open_lake(lake_uri)
    lake.write([sample_trajectory(i, seed=seed, turns=2) for i in indices])
