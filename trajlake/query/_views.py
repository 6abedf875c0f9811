"""The views a lake query sees, built once per snapshot in the lake's DuckDB database.

Each snapshot gets a schema `snap_<id>` holding a view per table — `read_parquet` over the
exact files of the pinned Delta versions — plus the derived views; sessions are cursors that
`USE` that schema, so a query pays for the views only the first time a snapshot is read.
Views are added lazily, table by table, as queries name them. Object-store lakes scan Arrow
datasets registered per session instead (registrations do not cross connections).

A catalog holds only DuckDB state: the store it lists files of is passed to each call rather
than kept, so that `_database` can key its per-store cache weakly by the store.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import duckdb

from trajlake.query._limits import QueryLimits, apply_limits, sql_literal
from trajlake.schema import TABLES, table_schema

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, Snapshot


def outcomes_sql(source: str | None = None) -> str:
    """The `outcomes` view's query; with `source`, only labels of that source count and the
    rollout's own result is not used (a value model trained on one verifier's judgement).

    A label matched by trajectory id beats one matched by task + run id; among those the newest
    wins; without a label, the rollout's recorded result (unless `source` is given).
    """
    only = "" if source is None else f" AND l.source = {sql_literal(source)}"
    own = "t.resolved, t.reward, t.outcome_source" if source is None else "NULL, NULL, NULL"
    fallback = own.split(", ")
    return f"""
        WITH matched AS (
            SELECT t.trajectory_id, l.resolved, l.reward, l.source, l.created_at, l.label_id,
                   0 AS priority
            FROM trajectories t JOIN labels l ON l.trajectory_id = t.trajectory_id{only}
            UNION ALL
            SELECT t.trajectory_id, l.resolved, l.reward, l.source, l.created_at, l.label_id,
                   1 AS priority
            FROM trajectories t JOIN labels l
              ON l.trajectory_id IS NULL AND l.task_id = t.task_id AND l.run_id = t.run_id{only}
        ), best AS (
            SELECT * FROM matched
            QUALIFY row_number() OVER (PARTITION BY trajectory_id
                ORDER BY priority, created_at DESC NULLS LAST, label_id DESC) = 1
        )
        SELECT t.trajectory_id, t.task_id, t.run_id, t.generation,
               coalesce(b.resolved, {fallback[0]}) AS resolved,
               coalesce(b.reward, {fallback[1]}) AS reward,
               CASE WHEN b.trajectory_id IS NOT NULL THEN 'label:' || b.source
                    ELSE {fallback[2]} END AS outcome_source
        FROM trajectories t LEFT JOIN best b ON b.trajectory_id = t.trajectory_id
    """


SHELL_TOOLS = ("bash", "Bash", "execute_bash", "shell", "exec_command", "bash_command")
"""Tool names whose calls run a shell command: their `tool` is the command's first word."""

_FIRST_WORD = r"^\s*(?:cd\s+[^;&|]+?\s*&&\s*)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*([^\s;|&()<>]+)"
"""The program a shell command runs: past a leading `cd DIR &&` and env assignments."""

