"""`trajlake export sft`: SFT datasets (openai, trl, sharegpt, axolotl, tokenized) + manifest.

`trajlake.export.sft` (and, for `tokenized`, a tokenizer) is imported inside the command: listing
commands imports this module. The exporter's `ValueError`s are about the combination of flags
given, so they surface as click usage errors.
"""

from __future__ import annotations

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
from trajlake.credit.masks import MASK_RULES
from trajlake.export._sft_formats import SFT_FORMATS
from trajlake.export._sft_select import ACTIONS


@click.command("sft")
@click.argument("out", metavar="OUT")
@lake_options
@at_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SFT_FORMATS),
    required=True,
    help="openai (fine-tuning JSONL), trl (SFTTrainer), sharegpt (LLaMA-Factory), axolotl, "
    "tokenized (input_ids/labels/loss_weight; needs --tokenizer).",
)
@where_option()
@click.option(
    "--credit",
    default=None,
    metavar="RUN_NAME",
    help="Credit run whose weight×mask weights the assistant turns (default: every turn 1.0).",
)
@click.option(
    "--mask",
    type=click.Choice(MASK_RULES),
    default=None,
    help="Mask rule the --credit run must have been computed with (checked, not recomputed).",
)
@click.option(
    "--min-weight",
    type=float,
    default=0.0,
    show_default=True,
    help="Turns weighted below this are not trained.",
)
@click.option("--tokenizer", default=None, metavar="NAME_OR_PATH", help="HF tokenizer (tokenized).")
@click.option(
    "--max-tokens", type=click.IntRange(min=1), default=None, help="Longest sample (tokenized)."
)
@split_options("tasks (never single trajectories)")
@shard_size_option("Start a new shard after about this many MB.")
@click.option(
    "--actions",
    type=click.Choice(ACTIONS),
    default="native",
    show_default=True,
    help="Agents with text actions (mini-swe-agent, SWE-agent text-parsed): native exports the "
    "text they emitted; tool-calls converts actions to tool calls and observations to tool "
    "messages.",
)
@click.option(
    "--require-trained",
    is_flag=True,
    help="Fail when a selected trajectory has no trained turn (default: leave it out, counted "
    "in the manifest).",
)
@click.option(
    "--step-loss-mask/--no-step-loss-mask",
    default=None,
    help="Per-message step_loss_mask (1 = train) on messages (default: on for trl and axolotl, "
    "off for openai and sharegpt).",
)
@click.option("--allow-untrained", is_flag=True, hidden=True, help="Retired: the default now.")
@output_option()
def sft(
    out: str,
    lake: LakeSpec,
    at: str | None,
    fmt: str,
    where: str | None,
    credit: str | None,
    mask: str | None,
    min_weight: float,
    tokenizer: str | None,
    max_tokens: int | None,
    val_frac: float,
    seed: int,
    shard_mb: float,
    actions: str,
    require_trained: bool,
    step_loss_mask: bool | None,
    allow_untrained: bool,
    output: str,
) -> None:
    """Write an SFT dataset to the folder OUT (a path or URL): train/val shards + manifest.json.

    Splits are by task, seeded; reruns with the same arguments on the same snapshot write
    byte-identical files. Trajectories with no trained turn are left out and counted in the
    manifest (--require-trained fails instead); the export fails if weights differ from the
    credit run. A failed export leaves no files; --credit may name a run computed after --at.
    """
    from trajlake.export.sft import export_sft

    if allow_untrained:
        click.echo("--allow-untrained is retired: untrained trajectories are left out and "
                   "counted by default", err=True)  # fmt: skip
    try:
        report = export_sft(
            lake.open(),
            out,
            format=fmt,
            at=at,
            where=where,
            credit=credit,
            mask=mask,
            min_weight=min_weight,
            tokenizer=tokenizer,
            max_tokens=max_tokens,
            val_frac=val_frac,
            seed=seed,
            shard_mb=shard_mb,
            actions=actions,  # type: ignore[arg-type]
            require_trained=require_trained,
            step_loss_mask=step_loss_mask,
            progress=progress_for("items"),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    emit_report(report, output)
