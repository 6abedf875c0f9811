"""Shared checks for the lake tests: settings, snapshot completeness, chain shape, file counts.

Not a test module; imported by the tests in this folder.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import trajlake as tl


def set_settings(lake_root: str | os.PathLike[str], **settings: Any) -> None:
    """Change a local lake's maintenance settings in `_trajlake/lake.json` (reopen to apply)."""
    path = Path(lake_root) / "_trajlake" / "lake.json"
    config = json.loads(path.read_text())
    config["settings"].update(settings)
    path.write_text(json.dumps(config, indent=2))


def snapshot_contents(lake: tl.Lake, at: tl.lake.SnapshotRef) -> tuple[set[str], list[str]]:
    """Trajectory ids stored at a snapshot, and what is wrong with it (empty when complete).

    Complete means: every trajectory has exactly `n_messages` messages, no message lacks its
    trajectory, and no trajectory or message key is stored twice.
    """
    with lake.query(at) as session:
        trajectories = session.sql("SELECT trajectory_id, n_messages FROM trajectories").rows()
        messages = session.sql("SELECT trajectory_id, thread, idx FROM messages").rows()
    expected = dict(trajectories)
    counts = Counter(tid for tid, _, _ in messages)
    problems = []
    if len(expected) != len(trajectories):
        problems.append(f"{len(trajectories) - len(expected)} trajectory rows stored twice")
    if len(set(messages)) != len(messages):
        problems.append(f"{len(messages) - len(set(messages))} message rows stored twice")
    incomplete = {t: (counts.get(t, 0), n) for t, n in expected.items() if counts.get(t, 0) != n}
    if incomplete:
        problems.append(f"trajectories with (messages, n_messages) {incomplete}")
    orphans = set(counts) - set(expected)
    if orphans:
        problems.append(f"messages without their trajectory: {sorted(orphans)}")
    return set(expected), [f"snapshot {at}: {p}" for p in problems]


def chain_problems(snapshots: Iterable[tl.Snapshot]) -> list[str]:
    """Problems with the snapshot log's shape: ids must be 0..N, each parent the one before."""
    problems = []
    for expected_id, snap in enumerate(snapshots):
        if snap.snapshot_id != expected_id:
            problems.append(f"snapshot #{expected_id} has id {snap.snapshot_id}")
        expected_parent = None if expected_id == 0 else expected_id - 1
        if snap.parent_id != expected_parent:
            problems.append(f"snapshot {snap.snapshot_id} has parent {snap.parent_id}")
    return problems


def count_files(root: str | os.PathLike[str], pattern: str) -> int:
    """Number of files under `root` matching a glob pattern (e.g. 'tables/*/*.parquet')."""
    return sum(1 for p in Path(root).glob(pattern) if p.is_file())