TOOL_CALLS_SQL = f"""
    WITH calls AS (
        SELECT trajectory_id, thread, idx, turn, timestamp AS called_at, attrs AS call_attrs,
               unnest(tool_calls) AS tc, unnest(generate_series(1, len(tool_calls))) AS call_pos
        FROM messages WHERE tool_calls IS NOT NULL AND len(tool_calls) > 0
    ), results AS (
        SELECT trajectory_id, thread, idx AS result_idx, tool_call_id, content, is_error,
               exit_code, timestamp AS answered_at, attrs AS result_attrs
        FROM messages WHERE tool_call_id IS NOT NULL AND role <> 'assistant'
    ), paired AS (
        SELECT c.*, r.* EXCLUDE (trajectory_id, thread, tool_call_id)
        FROM calls c LEFT JOIN results r
          ON r.trajectory_id = c.trajectory_id AND r.thread = c.thread
         AND r.tool_call_id = c.tc.id AND r.result_idx > c.idx
        QUALIFY row_number() OVER (PARTITION BY c.trajectory_id, c.thread, c.idx, c.call_pos
                                   ORDER BY r.result_idx NULLS LAST) = 1
    ), commands AS (
        SELECT *, CASE
            WHEN tc.name NOT IN ({", ".join(repr(t) for t in SHELL_TOOLS)}) THEN NULL
            WHEN NOT coalesce(json_valid(tc.arguments), false) THEN NULL  -- raw-text arguments
            -- Codex passes argv: `["bash", "-lc", "<script>"]` runs the script.
            WHEN json_type(tc.arguments, '$.command') = 'ARRAY' THEN
                CASE WHEN json_extract_string(tc.arguments, '$.command[1]') IN ('-lc', '-c')
                     THEN json_extract_string(tc.arguments, '$.command[2]')
                     ELSE json_extract_string(tc.arguments, '$.command[0]') END
            ELSE coalesce(json_extract_string(tc.arguments, '$.command'),
                          json_extract_string(tc.arguments, '$.cmd'),
                          json_extract_string(tc.arguments, '$.keystrokes'))
        END AS shell_command
        FROM paired
    )
    SELECT trajectory_id, thread, idx, turn, tc.id AS call_id, tc.name AS tool_name,
           coalesce(nullif(regexp_extract(regexp_extract(shell_command, '{_FIRST_WORD}', 1),
                                          '([^/]+)$', 1), ''),
                    tc.name) AS tool,
           tc.arguments AS arguments, tc.type AS call_type,
           result_idx, content AS result,
           CASE WHEN result_idx IS NULL THEN NULL
                ELSE coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0 END AS is_error,
           exit_code,
           coalesce(
               TRY_CAST(json_extract(result_attrs, '$.duration_ms') AS DOUBLE),
               TRY_CAST(json_extract(result_attrs, '$.tool_use_result.durationMs') AS DOUBLE),
               1000 * TRY_CAST(json_extract(call_attrs, '$.execution_time') AS DOUBLE),
               CASE WHEN answered_at >= called_at
                    THEN (epoch_us(answered_at) - epoch_us(called_at)) / 1000.0 END
           ) AS duration_ms
    FROM commands
"""
"""The `tool_calls` view: each call paired with its result — the first later message of the
thread (tool message, or a text-action agent's `user` observation) whose `tool_call_id` is the
call's id. `tool` is the harness's tool name, except for shell tools (`SHELL_TOOLS`), where it
is the program the command runs (`ls`, `python`, `sed`: past `cd DIR &&` and env assignments,
path dropped), so "which tools fail most" means the same across harnesses. `is_error`: the
result says so or its exit code is non-zero (NULL without a result). `duration_ms`: the
result's recorded duration (`attrs.duration_ms`, Claude Code's `durationMs`), else SWE-agent's
`execution_time`, else the time from the call's message to its result when both are stamped."""

_KEEP_SCHEMAS = 16
"""Snapshots whose views stay built; older ones are dropped and rebuilt on demand."""

DERIVED_VIEWS: dict[str, str] = {
    # One row per tool call with what came back: see `TOOL_CALLS_SQL`.
    "tool_calls": TOOL_CALLS_SQL,
    # Effective outcome: a label matched by trajectory id beats one matched by task + run,
    # which beats what the rollout recorded itself; among labels the newest wins.
    "outcomes": outcomes_sql(),
    # One rollout stored under several ids: the same conversation (content hash), or the same
    # rollout read from two formats (a shared `attrs.rollout_key`, e.g. Harbor's ATIF file and
    # the native session it was converted from).
    "duplicates": """
        SELECT content_hash, count(*) AS copies,
               list(trajectory_id ORDER BY trajectory_id) AS trajectory_ids,
               'content' AS kind, content_hash AS key
        FROM trajectories WHERE content_hash IS NOT NULL
        GROUP BY content_hash HAVING count(*) > 1
        UNION ALL
        SELECT NULL, count(*), list(trajectory_id ORDER BY trajectory_id), 'rollout_key', key
        FROM (SELECT trajectory_id, json_extract_string(attrs, '$.rollout_key') AS key
              FROM trajectories)
        WHERE key IS NOT NULL GROUP BY key HAVING count(*) > 1
    """,
    # One row per agent turn: the action (content + tool calls) and whether what came back
    # reported an error (credit assignment works on these).
    "turns": """
    WITH actions AS (
        SELECT trajectory_id, thread, turn, content, tool_calls, completion_tokens
        FROM messages WHERE role = 'assistant' AND turn IS NOT NULL
    ), observations AS (
        SELECT trajectory_id, thread, turn,
               bool_or(coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0) AS is_error
        FROM messages WHERE role <> 'assistant' AND turn IS NOT NULL
        GROUP BY trajectory_id, thread, turn
    )
    SELECT a.trajectory_id, a.thread, a.turn,
           concat_ws(chr(10),
               nullif(a.content, ''),
               nullif(array_to_string(list_transform(a.tool_calls,
                   lambda c: c.name || '(' || coalesce(c.arguments, '') || ')'), chr(10)), '')
           ) AS action_text,
           coalesce(list_transform(a.tool_calls, lambda c: c.name), []) AS tool_names,
           coalesce(o.is_error, false) AS is_error,
           a.completion_tokens AS tokens
    FROM actions a LEFT JOIN observations o
      ON o.trajectory_id = a.trajectory_id AND o.thread = a.thread AND o.turn = a.turn
""",
}


