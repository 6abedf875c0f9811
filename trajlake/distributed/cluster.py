"""Connecting to Ray and what a distributed job is asked to use: `RayOptions`, `ray_session`.

Ray is an optional extra (`trajlake[ray]`), imported only here and only when a job starts, so
`import trajlake.distributed` and `trajlake --help` never load it. A job joins the cluster at
`address` (or `RAY_ADDRESS`), joins the Ray already initialised in this process (a notebook, a
test), or starts a local one, which it then shuts down again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trajlake.errors import TrajlakeError, missing_extra

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RayOptions:
    """How a job runs on Ray (the `--engine ray` flags)."""

    address: str | None = None
    """Cluster to join (`ray://host:10001`, `host:6379`, `auto`); None: the Ray already
    initialised in this process, `RAY_ADDRESS`, or a new local one."""
    num_workers: int = 2
    """Actors in the pool; each loads the model once."""
    num_gpus_per_worker: float = 0.0
    """GPUs each actor reserves (0: CPU actors)."""
    num_cpus_per_worker: float = 1.0
    """CPUs each actor reserves."""
    batch_size: int = 16
    """Trajectories (credit: trajectories or tasks, see `trajlake.distributed.credit`) per model
    call."""
    commit_every: int = 8
    """Batches the driver gathers before it commits them (one lake snapshot per commit)."""
    max_restarts: int = 3
    """Times Ray recreates a dead actor; its unfinished batches are retried on the new one
    (`max_task_retries` is set to the same number)."""

    def __post_init__(self) -> None:
        for name in ("num_workers", "batch_size", "commit_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_gpus_per_worker < 0 or self.num_cpus_per_worker < 0:
            raise ValueError("num_gpus_per_worker and num_cpus_per_worker must be >= 0")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")


def import_ray() -> ModuleType:
    """The `ray` module with Ray Data (MissingExtra naming `trajlake[ray]` when absent)."""
    try:
        import ray
        import ray.data  # the extra is `ray[data]`: fail here, not mid-job
    except ImportError as e:
        raise missing_extra("ray[data]", "ray") from e
    return ray


@contextlib.contextmanager
def ray_session(options: RayOptions) -> Iterator[ModuleType]:
    """Ray, connected for the duration of a job; a local cluster started here is shut down."""
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if options.address is not None:
            kwargs["address"] = options.address
        try:
            ray.init(**kwargs)
        except ConnectionError as e:
            raise TrajlakeError(
                f"cannot reach the Ray cluster at {options.address or 'RAY_ADDRESS'}: {e}; "
                "start one with `ray start --head` or pass --address"
            ) from e
        started = True
    _quiet_ray_data(ray)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _quiet_ray_data(ray: ModuleType) -> None:
    # The library never prints: Ray Data's progress bars write to the terminal.
    with warnings.catch_warnings():
        # Creating the context warns about Ray's own deprecated defaults, not about ours.
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False


def keep_off_gpus() -> None:
    """In a CPU actor: hide the node's GPUs, so a model loaded with its default device (cuda
    when torch sees one) stays on the CPU Ray reserved for it. Call before torch is used."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def worker_location(lake: LakeStore) -> tuple[str, dict[str, str]]:
    """Where workers open the lake: its resolved root URI and storage options.

    A local lake (`memory://` lakes are local temporary directories) is readable only by
    workers on this machine or on a filesystem every node mounts at the same path.
    """
    location = lake.location
    if location.is_local:
        log.debug("workers read the local lake at %s (this machine or a shared mount)", lake.uri)
    return location.uri, dict(location.storage_options)
