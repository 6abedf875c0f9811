"""The `credit-eval` command: compare a stored credit run with a ground-truth file.

The truth is what the synthetic environments write (`SynthBatch.write_truth`,
`DebugBatch.write_truth`): this is how a credit source is measured against known per-turn values.
The optional held-out split judges a source that learns from the data only on tasks it did not see.
"""

from __future__ import annotations

from typing import Any

import click

from trajlake.cli.options import LakeSpec, at_option, lake_options, output_option
from trajlake.cli.output import dumps
from trajlake.credit.evaluate import SIGNALS, Signal, evaluate_credit, load_truth, split_tasks


@click.command("credit-eval")
@click.argument("run_name")
@click.option(
    "--truth",
    "truth",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Truth JSONL (one line per trajectory: trajectory_id, task_id, values, credits), as "
    "written by SynthBatch.write_truth or DebugBatch.write_truth.",
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
    type=click.Choice(SIGNALS),
    default="credit",
    show_default=True,
    help="Per-turn score compared with the true credit: TD credit, the stored advantage "
    "(GAE λ), or the outcome broadcast (each turn scored with its trajectory's outcome).",
)
@click.option(
    "--held-out-seed",
    type=int,
    default=None,
    help="Split the truth's task ids with this seed (see --test-fraction) and evaluate on the "
    "held-out tasks only; the split is printed.",
)
@click.option(
    "--test-fraction",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.5,
    show_default=True,
    help="Share of tasks held out by --held-out-seed.",
)
@click.option(
    "--bootstrap",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Task resamples for the 95% intervals of pooled and interior ρ (0: none).",
)
@click.option("--bootstrap-seed", type=int, default=0, show_default=True)
@output_option()
def credit_eval(
    run_name: str,
    truth: str,
    lake: LakeSpec,
    at: str | None,
    eps: float,
    thread: str,
    signal: Signal,
    held_out_seed: int | None,
    test_fraction: float,
    bootstrap: int,
    bootstrap_seed: int,
    output: str,
) -> None:
    """Evaluate credit run RUN_NAME against true per-turn values and credits.

    Reports Spearman's ρ of the signal vs true credit (pooled over turns with a bootstrap
    interval over tasks, without each trajectory's last turn, and mean within trajectories),
    of value_before vs the true V*(s_t), and precision / recall / F1 of productive-turn
    detection (signal ≥ eps vs true credit ≥ eps).
    """
    records = load_truth(truth)
    split = None
    if held_out_seed is not None:
        split = split_tasks(
            (str(r.get("task_id")) for r in records.values() if r.get("task_id")),
            test_fraction=test_fraction,
            seed=held_out_seed,
        )
    result = evaluate_credit(
        lake.open(),
        run_name,
        records,
        at=at,
        eps=eps,
        thread=thread,
        signal=signal,
        tasks=split.test if split else None,
        bootstrap=bootstrap,
        bootstrap_seed=bootstrap_seed,
    )
    data: dict[str, Any] = result.to_dict()
    if output == "json":
        if split:
            data["split"] = split.to_dict()
        click.echo(dumps(data))
        return
    if split:
        click.echo(f"{split.describe()} (evaluated on held-out tasks only)")
    for key, value in data.items():
        shown = "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else value
        click.echo(f"{key:<22} {shown}")
