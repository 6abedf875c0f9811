"""RL groups export: per task, a BAR-balanced group of rollouts with GRPO and RLOO advantages.

From a pinned snapshot and a `where` selection: every rollout's effective outcome (the
`outcomes` view: a label, else the rollout's own result) becomes a reward, Orchard's Balanced
Adaptive Rollout (`_bar`) keeps per task a group with a balanced share of successes, and each
kept rollout becomes one Parquet row carrying its conversation, so a trainer needs no lake.
Deterministic (same arguments on the same snapshot → byte-identical shards and manifest);
tasks that yield no group are counted by reason in the manifest, never dropped silently.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

import trajlake
from trajlake._names import refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.export._bar import (
    DROP_REASONS,
    BarOptions,
    Candidate,
    GroupChoice,
    grpo_advantages,
    rloo_advantages,
    select_group,
)
from trajlake.export._export_record import prepare_out, record_export, source_snapshot
from trajlake.export._group_rows import GROUP_SCHEMA, group_shards, rollout_row
from trajlake.export._sft_select import Split, split_of
from trajlake.export.jsonl import iter_canonical
from trajlake.query import sql, where_ids

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

RewardMapping = Literal["signed", "binary", "scalar"]
REWARD_MAPPINGS: tuple[str, ...] = get_args(RewardMapping)
GroupBy = Literal["task", "group"]
GROUP_BY: tuple[str, ...] = get_args(GroupBy)
CONSIDERATION_ORDER = "ingested_at, source_uri, source_line, source_offset, trajectory_id"
"""Order in which a task's rollouts are considered (ingest order; nulls last)."""
_READ_CHUNK = 500
_EXAMPLES = 20

_CANDIDATES_SQL = f"""
    WITH response AS (
        SELECT trajectory_id,
               sum(coalesce(length(content), 0) + coalesce(length(reasoning), 0)
                   + coalesce(list_sum(list_transform(tool_calls,
                                                      lambda c: length(coalesce(c.arguments, '')))),
                              0)) AS chars
        FROM messages WHERE role = 'assistant' AND thread = 'main' GROUP BY trajectory_id
    )
    SELECT t.trajectory_id, t.task_id, t.group_id, t.status, t.is_subagent,
           t.completion_tokens, coalesce(r.chars, 0) AS response_chars,
           o.resolved, o.reward
    FROM trajectories t
    LEFT JOIN outcomes o ON o.trajectory_id = t.trajectory_id
    LEFT JOIN response r ON r.trajectory_id = t.trajectory_id
    WHERE {{selected}}
    ORDER BY {", ".join(f"t.{c} NULLS LAST" for c in CONSIDERATION_ORDER.split(", "))}
"""


@dataclass
class GroupCounts:
    """What the selection did: tasks kept and dropped (by reason), rollouts left out (by why)."""

    rollouts_read: int = 0
    rollouts_without_outcome: int = 0
    rollouts_without_key: int = 0
    """Rollouts without a task id (or group id, with `group_by='group'`): no task to join."""
    rollouts_subagent: int = 0
    rollouts_beyond_max: int = 0
    """Rollouts past the first `max_rollouts` of their task, never considered."""
    rollouts_aborted_left_out: int = 0
    """Aborted (error/timeout) rollouts considered but left out (`backfill_aborted` off)."""
    tasks: int = 0
    groups_kept: int = 0
    groups_relaxed: int = 0
    rollouts_kept: int = 0
    rollouts_backfilled: int = 0
    """Aborted rollouts inside kept groups."""
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    dropped_examples: dict[str, list[str]] = field(default_factory=dict)
    """Up to 20 task keys per drop reason."""


