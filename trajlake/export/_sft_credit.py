"""Where an SFT export reads its credit run, and whether the run saw the exported trajectories.

A tag pins trajectories; a credit run computed after the tag exists only in later snapshots.
The export reads trajectories at its own snapshot and the run's rows at the snapshot holding
them: its own when the run is visible there, else the snapshot the run was committed in. Each
credit row records the snapshot the run read (`source_snapshot`), so the export checks,
trajectory by trajectory, that the run read the content it exports (same `content_hash`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajlake.errors import NoSuchCreditRun, SftSelfCheckFailed
from trajlake.query import sql

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

_INPUT_TABLES = ("trajectories", "messages")
"""Tables whose versions fix a trajectory's content: equal versions need no hash comparison."""


@dataclass(frozen=True)
class CreditSource:
    """A credit run as an export reads it."""

    run: str
    snapshot: int
    """Snapshot the run's rows are read at (the export's own when the run is visible there)."""
    input_snapshots: tuple[int, ...]
    """Snapshots the run read its trajectories from (`credits.source_snapshot`)."""
    estimator: str
    params: dict[str, Any]


def _runs_at(lake: LakeStore, snapshot: int) -> list[str]:
    rows = sql(lake, "SELECT DISTINCT run_name FROM credits ORDER BY run_name", at=snapshot)
    return [str(r["run_name"]) for r in rows.to_dicts()]


def _committed_in(lake: LakeStore, run: str) -> int | None:
    """The newest snapshot whose commit wrote credit run `run` (None: no such commit)."""
    for snap in reversed(lake.snapshots()):
        if snap.operation == "credit" and snap.summary.get("run_name") == run:
            return snap.snapshot_id
    return None


def resolve_credit(lake: LakeStore, run: str, snapshot: int) -> CreditSource:
    """The snapshot to read run `run` at, for an export of snapshot `snapshot`.

    Raises:
        NoSuchCreditRun: The run is neither at `snapshot` nor in any later commit.
    """
    where = snapshot
    if run not in _runs_at(lake, snapshot):
        committed = _committed_in(lake, run)
        head = lake.snapshot().snapshot_id
        where = committed if committed is not None else head
        if where < snapshot or run not in _runs_at(lake, where):
            names = sorted(set(_runs_at(lake, snapshot)) | set(_runs_at(lake, head)))
            available = ", ".join(names) if names else "none (compute one with `trajlake credit`)"
            raise NoSuchCreditRun(
                f"no credit run named {run!r} at snapshot {snapshot} or after it; "
                f"available: {available}"
            )
    rows = sql(
        lake,
        "SELECT DISTINCT source_snapshot, estimator, params FROM credits WHERE run_name = ? "
        "ORDER BY source_snapshot",
        [run],
        at=where,
    ).to_dicts()
    inputs = tuple(int(r["source_snapshot"]) for r in rows if r["source_snapshot"] is not None)
    params = json.loads(rows[0]["params"]) if rows and rows[0]["params"] else {}
    estimator = str(rows[0]["estimator"]) if rows else ""
    return CreditSource(run, where, inputs, estimator, params)


_FLAGS = (
    ("gamma", "--gamma"),
    ("lam", "--lam"),
    ("n_step", "--n-step"),
    ("mask", "--mask"),
    ("eps", "--eps"),
    ("beta", "--beta"),
    ("w_max", "--w-max"),
    ("where", "--where"),
)


def recompute_command(source: CreditSource, at: str) -> str:
    """The `trajlake credit` command that computes the same run on snapshot `at`."""
    parts = ["trajlake", "credit", "--lake", "LAKE", "--at", at]
    parts += ["--estimator", source.estimator]
    for key, flag in _FLAGS:
        value = source.params.get(key)
        if value is not None:
            parts += [flag, str(value)]
    parts += ["--name", f"{source.run}-{at}"]
    return shlex.join(parts)


def _content_hashes(lake: LakeStore, ids: list[str], snapshot: int) -> dict[str, str | None]:
    rows = sql(
        lake,
        "SELECT trajectory_id, content_hash FROM trajectories "
        "WHERE trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
        [ids],
        at=snapshot,
    ).rows()
    return {str(tid): digest for tid, digest in rows}


def _same_input(lake: LakeStore, a: int, b: int) -> bool:
    ta, tb = lake.snapshot(a).tables, lake.snapshot(b).tables
    return all(ta.get(t) == tb.get(t) for t in _INPUT_TABLES)


def check_run_saw(
    lake: LakeStore,
    source: CreditSource,
    snapshot: int,
    at_label: str,
    objs: list[dict[str, Any]],
) -> None:
    """Raise unless run `source` read the same content as the export's trajectories `objs`.

    Trajectories the run has no rows for are not checked here (the export leaves them out and
    counts them). Rows without a recorded source snapshot (older lakes) are trusted only when
    the run is visible at the export's own snapshot.
    """
    if not objs:
        return
    fix = (
        f"compute the run on the exported snapshot: `{recompute_command(source, at_label)}`, "
        f"then export with `--credit {source.run}-{at_label}`"
    )
    ids = [o["trajectory_id"] for o in objs]
    pairs = sql(
        lake,
        "SELECT DISTINCT trajectory_id, source_snapshot FROM credits WHERE run_name = ? "
        "AND trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
        [source.run, ids],
        at=source.snapshot,
    ).rows()
    by_input: dict[int | None, list[str]] = {}
    for tid, snap in pairs:
        by_input.setdefault(None if snap is None else int(snap), []).append(str(tid))
    exported = {o["trajectory_id"]: o.get("content_hash") for o in objs}
    for snap, tids in sorted(by_input.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if snap is None:
            if source.snapshot == snapshot:
                continue
            raise SftSelfCheckFailed(
                f"credit run {source.run!r} exists only after snapshot {snapshot} and its rows "
                f"do not record the snapshot they were computed from (e.g. {tids[0]!r}), so "
                f"they cannot be checked against it; {fix}"
            )
        if _same_input(lake, snap, snapshot):
            continue
        seen = _content_hashes(lake, tids, snap)
        differ = sorted(t for t in tids if seen.get(t) != exported.get(t))
        if differ:
            raise SftSelfCheckFailed(
                f"credit run {source.run!r} was computed from snapshot {snap}, where "
                f"{len(differ)} of the exported trajectories have other content than at "
                f"{at_label} (e.g. {', '.join(repr(t) for t in differ[:3])}); {fix}"
            )
