"""`trajlake demo`: the main job on the embedded default — the generation loop on the synthetic
environment in a fresh local lake (`trajlake.loop`). The lake tour is `trajlake.tour`."""

from __future__ import annotations

import os

from trajlake._progress import Progress
from trajlake.loop import LoopReport, run_loop

DEFAULT_LAKE = "trajlake-demo"

__all__ = ["DEFAULT_LAKE", "LoopReport", "run_demo"]


def run_demo(
    lake_path: str | os.PathLike[str] = DEFAULT_LAKE,
    *,
    quick: bool = False,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    value_model: str = "auto",
) -> LoopReport:
    """Run the generation loop in a new local lake (see `trajlake.loop.run_loop`)."""
    return run_loop(
        lake_path, quick=quick, seed=seed, out=out, progress=progress, value_model=value_model
    )