@dataclass
class GroupSplit:
    """What one split holds."""

    groups: int = 0
    rollouts: int = 0
    successes: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class GroupsExportReport:
    """What a groups export wrote."""

    path: str
    snapshot_id: int
    manifest: str
    counts: GroupCounts
    splits: dict[str, GroupSplit]
    seconds: float
    export_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "format": "groups",
            "snapshot": self.snapshot_id,
            "manifest": self.manifest,
            "counts": asdict(self.counts),
            "splits": {name: asdict(s) for name, s in self.splits.items()},
            "seconds": round(self.seconds, 3),
            "export_id": self.export_id,
        }

    def summary(self) -> str:
        """One line for people."""
        c = self.counts
        dropped = ", ".join(f"{n} {reason}" for reason, n in c.dropped.items() if n) or "none"
        return (
            f"groups export of snapshot {self.snapshot_id} to {self.path}: {c.groups_kept} "
            f"groups ({c.rollouts_kept} rollouts) from {c.tasks} tasks; dropped: {dropped}"
        )


@dataclass(frozen=True)
class _Task:
    key: str
    task_id: str | None
    candidates: list[Candidate]


def reward_of(resolved: bool | None, reward: float | None, mapping: RewardMapping) -> float | None:
    """The reward a rollout enters BAR with (None: no outcome).

    signed: resolved → +1, unresolved → −1 (Orchard's reward); binary: 1 / 0; without a
    verdict both fall back to the sign of the scalar reward (> 0 is a success). scalar: the
    effective `reward` as stored (a rollout without one has no outcome).
    """
    if mapping == "scalar":
        return None if reward is None else float(reward)
    success = resolved if resolved is not None else (None if reward is None else reward > 0)
    if success is None:
        return None
    if mapping == "signed":
        return 1.0 if success else -1.0
    return 1.0 if success else 0.0


def _tasks(
    lake: LakeStore,
    snapshot: int,
    where: str | None,
    group_by: GroupBy,
    mapping: RewardMapping,
    counts: GroupCounts,
) -> list[_Task]:
    """Every task's candidates, in consideration order; what cannot be a candidate is counted."""
    query = _CANDIDATES_SQL.format(selected=where_ids(where, "t.trajectory_id"))
    rows = sql(lake, query, at=snapshot).to_dicts()
    by_key: dict[str, _Task] = {}
    lengths: dict[str, list[tuple[int | None, int]]] = {}
    for row in rows:
        counts.rollouts_read += 1
        if row["is_subagent"]:
            counts.rollouts_subagent += 1
            continue
        key = row["task_id"] if group_by == "task" else row["group_id"]
        if key is None:
            counts.rollouts_without_key += 1
            continue
        reward = reward_of(row["resolved"], row["reward"], mapping)
        if reward is None:
            counts.rollouts_without_outcome += 1
            continue
        task = by_key.setdefault(key, _Task(key, row["task_id"], []))
        lengths.setdefault(key, []).append((row["completion_tokens"], int(row["response_chars"])))
        order = len(task.candidates)
        task.candidates.append(Candidate(row["trajectory_id"], reward, row["status"], 0.0, order))
    for key, task in by_key.items():
        task.candidates[:] = _with_lengths(task.candidates, lengths[key])
    return [by_key[k] for k in sorted(by_key)]


def _with_lengths(
    candidates: list[Candidate], lengths: list[tuple[int | None, int]]
) -> list[Candidate]:
    """Response length per candidate: completion tokens when every rollout of the task has
    them (one unit within a task), else characters of the assistant turns."""
    tokens = all(t is not None for t, _ in lengths)
    return [
        Candidate(c.trajectory_id, c.reward, c.status, float(t if tokens else ch), c.order)  # type: ignore[arg-type]
        for c, (t, ch) in zip(candidates, lengths, strict=True)
    ]


def _choose(task: _Task, options: BarOptions, counts: GroupCounts) -> GroupChoice:
    counts.tasks += 1
    considered = task.candidates[: options.max_rollouts]
    counts.rollouts_beyond_max += len(task.candidates) - len(considered)
    if not options.backfill_aborted:
        counts.rollouts_aborted_left_out += sum(1 for c in considered if c.aborted)
    choice = select_group(task.candidates, options)
    if choice.dropped is not None:
        counts.dropped[choice.dropped] += 1
        examples = counts.dropped_examples.setdefault(choice.dropped, [])
        if len(examples) < _EXAMPLES:
            examples.append(task.key)
        return choice
    counts.groups_kept += 1
    counts.groups_relaxed += choice.relaxed
    counts.rollouts_kept += len(choice.members)
    counts.rollouts_backfilled += sum(1 for c in choice.members if c.aborted)
    return choice


