"""The runs table: filtering, sorting, paging, grouping and task lists of a snapshot's rollouts.

Each snapshot's run rows (trajectory metadata joined with the effective outcome and whether a
value model scored it) are read from the lake once and kept as a table of a private in-memory
DuckDB database, so a page of 100,000 trajectories is a sort over a few columns, not a scan of
the lake. User SQL (`where`) never runs there: it runs in the lake's read-only query session,
whose matching ids are joined in; every other filter is a bound parameter.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from trajlake.view._params import Params, ViewRequestError, choice, integer, jsonable, text

ROW_KEYS = (
    "trajectory_id",
    "task_id",
    "harness",
    "policy_model",
    "generation",
    "run_id",
    "status",
    "exit_reason",
    "resolved",
    "reward",
    "outcome_source",
    "n_turns",
    "n_messages",
    "n_tool_calls",
    "total_tokens",
    "cost_usd",
    "started_at",
    "is_subagent",
    "n_redactions",
)
"""The keys of a runs row (the contract), in order; each is also a sort key."""

EXTRA_KEYS = ("attempt", "stage")
"""Row keys beyond the contract."""

GROUP_KEYS = ("harness", "policy_model", "generation", "run_id", "task_id", "tag")
QUICK_FILTERS = ("harness", "policy_model", "run_id", "task_id")
"""Filters that match a column exactly (bound as parameters)."""

MAX_LIMIT = 500
_KEEP_SNAPSHOTS = 4
"""Snapshots whose run tables stay in memory (each ~100 bytes per trajectory)."""

RUNS_SQL = """
    SELECT t.trajectory_id, t.task_id, t.harness, t.policy_model, t.generation, t.run_id,
           t.status, t.exit_reason, o.resolved, o.reward, o.outcome_source, t.n_turns,
           t.n_messages, t.n_tool_calls, t.total_tokens, t.cost_usd, t.started_at,
           t.is_subagent, t.n_redactions, t.attempt, t.stage,
           s.trajectory_id IS NOT NULL AS scored
    FROM trajectories t
    LEFT JOIN outcomes o ON o.trajectory_id = t.trajectory_id
    LEFT JOIN (SELECT DISTINCT trajectory_id FROM scores WHERE turn IS NULL) s
      ON s.trajectory_id = t.trajectory_id
