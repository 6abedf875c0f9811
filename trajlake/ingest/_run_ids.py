"""Run-scoped trajectory ids: with `--run-id`, every id an adapter derives names its run.

Adapters derive ids from what the source carries (a session id, a rollout id in `metadata`,
an instance id); two runs that reuse those (a harness that numbers its rollouts from 0 every
run) would otherwise collide. `<id>@<run>` keeps them apart, and stays deterministic, so
ingesting the same files under the same run id again adds nothing. Records that carry their
own id (trajlake's canonical JSONL) keep it.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

RUN_SEPARATOR = "@"
EXPLICIT_ID_FORMATS = frozenset({"canonical"})
"""Formats whose records carry their own `trajectory_id`: never scoped."""
# Parent ids are scoped too, so a subagent's rollout still names its session within the run.
_ID_COLUMNS = {
    "trajectories": ("trajectory_id", "parent_trajectory_id"),
    "messages": ("trajectory_id",),
    "calls": ("trajectory_id",),
}


def run_scoped_id(trajectory_id: str, run_id: str) -> str:
    """The id a trajectory is stored under when ingested with `run_id`."""
    suffix = f"{RUN_SEPARATOR}{run_id}"
    return trajectory_id if trajectory_id.endswith(suffix) else trajectory_id + suffix


def scope_ids(tables: Mapping[str, pa.Table], run_id: str) -> dict[str, pa.Table]:
    """The tables with every trajectory id (and parent id) scoped to `run_id`.

    An id that already ends with the run (a re-ingested export of that run) is left as is.
    """
    suffix = f"{RUN_SEPARATOR}{run_id}"
    out = dict(tables)
    for name, columns in _ID_COLUMNS.items():
        data = out.get(name)
        if data is None:
            continue
        for column in columns:
            values = data.column(column)
            scoped = pc.if_else(
                pc.ends_with(values, suffix),
                values,
                pc.binary_join_element_wise(values, pa.scalar(suffix), ""),
            )
            at = data.schema.get_field_index(column)
            data = data.set_column(at, data.schema.field(column), scoped)
        out[name] = data
    return out