@dataclass(frozen=True)
class _Kept:
    task: _Task
    choice: GroupChoice
    split: Split


def _row_batches(
    lake: LakeStore, snapshot: int, kept: Sequence[_Kept]
) -> Iterator[list[tuple[_Kept, list[dict[str, Any]]]]]:
    """(group, its members' canonical trajectories) for the kept groups, in output order,
    read a few hundred rollouts at a time."""
    batch: list[_Kept] = []
    size = 0
    for group in [*kept, None]:
        if group is not None:
            batch.append(group)
            size += len(group.choice.members)
            if size < _READ_CHUNK:
                continue
        if not batch:
            break
        ids = [c.trajectory_id for g in batch for c in g.choice.members]
        found = {o["trajectory_id"]: o for o in iter_canonical(lake, at=snapshot, ids=ids)}
        yield [(g, [found[c.trajectory_id] for c in g.choice.members]) for g in batch]
        batch, size = [], 0


def _group_rows(
    group: _Kept, trajectories: list[dict[str, Any]], eps: float, ddof: int
) -> list[dict[str, Any]]:
    """The export rows of one kept group, in consideration order."""
    members = group.choice.members
    rewards = [c.reward for c in members]
    grpo = grpo_advantages(rewards, eps, ddof)
    rloo = rloo_advantages(rewards)
    return [
        rollout_row(
            trajectory,
            member,
            group_id=group.task.key,
            task_id=group.task.task_id,
            position=i,
            rewards=rewards,
            grpo=grpo[i],
            rloo=rloo[i],
            relaxed=group.choice.relaxed,
        )
        for i, (member, trajectory) in enumerate(zip(members, trajectories, strict=True))
    ]


def _manifest_base(lake: LakeStore, snapshot: Any, where: str | None) -> dict[str, Any]:
    snap = snapshot.snapshot_id
    return {
        "format": "groups",
        "lake": lake.uri,
        "snapshot": {
            "id": snap,
            "timestamp": snapshot.timestamp,
            "tags": sorted(t.name for t in lake.tags() if t.snapshot_id == snap),
        },
        "where": where,
        # Keys of the SFT manifest that the `exports` table records; a groups export uses no
        # credit run and no turn mask (the whole rollout carries its advantage).
        "credit_run": None,
        "mask_rule": None,
    }