"""
"""One run row per trajectory of a snapshot (read through the lake's query session)."""

IdsReader = Callable[[int, str | None], pa.Table]
"""(snapshot id, where) → a table of `trajectory_id`s: all of the snapshot's when where is None."""


@dataclass(frozen=True)
class Filters:
    """The runs filters of one request (the contract's query parameters)."""

    where: str | None
    equal: dict[str, str]
    generation: int | None
    tag_snapshot: int | None
    resolved: str | None
    q: str | None


def parse_filters(params: Params, tag_snapshot: Callable[[str], int]) -> Filters:
    """The filters in `params`; `tag_snapshot` resolves a tag name (raising a 400 naming `tag`)."""
    equal = {name: value for name in QUICK_FILTERS if (value := text(params, name)) is not None}
    generation = None
    if text(params, "generation") is not None:
        generation = integer(params, "generation", 0, low=-(2**62))
    tag = text(params, "tag")
    return Filters(
        where=text(params, "where"),
        equal=equal,
        generation=generation,
        tag_snapshot=None if tag is None else tag_snapshot(tag),
        resolved=choice(params, "resolved", ("true", "false", "unknown"), None),
        q=text(params, "q"),
    )


class RunsIndex:
    """Per-snapshot run tables in a private DuckDB database, and the queries over them."""

    def __init__(self, read_runs: Callable[[int], pa.Table], read_ids: IdsReader) -> None:
        self._read_runs, self._read_ids = read_runs, read_ids
        self._db = duckdb.connect()
        # Only tables built here are read: nothing outside the process is reachable.
        self._db.execute("SET enable_external_access=false")
        self._db.execute("SET lock_configuration=true")
        self._built: OrderedDict[int, None] = OrderedDict()
        self._tags: set[int] = set()
        self._where: OrderedDict[tuple[int, str], pa.Table] = OrderedDict()
        self._mutex = threading.Lock()

    def close(self) -> None:
        """Close the private database."""
        self._db.close()

    # ----------------------------------------------------------------------------- tables

    def _runs_table(self, snapshot: int) -> str:
        with self._mutex:
            if snapshot not in self._built:
                self._db.from_arrow(self._read_runs(snapshot)).create(f"runs_{snapshot}")
                self._built[snapshot] = None
                while len(self._built) > _KEEP_SNAPSHOTS:
                    old, _ = self._built.popitem(last=False)
                    self._db.execute(f"DROP TABLE IF EXISTS runs_{old}")
            self._built.move_to_end(snapshot)
        return f"runs_{snapshot}"

    def _tag_table(self, snapshot: int) -> str:
        """The ids present at a tagged snapshot (kept: tags are few and immutable)."""
        with self._mutex:
            if snapshot not in self._tags:
                self._db.from_arrow(self._read_ids(snapshot, None)).create(f"tag_ids_{snapshot}")
                self._tags.add(snapshot)
        return f"tag_ids_{snapshot}"

    def _where_ids(self, snapshot: int, where: str) -> pa.Table:
        key = (snapshot, where)
        with self._mutex:
            found = self._where.get(key)
            if found is not None:
                self._where.move_to_end(key)
                return found
        ids = self._read_ids(snapshot, where)  # outside the lock: it may take a while
        with self._mutex:
            self._where[key] = ids
            while len(self._where) > 32:
                self._where.popitem(last=False)
        return ids

    # ----------------------------------------------------------------------------- queries

    def _filtered(
        self, snapshot: int, filters: Filters
    ) -> tuple[duckdb.DuckDBPyConnection, str, list[Any]]:
        """A cursor, and `SELECT * FROM runs WHERE …` with its parameters."""
        table = self._runs_table(snapshot)
        cursor = self._db.cursor()
        conditions: list[str] = []
        params: list[Any] = []
        for name, value in filters.equal.items():
            conditions.append(f"{name} = ?")
            params.append(value)
        if filters.generation is not None:
            conditions.append("generation = ?")
            params.append(filters.generation)
        if filters.resolved is not None:
            conditions.append(
                {"true": "resolved", "false": "NOT resolved", "unknown": "resolved IS NULL"}[
                    filters.resolved
                ]
            )
        if filters.q is not None:
            conditions.append("(contains(trajectory_id, ?) OR contains(coalesce(task_id, ''), ?))")
            params += [filters.q, filters.q]
        if filters.tag_snapshot is not None:
            tag_table = self._tag_table(filters.tag_snapshot)
            conditions.append(f"trajectory_id IN (SELECT trajectory_id FROM {tag_table})")
        if filters.where is not None:
            cursor.register("where_ids", self._where_ids(snapshot, filters.where))
            conditions.append("trajectory_id IN (SELECT trajectory_id FROM where_ids)")
        condition = " AND ".join(conditions) or "TRUE"
        return cursor, f"SELECT * FROM {table} WHERE {condition}", params

    def page(self, snapshot: int, filters: Filters, params: Params) -> dict[str, Any]:
        """The runs endpoint's payload."""
        started = time.perf_counter()
        keys = (*ROW_KEYS, *EXTRA_KEYS)
        sort = choice(params, "sort", keys, "started_at")
        order = choice(params, "order", ("asc", "desc"), "desc")
        offset = integer(params, "offset", 0)
        limit = integer(params, "limit", 50, low=1, high=MAX_LIMIT)
        cursor, selected, bound = self._filtered(snapshot, filters)
        try:
            # Two queries, not `count(*) OVER ()`: a window over every matching row would
            # materialise them all, where ORDER BY … LIMIT keeps only the top rows.
            count = f"SELECT count(*) FROM ({selected})"
            total = _scalar(cursor, count, bound)
            # The id breaks ties, so pages never overlap or skip rows.
            query = f"""
                SELECT {", ".join(keys)} FROM ({selected})
                ORDER BY {sort} {order} NULLS LAST, trajectory_id {order}
                LIMIT ? OFFSET ?
            """
            table = _arrow(cursor, query, [*bound, limit, offset])
        finally:
            cursor.close()
        rows = table.to_pylist()
        return {
            "total": total,
            "offset": offset,
            "limit": limit,
            "sort": sort,
            "order": order,
            "elapsed_ms": round((time.perf_counter() - started) * 1000.0, 3),
            "rows": jsonable(rows),
        }

    def rows_where(self, snapshot: int, column: str, value: str) -> list[dict[str, Any]]:
        """Run rows (with `scored`) whose `trajectory_id` or `task_id` is `value`, by id."""
        if column not in ("trajectory_id", "task_id"):
            raise ValueError(f"rows are looked up by trajectory_id or task_id, not {column!r}")
        table = self._runs_table(snapshot)
        with self._db.cursor() as cursor:
            query = f"SELECT * FROM {table} WHERE {column} = ? ORDER BY trajectory_id"
            rows: list[dict[str, Any]] = _arrow(cursor, query, [value]).to_pylist()
        return rows

    def all_rows(self, snapshot: int, filters: Filters, limit: int | None) -> list[dict[str, Any]]:
        """Every matching row (newest first), at most `limit`: the bundle's runs."""
        cursor, selected, bound = self._filtered(snapshot, filters)
        keys = ", ".join((*ROW_KEYS, *EXTRA_KEYS))
        query = f"SELECT {keys} FROM ({selected}) ORDER BY started_at DESC NULLS LAST, "
        query += "trajectory_id DESC" + ("" if limit is None else f" LIMIT {int(limit)}")
        try:
            rows: list[dict[str, Any]] = _arrow(cursor, query, bound).to_pylist()
        finally:
            cursor.close()
        return jsonable(rows)  # type: ignore[no-any-return]

    def groups(
        self, snapshot: int, filters: Filters, by: str, tags: list[tuple[str, int]]
    ) -> dict[str, Any]:
        """The groups endpoint's payload; `tags` are (name, snapshot) for grouping by tag."""
        cursor, selected, bound = self._filtered(snapshot, filters)
        counts = (
            "count(*) AS n, count(*) FILTER (WHERE resolved) AS n_resolved, "
            "count(resolved) AS n_labelled"
        )
        try:
            if by == "tag":
                rows = []
                for name, tag_snapshot in tags:
                    tag_table = self._tag_table(tag_snapshot)
                    query = f"""SELECT ? AS key, {counts} FROM ({selected})
                                WHERE trajectory_id IN (SELECT trajectory_id FROM {tag_table})"""
                    table = _arrow(cursor, query, [name, *bound])
                    rows += [r for r in table.to_pylist() if r["n"]]
            else:
                query = f"SELECT {by} AS key, {counts} FROM ({selected}) GROUP BY {by} "
                query += "ORDER BY n DESC, key NULLS LAST"
                rows = _arrow(cursor, query, bound).to_pylist()
        finally:
            cursor.close()
        for row in rows:
            labelled = row["n_labelled"]
            row["success_rate"] = row["n_resolved"] / labelled if labelled else None
        return {"by": by, "rows": jsonable(rows)}

    def tasks(self, snapshot: int, filters: Filters, params: Params) -> dict[str, Any]:
        """The tasks endpoint's payload: tasks with at least one matching trajectory."""
        offset = integer(params, "offset", 0)
        limit = integer(params, "limit", 50, low=1, high=MAX_LIMIT)
        cursor, selected, bound = self._filtered(snapshot, filters)
        query = f"""
            SELECT task_id, count(*) AS n, count(*) FILTER (WHERE resolved) AS n_resolved,
                   count(*) FILTER (WHERE scored) AS n_scored, count(*) OVER () AS _total
            FROM ({selected}) WHERE task_id IS NOT NULL
            GROUP BY task_id ORDER BY task_id LIMIT ? OFFSET ?
        """
        try:
            table = _arrow(cursor, query, [*bound, limit, offset])
            if table.num_rows:
                total = int(table.column("_total")[0].as_py())
            else:
                count = f"SELECT count(DISTINCT task_id) FROM ({selected})"
                total = _scalar(cursor, count, bound)
        finally:
            cursor.close()
        rows = table.drop_columns(["_total"]).to_pylist()
        return {"total": total, "offset": offset, "limit": limit, "rows": jsonable(rows)}

    def facets(self, snapshot: int, tags: list[tuple[str, int]]) -> dict[str, list[Any]]:
        """Distinct values and counts of the quick-filter columns (and of tags)."""
        table = self._runs_table(snapshot)
        out: dict[str, list[Any]] = {}
        with self._db.cursor() as cursor:
            for column in ("harness", "policy_model", "generation", "run_id"):
                query = f"""SELECT {column} AS value, count(*) AS n FROM {table}
                            WHERE {column} IS NOT NULL GROUP BY 1 ORDER BY n DESC, value"""
                out[column] = _arrow(cursor, query).to_pylist()
            out["tag"] = []
            for name, tag_snapshot in tags:
                tag_table = self._tag_table(tag_snapshot)
                query = f"""SELECT count(*) FROM {table}
                            WHERE trajectory_id IN (SELECT trajectory_id FROM {tag_table})"""
                n = _scalar(cursor, query)
                out["tag"].append({"value": name, "n": n})
        return out


def _arrow(
    cursor: duckdb.DuckDBPyConnection, query: str, params: list[Any] | None = None
) -> pa.Table:
    return cursor.sql(query, params=params).to_arrow_table()


def _scalar(cursor: duckdb.DuckDBPyConnection, query: str, params: list[Any] | None = None) -> int:
    # fetchall, not fetchone: DuckDB refuses the next query while a result is half read.
    return int(cursor.execute(query, params or []).fetchall()[0][0])


def bad_where(error: Exception) -> ViewRequestError:
    """The 400 for a `where` the lake's query session refused."""
    return ViewRequestError(f"where: {error}", field="where")
