"""The viewer's data: every endpoint's payload, computed from a lake pinned at a snapshot.

`ViewData.answer(endpoint, params)` is the one entry point, used by the HTTP server and the
bundle writer alike, so a bundle's files hold exactly what the server answers. Each call pins
`at` (a tag or snapshot number; default the viewer's own `at`, else the latest) and reads
through the lake's read-only query sessions. Per-snapshot work (run tables, counts, facets) is
cached: a snapshot never changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from trajlake.errors import NoSuchSnapshot, TrajlakeError
from trajlake.lake import LakeStore, Snapshot, Tag
from trajlake.query import QuerySession, open_session, selected_ids_sql
from trajlake.view._candidates import candidates
from trajlake.view._credit import credit
from trajlake.view._lake_page import credit_runs, lake_page, score_models
from trajlake.view._params import Params, ViewRequestError, choice, jsonable, required, text
from trajlake.view._runs import GROUP_KEYS, RUNS_SQL, Filters, RunsIndex, bad_where, parse_filters
from trajlake.view._transcript import transcript

Mode = Literal["server", "bundle"]
ENDPOINTS = ("meta", "runs", "groups", "trajectory", "credit", "candidates", "tasks", "lake")
QUERY_TIMEOUT_S = 60.0
"""Longest a request's lake query may run (a `where` that scans every message, say)."""
_COUNTED = ("trajectories", "messages", "credits", "scores", "models", "labels")


@dataclass(frozen=True)
class Pin:
    """The snapshot a request reads: the ref it was asked by (tag name or number) and its id."""

    ref: str | None
    snapshot: Snapshot


