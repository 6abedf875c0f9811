"""The one `--where` contract: a SQL predicate over the `trajectories` table.

Every command and API that takes `where` (credit, export, value training, scoring) applies it
the same way: as a condition on `trajectories` (aliased `t`, so `harness = 'x'` and
`t.harness = 'x'` both work), turned into a set of trajectory ids. Applying it inside a join
instead would make unqualified names ambiguous as soon as another table of the join has the
same column (`task_id` is in `trajectories` and in `outcomes`).
"""

from __future__ import annotations

__all__ = ["selected_ids_sql", "where_ids"]


def selected_ids_sql(where: str | None) -> str:
    """`SELECT trajectory_id` of the trajectories matching `where` (all when None/empty)."""
    condition = f"WHERE ({where})" if where and where.strip() else ""
    return f"SELECT t.trajectory_id FROM trajectories t {condition}".rstrip()


def where_ids(where: str | None, column: str = "trajectory_id") -> str:
    """A predicate keeping the rows whose `column` is a trajectory id matching `where`
    (`TRUE` when there is no condition), to put in any query's WHERE."""
    if not where or not where.strip():
        return "TRUE"
    return f"{column} IN ({selected_ids_sql(where)})"
