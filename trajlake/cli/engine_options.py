"""`--engine local|ray` and the Ray flags shared by `score` and `credit`.

The flags are parsed into `trajlake.distributed.RayOptions` (which imports no Ray); only the
commands run with `--engine ray` import the distributed package's jobs, and Ray with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from trajlake.distributed import RayOptions

_RAY_FLAGS = ("address", "num_workers", "num_gpus_per_worker", "batch_size", "commit_every")


def engine_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--engine` and the Ray flags; the command receives `engine` and the flags as
    keyword arguments (collect them with `**ray_flags` for `ray_options_of`)."""
    flags = [
        click.option(
            "--engine",
            type=click.Choice(["local", "ray"]),
            default="local",
            show_default=True,
            help="local: this process; ray: an actor pool on a Ray cluster (pip install "
            "'trajlake[ray]'; see docs/distributed.md).",
        ),
        click.option(
            "--address",
            default=None,
            metavar="A",
            help="Ray cluster to join (default: RAY_ADDRESS, else a local Ray started here).",
        ),
        click.option("--num-workers", type=int, default=2, show_default=True, help="Ray actors."),
        click.option(
            "--num-gpus-per-worker",
            type=float,
            default=0.0,
            show_default=True,
            help="GPUs per Ray actor (0: CPU actors).",
        ),
        click.option(
            "--batch-size",
            type=int,
            default=16,
            show_default=True,
            help="Trajectories (credit: work units) per model call on Ray.",
        ),
        click.option(
            "--commit-every",
            type=int,
            default=8,
            show_default=True,
            help="Ray batches per lake commit (a killed job keeps every commit made).",
        ),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


def ray_options_of(engine: str, flags: dict[str, Any]) -> RayOptions | None:
    """RayOptions for `--engine ray`; None for local (UsageError if Ray-only flags were set)."""
    if engine == "local":
        if flags.get("address") is not None or flags.get("num_gpus_per_worker"):
            raise click.UsageError("--address and --num-gpus-per-worker need --engine ray")
        return None
    from trajlake.distributed import RayOptions

    try:
        return RayOptions(**{k: flags[k] for k in _RAY_FLAGS})
    except ValueError as e:
        raise click.UsageError(str(e)) from e