class ViewData:
    """Endpoint payloads over one lake (thread-safe: requests run in worker threads)."""

    def __init__(self, store: LakeStore, *, at: str | None = None, mode: Mode = "server") -> None:
        self.store, self.mode = store, mode
        self.default_at = at
        self._snapshots: dict[int, Snapshot] = {}
        self._meta: dict[int, dict[str, Any]] = {}
        self._mutex = threading.Lock()
        self.runs_index = RunsIndex(self._read_runs, self._read_ids)
        self.pin(None)  # a bad --at fails at start, not at the first request

    def close(self) -> None:
        """Free the cached run tables."""
        self.runs_index.close()

    # ----------------------------------------------------------------------------- snapshots

    def pin(self, at: str | None) -> Pin:
        """Resolve `at` (None: the viewer's default, else the latest), or a 404 naming `at`."""
        ref = at if at is not None else self.default_at
        try:
            snapshot = self.store.snapshot(ref)
        except (NoSuchSnapshot, ValueError, TypeError) as e:
            raise ViewRequestError(
                f"no snapshot or tag {ref!r}: {e}", status=404, field="at"
            ) from e
        return Pin(None if ref is None or ref == "latest" else str(ref), snapshot)

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot, oldest first (log entries are immutable: each is read once)."""
        latest = self.store.snapshot().snapshot_id
        with self._mutex:
            missing = [i for i in range(latest + 1) if i not in self._snapshots]
        if missing:
            found = {s.snapshot_id: s for s in self.store.snapshots() if s.snapshot_id in missing}
            with self._mutex:
                self._snapshots.update(found)
        with self._mutex:
            return [self._snapshots[i] for i in sorted(self._snapshots) if i <= latest]

    def tags(self) -> list[Tag]:
        """Every tag, by snapshot then name."""
        return self.store.tags()

    def _tag_pairs(self) -> list[tuple[str, int]]:
        return [(t.name, t.snapshot_id) for t in self.tags()]

    def _tag_snapshot(self, name: str) -> int:
        for tag in self.tags():
            if tag.name == name:
                return tag.snapshot_id
        raise ViewRequestError(f"no tag {name!r}", field="tag")

    def session(self, pin: Pin) -> QuerySession:
        """A read-only query session at the pinned snapshot (close it)."""
        return open_session(self.store, pin.snapshot.snapshot_id, timeout=QUERY_TIMEOUT_S)

    def _read_runs(self, snapshot: int) -> pa.Table:
        with open_session(self.store, snapshot, timeout=QUERY_TIMEOUT_S) as session:
            return session.sql(RUNS_SQL).to_arrow()

    def _read_ids(self, snapshot: int, where: str | None) -> pa.Table:
        with open_session(self.store, snapshot, timeout=QUERY_TIMEOUT_S) as session:
            try:
                return session.sql(selected_ids_sql(where)).to_arrow()
            except TrajlakeError as e:
                if where is None:
                    raise
                raise bad_where(e) from e

    # ----------------------------------------------------------------------------- endpoints

    def answer(self, endpoint: str, params: Params) -> dict[str, Any]:
        """The payload of `GET /api/<endpoint>?<params>` (ViewRequestError for 400/404)."""
        handler: Callable[[Pin, Params], dict[str, Any]] | None = getattr(
            self, f"_api_{endpoint}", None
        )
        if endpoint not in ENDPOINTS or handler is None:
            raise ViewRequestError(f"no endpoint /api/{endpoint}", status=404)
        return handler(self.pin(text(params, "at")), params)

    def filters(self, params: Params) -> Filters:
        """The runs filters of `params` (a 400 naming a bad one)."""
        return parse_filters(params, self._tag_snapshot)

    def _api_meta(self, pin: Pin, params: Params) -> dict[str, Any]:
        snapshot = pin.snapshot.snapshot_id
        snapshots, tags = self.snapshots(), self.tags()
        refs: list[dict[str, Any]] = [
            {"ref": t.name, "snapshot": t.snapshot_id, "kind": "tag", "created_at": t.created_at}
            for t in tags
        ]
        refs += [
            {
                "ref": str(s.snapshot_id),
                "snapshot": s.snapshot_id,
                "kind": "snapshot",
                "created_at": s.timestamp,
                "operation": s.operation,
            }
            for s in reversed(snapshots)
        ]
        return {
            "mode": self.mode,
            "lake": self.store.uri,
            "read_only": True,
            "at": {"ref": pin.ref, "snapshot": snapshot},
            "latest_snapshot": snapshots[-1].snapshot_id if snapshots else snapshot,
            "refs": refs,
            **self._snapshot_meta(pin),
        }

    def _snapshot_meta(self, pin: Pin) -> dict[str, Any]:
        """Counts, facets, credit runs and score models of a snapshot (cached)."""
        snapshot = pin.snapshot.snapshot_id
        with self._mutex:
            found = self._meta.get(snapshot)
        if found is not None:
            return found
        with self.session(pin) as session:
            counts = {
                table: int(session.sql(f"SELECT count(*) FROM {table}").rows()[0][0])
                for table in _COUNTED
            }
            runs = [
                {k: r[k] for k in ("run_name", "estimator", "n_trajectories", "n_turns")}
                for r in credit_runs(session)
            ]
            models = score_models(session)
        meta = jsonable(
            {
                "counts": counts,
                "facets": self.runs_index.facets(snapshot, self._tag_pairs()),
                "credit_runs": runs,
                "score_models": models,
            }
        )
        with self._mutex:
            self._meta[snapshot] = meta
            while len(self._meta) > 16:
                self._meta.pop(next(iter(self._meta)))
        return meta  # type: ignore[no-any-return]

    def _api_runs(self, pin: Pin, params: Params) -> dict[str, Any]:
        return self.runs_index.page(pin.snapshot.snapshot_id, self.filters(params), params)

    def _api_groups(self, pin: Pin, params: Params) -> dict[str, Any]:
        by = choice(params, "by", GROUP_KEYS, "harness")
        assert by is not None
        filters = self.filters(params)
        return self.runs_index.groups(pin.snapshot.snapshot_id, filters, by, self._tag_pairs())

    def _api_tasks(self, pin: Pin, params: Params) -> dict[str, Any]:
        return self.runs_index.tasks(pin.snapshot.snapshot_id, self.filters(params), params)

    def _api_trajectory(self, pin: Pin, params: Params) -> dict[str, Any]:
        trajectory_id = required(params, "id")
        runs = self.runs_index.rows_where(pin.snapshot.snapshot_id, "trajectory_id", trajectory_id)
        with self.session(pin) as session:
            return transcript(session, trajectory_id, runs[0] if runs else None)

    def _api_credit(self, pin: Pin, params: Params) -> dict[str, Any]:
        trajectory_id, run = required(params, "id"), required(params, "run")
        with self.session(pin) as session:
            return credit(session, trajectory_id, run)

    def _api_candidates(self, pin: Pin, params: Params) -> dict[str, Any]:
        task_id = required(params, "task_id")
        with self.session(pin) as session:
            runs = self.runs_index.rows_where(pin.snapshot.snapshot_id, "task_id", task_id)
            return candidates(session, task_id, text(params, "model_id"), runs)

    def _api_lake(self, pin: Pin, params: Params) -> dict[str, Any]:
        with self.session(pin) as session:
            return lake_page(self.store, session, self.snapshots(), self.tags())
