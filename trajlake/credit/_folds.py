"""Folds by task, shared by every cross-fitted value source (text models, progress, hindsight,
ensemble), so that "a trajectory is valued only by a model that never saw its task" means the
same split everywhere: labelled tasks shuffled by a seed and dealt round-robin."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence

import numpy as np

from trajlake.credit._types import TrajectoryTurns
from trajlake.errors import TrajlakeError

__all__ = ["task_folds", "task_key"]

log = logging.getLogger(__name__)


def task_key(trajectory: TrajectoryTurns) -> str:
    """The task a trajectory belongs to (its own id when it has no task id)."""
    return (
        trajectory.task_id if trajectory.task_id is not None else "traj:" + trajectory.trajectory_id
    )


def task_folds(
    trajectories: Sequence[TrajectoryTurns], *, folds: int, seed: int, name: str, remedy: str
) -> dict[str, int]:
    """Fold of every task: labelled tasks shuffled by `seed` and dealt round-robin into
    min(folds, tasks) folds; unlabelled tasks get a stable fold (any is out of sample).

    Raises:
        TrajlakeError: fewer than 2 labelled tasks (`name` and `remedy` say what to do).
    """
    tasks = sorted({task_key(t) for t in trajectories if t.outcome is not None})
    if len(tasks) < 2:
        raise TrajlakeError(
            f"{name} needs labelled trajectories of at least 2 tasks to value each one with a "
            f"model fitted on other tasks; got {len(tasks)} ({remedy})"
        )
    k = min(folds, len(tasks))
    if k < folds:
        log.warning("%s: only %d labelled tasks, using %d folds", name, len(tasks), k)
    perm = np.random.default_rng(seed).permutation(len(tasks))
    fold = {tasks[j]: i % k for i, j in enumerate(perm)}
    for t in trajectories:
        fold.setdefault(task_key(t), zlib.crc32(task_key(t).encode()) % k)
    return fold
