"""The `credit-eval` command: compare a stored credit run with a ground-truth file."""

from __future__ import annotations

import click

from trajlake.cli.options import LakeSpec, at_option, lake_options, output_option
from trajlake.cli.output import dumps
from trajlake.credit.evaluate import evaluate_credit


@click.command("credit-eval")
@click.argument("run_name")
@click.option(
    "--truth",
    "truth",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Truth JSONL (one line per trajectory: trajectory_id, values, credits), as written "
    "by trajlake.synth's SynthBatch.write_truth.",
)
@lake_options
@at_option
@click.option(
    "--eps",
    type=float,
    default=0.05,
    show_default=True,
    help="A turn is productive when its credit is ≥ eps (the truth: c* ≥ eps).",
)
@click.option("--thread", default="main", show_default=True, help="Thread of the run.")
@click.option(
    "--signal",
    type=click.Choice(["credit", "advantage"]),
    default="credit",
    show_default=True,
    help="Column compared with the true credit: TD credit, or the stored advantage (GAE λ).",
)
@output_option()
def credit_eval(
    run_name: str,
    truth: str,
    lake: LakeSpec,
    at: str | None,
    eps: float,
    thread: str,
    signal: str,
    output: str,
) -> None:
    """Evaluate credit run RUN_NAME against true per-turn values and credits.

    Reports Spearman's ρ of credit vs true credit (pooled over turns and mean within
    trajectories), of value_before vs the true V*(s_t), and precision / recall / F1 of
    productive-turn detection (credit ≥ eps vs true credit ≥ eps).
    """
    result = evaluate_credit(
        lake.open(),
        run_name,
        truth,
        at=at,
        eps=eps,
        thread=thread,
        signal="advantage" if signal == "advantage" else "credit",
    )
    if output == "json":
        click.echo(dumps(result.to_dict()))
        return
    for key, value in result.to_dict().items():
        shown = "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else value
        click.echo(f"{key:<22} {shown}")