def export_groups(
    lake: LakeStore,
    out: str,
    *,
    at: Any = None,
    where: str | None = None,
    size: int = 8,
    max_rollouts: int = 16,
    rho_min: float = 0.375,
    rho_max: float = 0.625,
    rho_target: float | None = None,
    relaxed: bool = False,
    backfill_aborted: bool = True,
    group_by: GroupBy = "task",
    reward: RewardMapping = "signed",
    grpo_eps: float = 1e-4,
    grpo_ddof: int = 0,
    val_frac: float = 0.0,
    seed: int = 0,
    shard_mb: float = 100.0,
    progress: Progress | None = None,
) -> GroupsExportReport:
    """Write BAR-selected rollout groups with GRPO/RLOO advantages to the folder `out`.

    Args:
        lake: The lake, read at snapshot `at` (pinned once).
        out: Folder (path or fsspec URL) for `train-NNNNN.parquet`, `val-NNNNN.parquet` and
            `manifest.json`.
        at, where: Snapshot and SQL condition on `trajectories`.
        size, max_rollouts: N rollouts per group, chosen among the task's first N_max.
        rho_min, rho_max, rho_target: Band of the share of successes, and the preferred share
            (default: the band's middle). Defaults: 3–5 successes of 8, ideally 4.
        relaxed: When no group fits the band, take any N rollouts (band [0, 1]).
        backfill_aborted: Let aborted rollouts (status error/timeout) fill a group, ranked
            after the others of their class; off: leave them out (counted).
        group_by: `task` (task_id) or `group` (the lake's group_id: rollouts sampled together).
        reward: How the effective outcome becomes a reward (`reward_of`): signed (+1/−1),
            binary (1/0) or scalar (the stored reward).
        grpo_eps, grpo_ddof: ε and the std's delta degrees of freedom of the GRPO advantage.
        val_frac, seed: Share of groups in `val`, by a seeded hash of the group key.
        shard_mb: Roll to a new shard after about this many MB.
        progress: Receives one unit per task.

    Raises:
        OutputInsideLake: `out` lies inside the lake (checked before anything is written).
    """
    options = BarOptions(
        size, max_rollouts, rho_min, rho_max, rho_target, relaxed, backfill_aborted
    )  # validates the selection options
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
    if reward not in REWARD_MAPPINGS:
        raise ValueError(f"reward must be one of {', '.join(REWARD_MAPPINGS)}, got {reward!r}")
    if grpo_eps < 0 or grpo_ddof not in (0, 1):
        raise ValueError("grpo_eps must be >= 0 and grpo_ddof 0 or 1")
    if shard_mb <= 0:
        raise ValueError(f"shard_mb must be positive, got {shard_mb}")
    split_of("", seed, val_frac)  # validates val_frac
    refuse_inside_lake(out, lake.location.uri, what="groups export folder")
    progress = progress or NullProgress()
    start = time.perf_counter()
    snapshot = source_snapshot(lake, at)
    snap = snapshot.snapshot_id
    counts = GroupCounts()
    progress.start("export groups", None)
    kept: list[_Kept] = []
    for task in _tasks(lake, snap, where, group_by, reward, counts):
        choice = _choose(task, options, counts)
        if choice.dropped is None:
            kept.append(_Kept(task, choice, split_of(task.key, seed, val_frac)))
        progress.advance(1)
    fs, root = prepare_out(out)
    limit = int(shard_mb * 1024 * 1024)
    shards = {s: group_shards(fs, root, s, limit) for s in ("train", "val")}
    splits = {"train": GroupSplit(), "val": GroupSplit()}
    for batch in _row_batches(lake, snap, kept):
        for group, trajectories in batch:
            shards[group.split].write_rows(_group_rows(group, trajectories, grpo_eps, grpo_ddof))
            split = splits[group.split]
            split.groups += 1
            split.rollouts += len(group.choice.members)
            split.successes += sum(1 for c in group.choice.members if c.success)
    for name, shard in shards.items():
        shard.close()
        splits[name].files = shard.files
    progress.finish()
    written = {s: c for s, c in splits.items() if c.groups or s == "train"}
    manifest = {
        **_manifest_base(lake, snapshot, where),
        "selection": {
            "algorithm": "bar",
            "group_by": group_by,
            "size": size,
            "max_rollouts": max_rollouts,
            "rho_min": rho_min,
            "rho_max": rho_max,
            "rho_target": options.target,
            "relaxed": relaxed,
            "backfill_aborted": backfill_aborted,
            "consideration_order": CONSIDERATION_ORDER,
        },
        "reward": {
            "mapping": reward,
            "source": "outcomes view (newest label, else the rollout's own result)",
            "success": "reward > 0",
        },
        "advantages": {"grpo": {"eps": grpo_eps, "ddof": grpo_ddof}, "rloo": {}},
        "columns": GROUP_SCHEMA.names,
        "counts": asdict(counts),
        "val_frac": val_frac,
        "seed": seed,
        "shard_mb": shard_mb,
        "splits": {s: asdict(c) for s, c in written.items()},
        "trajlake_version": trajlake.__version__,
    }
    with fs.open(f"{root}/manifest.json", "wb") as f:
        f.write(
            (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
        )
    export_id = record_export(lake, manifest, out if "://" in out else root)
    seconds = time.perf_counter() - start
    return GroupsExportReport(
        out, snap, f"{root}/manifest.json", counts, written, seconds, export_id
    )


__all__ = [
    "GROUP_BY",
    "GROUP_SCHEMA",
    "REWARD_MAPPINGS",
    "GroupsExportReport",
    "export_groups",
    "reward_of",
]
