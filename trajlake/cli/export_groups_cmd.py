"""`trajlake export groups`: BAR-balanced rollout groups with GRPO/RLOO advantages + manifest.

`trajlake.export.groups` is imported inside the command: listing commands imports this module.
The exporter's `ValueError`s are about the combination of flags given, so they surface as
click usage errors.
"""

from __future__ import annotations

from typing import cast

import click

from trajlake.cli.options import (
    LakeSpec,
    at_option,
    lake_options,
    output_option,
    shard_size_option,
    split_options,
    where_option,
)
from trajlake.cli.output import emit_report
from trajlake.cli.progress import progress_for

_SHARE = click.FloatRange(0.0, 1.0)


@click.command("groups")
@click.argument("out", metavar="OUT")
@lake_options
@at_option
@where_option("stage = 'rl' AND generation = 3")
@click.option(
    "--size", type=click.IntRange(min=1), default=8, show_default=True, help="Rollouts per group."
)
@click.option(
    "--max-rollouts",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Rollouts of a task considered (its first ones in ingest order).",
)
@click.option(
    "--rho-min", type=_SHARE, default=0.375, show_default=True, help="Lowest share of successes."
)
@click.option(
    "--rho-max", type=_SHARE, default=0.625, show_default=True, help="Highest share of successes."
)
@click.option(
    "--rho-target",
    type=_SHARE,
    default=None,
    help="Preferred share of successes [default: middle of the band].",
)
@click.option(
    "--relaxed",
    is_flag=True,
    help="When no group fits the band, take any N rollouts of the task (band [0, 1]).",
)
@click.option(
    "--no-backfill",
    "no_backfill",
    is_flag=True,
    help="Leave aborted rollouts (status error/timeout) out instead of ranking them last.",
)
@click.option(
    "--group-by",
    type=click.Choice(["task", "group"]),
    default="task",
    show_default=True,
    help="task: one group per task_id; group: per group_id (rollouts sampled together).",
)
@click.option(
    "--reward",
    "reward",
    type=click.Choice(["signed", "binary", "scalar"]),
    default="signed",
    show_default=True,
    help="Outcome → reward: signed (resolved +1, else −1), binary (1/0), scalar (stored reward).",
)
@click.option(
    "--grpo-eps", type=click.FloatRange(min=0.0), default=1e-4, show_default=True, help="GRPO ε."
)
@click.option(
    "--grpo-ddof",
    type=click.IntRange(0, 1),
    default=0,
    show_default=True,
    help="Std of the GRPO advantage: 0 population, 1 sample (as TRL's GRPOTrainer).",
)
@split_options("groups (by their task)")
@shard_size_option("Start a new shard after about this many MB (groups are never split).")
@output_option()
def groups(
    out: str,
    lake: LakeSpec,
    at: str | None,
    where: str | None,
    size: int,
    max_rollouts: int,
    rho_min: float,
    rho_max: float,
    rho_target: float | None,
    relaxed: bool,
    no_backfill: bool,
    group_by: str,
    reward: str,
    grpo_eps: float,
    grpo_ddof: int,
    val_frac: float,
    seed: int,
    shard_mb: float,
    output: str,
) -> None:
    """Write rollout groups for RL or listwise reranking to the folder OUT (a path or URL).

    Per task, Orchard's Balanced Adaptive Rollout keeps SIZE rollouts with a balanced share
    of successes (default 3–5 of 8, ideally 4, among the first 16); each row carries its
    reward, GRPO and RLOO advantages and conversation. Tasks without a group are counted by
    reason in manifest.json. Reruns on the same snapshot write byte-identical files.
    """
    from trajlake.export.groups import GroupBy, RewardMapping, export_groups

    try:
        report = export_groups(
            lake.open(),
            out,
            at=at,
            where=where,
            size=size,
            max_rollouts=max_rollouts,
            rho_min=rho_min,
            rho_max=rho_max,
            rho_target=rho_target,
            relaxed=relaxed,
            backfill_aborted=not no_backfill,
            group_by=cast(GroupBy, group_by),
            reward=cast(RewardMapping, reward),
            grpo_eps=grpo_eps,
            grpo_ddof=grpo_ddof,
            val_frac=val_frac,
            seed=seed,
            shard_mb=shard_mb,
            progress=progress_for("items"),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    emit_report(report, output)