VIEW_TABLES: dict[str, set[str]] = {
    "tool_calls": {"messages"},
    "outcomes": {"trajectories", "labels"},
    "duplicates": {"trajectories"},
    "turns": {"messages"},
}
"""Tables each derived view reads."""


def views_named_in(query: str) -> set[str]:
    """Lake views a query mentions (a superset is harmless: it only costs a file listing)."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query.lower()))
    return words & (set(TABLES) | set(DERIVED_VIEWS))


def sandboxed_database(
    lake_root: str | None, limits: QueryLimits | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database that can read only the lake's folder, runs under `limits`
    (default: `QueryLimits.default()`) and cannot be reconfigured (local lakes; object-store
    tables are scanned through Arrow datasets)."""
    db = duckdb.connect()
    apply_limits(db, lake_root, limits or QueryLimits.default())
    if lake_root is not None:
        db.execute(f"SET allowed_directories=[{sql_literal(lake_root.rstrip('/') + '/')}]")
    db.execute("SET enable_external_access=false")
    db.execute("SET lock_configuration=true")
    return db


def needed_tables(views: set[str]) -> set[str]:
    """Tables behind a set of view names (derived views read others)."""
    derived = views.intersection(DERIVED_VIEWS)
    return views.intersection(TABLES).union(*(VIEW_TABLES[v] for v in derived))


def _table_source(lake: LakeStore, table: str, version: int) -> str | None:
    """`read_parquet([...])` over the pinned files, or None for an empty table."""
    files = [f.removeprefix("file://") for f in lake.tables_store.files(table, version)]
    if not files:
        return None
    return "read_parquet([" + ", ".join(sql_literal(f) for f in files) + "])"


class ViewCatalog:
    """Per-snapshot view schemas in one lake's sandboxed database (local lakes)."""

    def __init__(self, db: duckdb.DuckDBPyConnection) -> None:
        self._db = db
        self._built: OrderedDict[int, set[str]] = OrderedDict()
        self._mutex = threading.Lock()
        self._files_epoch: int | None = None

    def schema_for(self, lake: LakeStore, snapshot: Snapshot, views: set[str]) -> str:
        """The schema holding (at least) `views` of `lake` at `snapshot`; builds what is missing."""
        schema = f"snap_{snapshot.snapshot_id}"
        with self._mutex:
            if lake.files_epoch != self._files_epoch:
                # A vacuum may have deleted files the built views name: start over.
                self._drop_all()
                self._files_epoch = lake.files_epoch
            built = self._built.get(snapshot.snapshot_id)
            if built is None:
                self._db.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                built = self._built[snapshot.snapshot_id] = set()
            self._built.move_to_end(snapshot.snapshot_id)
            for table in sorted(needed_tables(views) - built):
                self._add_table(lake, schema, table, snapshot.tables[table])
                built.add(table)
            for name in sorted(views.intersection(DERIVED_VIEWS) - built):
                cursor = self._db.cursor()
                cursor.execute(f"USE {schema}")
                cursor.execute(f"CREATE VIEW {name} AS {DERIVED_VIEWS[name]}")
                cursor.close()
                built.add(name)
            self._evict()
        return schema

    def reset(self) -> None:
        """Drop every built schema (after a vacuum may have deleted files they name)."""
        with self._mutex:
            self._drop_all()

    def _drop_all(self) -> None:
        for snapshot_id in self._built:
            self._db.execute(f"DROP SCHEMA IF EXISTS snap_{snapshot_id} CASCADE")
        self._built.clear()

    def _add_table(self, lake: LakeStore, schema: str, table: str, version: int) -> None:
        source = _table_source(lake, table, version)
        if source is None:
            self._db.from_arrow(table_schema(table).empty_table()).create(f"{schema}.{table}")
        else:
            self._db.execute(f"CREATE VIEW {schema}.{table} AS SELECT * FROM {source}")

    def _evict(self) -> None:
        while len(self._built) > _KEEP_SCHEMAS:
            old, _ = self._built.popitem(last=False)
            self._db.execute(f"DROP SCHEMA IF EXISTS snap_{old} CASCADE")


def register_arrow_views(
    lake: LakeStore, snapshot: Snapshot, connection: duckdb.DuckDBPyConnection, views: set[str]
) -> list[Any]:
    """Temporary views over delta-rs Arrow datasets on one connection (object stores)."""
    sources = []
    for table in sorted(needed_tables(views)):
        version = snapshot.tables[table]
        source = lake.tables_store.at_version(table, version).to_pyarrow_dataset()
        sources.append(source)
        connection.register(f"__arrow_{table}", source)
        connection.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM __arrow_{table}")
    for name in sorted(views.intersection(DERIVED_VIEWS)):
        connection.execute(f"CREATE TEMP VIEW {name} AS {DERIVED_VIEWS[name]}")
    return sources
