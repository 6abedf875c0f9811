"""The actor pool every job runs through, and the driver's commit window.

A job hands the pool its units of work (rows: ids, or pickled inputs), a worker class (loaded
once per actor: model, lake handle) and `RayOptions`; Ray Data streams the results back to the
driver batch by batch (`map_batches` over an `ActorPoolStrategy`), and `CommitWindow` gathers
them into commits of `commit_every` batches. A dead actor is recreated by Ray and its unfinished
batches are retried on the new one (`max_restarts` / `max_task_retries`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from trajlake.distributed.cluster import RayOptions

Batch = dict[str, np.ndarray]
"""A batch as Ray Data's numpy format gives it: column name → array."""

_MAX_BLOCKS = 4096
"""Input blocks at most: a block per batch until then (Ray bundles or splits the rest)."""


@dataclass(frozen=True)
class BatchDone:
    """What the driver got back from one batch (passed to a job's `on_batch` observer)."""

    units: int
    """Units of work in the batch."""
    worker_pids: tuple[int, ...]
    """Processes of the actors that computed it."""
    committed: bool
    """This batch closed a commit window: its results (and the window's) are in the lake."""


OnBatch = Callable[[BatchDone], None]
"""Observer called on the driver after each batch (progress, logging)."""


def run_pool(
    ray: ModuleType,
    units: Sequence[dict[str, Any]],
    worker: type,
    worker_kwargs: dict[str, Any],
    options: RayOptions,
) -> Iterator[Batch]:
    """Results of `worker(**worker_kwargs)(batch)` over `units`, streamed in no fixed order.

    Each unit is one row of the input; a worker returns one output row per input row with a
    `worker_pid` column (which actor computed it).
    """
    if not units:
        return
    blocks = min(_MAX_BLOCKS, math.ceil(len(units) / options.batch_size))
    data = ray.data.from_items(list(units), override_num_blocks=blocks)
    resources: dict[str, Any] = {"num_cpus": options.num_cpus_per_worker}
    if options.num_gpus_per_worker > 0:
        resources["num_gpus"] = options.num_gpus_per_worker
    with warnings.catch_warnings():
        # max_restarts / max_task_retries have no named parameter in Ray 2.60's map_batches:
        # they go through the remote args it marks deprecated (Ray Data's own defaults, -1,
        # would retry a batch that kills every actor forever).
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        mapped = data.map_batches(
            worker,
            fn_constructor_kwargs=worker_kwargs,
            batch_size=options.batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=options.num_workers),
            max_restarts=options.max_restarts,
            max_task_retries=options.max_restarts,
            **resources,
        )
    yield from mapped.iter_batches(batch_size=None, batch_format="numpy")


@dataclass
class CommitWindow:
    """Gathers result batches and commits them every `every` batches (and at the end).

    `commit` receives the window's batches and writes them in one lake commit; whatever it
    committed stays committed if the job dies later, which is what makes a rerun resumable.
    """

    every: int
    commit: Callable[[list[Batch]], None]
    on_batch: OnBatch | None = None
    pending: list[Batch] = field(default_factory=list)
    commits: int = 0
    worker_pids: set[int] = field(default_factory=set)

    def add(self, batch: Batch) -> None:
        """Take one result batch; commit the window when it is full."""
        self.pending.append(batch)
        pids = tuple(sorted({int(p) for p in batch["worker_pid"]}))
        self.worker_pids.update(pids)
        full = len(self.pending) >= self.every
        if full:
            self.flush()
        if self.on_batch is not None:
            self.on_batch(BatchDone(len(batch["worker_pid"]), pids, full))

    def flush(self) -> None:
        """Commit what is gathered (nothing when empty)."""
        if not self.pending:
            return
        batches, self.pending = self.pending, []
        self.commit(batches)
        self.commits += 1
