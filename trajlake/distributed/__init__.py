"""Scoring and credit over a pinned lake snapshot on a Ray cluster (`--engine ray`).

The driver resolves the snapshot, selects the work and commits the results through the lake's
own protocol; Ray Data streams the work through a pool of actors that each load the model once
(GPU actors when asked for). Ray is the optional extra `trajlake[ray]`, imported only when a
job starts. See docs/distributed.md.
"""

from trajlake.distributed.cluster import RayOptions, import_ray, ray_session
from trajlake.distributed.credit import credit_with_ray, unit_of
from trajlake.distributed.pool import BatchDone
from trajlake.distributed.scoring import RayScoreReport, score_with_ray, scored_ids

__all__ = [
    "BatchDone",
    "RayOptions",
    "RayScoreReport",
    "credit_with_ray",
    "import_ray",
    "ray_session",
    "score_with_ray",
    "scored_ids",
    "unit_of",
]
