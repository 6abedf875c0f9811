"""`trajlake demo`: the generation loop on the synthetic environment; `trajlake tour`: the quick
tour of a lake with the bundled sample rollouts.

Both run through the public library paths (`trajlake.demo`, `trajlake.loop`, `trajlake.tour`), so
they show what a user's own scripts would do; this module only prints their reports.
"""

from __future__ import annotations

import click

from trajlake.cli.options import make_output, output_option
from trajlake.cli.output import dumps
from trajlake.cli.progress import progress_for
from trajlake.demo import DEFAULT_LAKE, run_demo
from trajlake.loop import VALUE_MODELS, choose_value_model, parse_seeds, run_seeds, seeds_table
from trajlake.tour import DEFAULT_TOUR_LAKE, run_tour


def _parse_seeds(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        seeds = parse_seeds(value)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from e
    if len(seeds) < 2:
        raise click.BadParameter(
            f"{value!r} is one seed; an interval over seeds needs two or more (one run: --seed)",
            ctx,
            param,
        )
    return seeds


def _demo_seeds(
    lake: str, quick: bool, seeds: list[int], out: str | None, output: str, value_model: str
) -> None:
    report = run_seeds(
        lake,
        seeds,
        quick=quick,
        out=out,
        progress=progress_for("items"),
        value_model=value_model,
    )
    if output == "json":
        click.echo(dumps(report.to_dict()))
        return
    kind = "quick runs" if report.quick else "default runs"
    click.echo(f"{len(seeds)} {kind} in {report.root} ({report.seconds:.0f} s)")
    click.echo(seeds_table(report))
    click.echo(
        "CI: Student-t 95% interval over seeds; gain: (policy − rejection sampling) per seed, "
        "the same tasks and rollouts"
    )


@click.command()
@click.option(
    "--lake",
    default=DEFAULT_LAKE,
    show_default=True,
    metavar="PATH",
    help="A new local lake directory for the loop (it must not hold trajectories yet).",
)
@click.option("--quick", is_flag=True, help="A smaller run: well under a minute on 2 CPU cores.")
@click.option("--seed", default=0, show_default=True, help="Seed of tasks, rollouts and outcomes.")
@click.option(
    "--seeds",
    default=None,
    metavar="LIST",
    callback=_parse_seeds,
    help="Run the loop once per seed (e.g. 0-9 or 0,2,5), each in a new lake <lake>/seed-<n>, "
    "and report every policy's held-out success over seeds: mean, 95% CI and the gain over "
    "rejection sampling paired by seed (summary in <lake>/seeds-report.json).",
)
@click.option(
    "--out",
    default=None,
    metavar="DIR",
    help="Folder for the report, plots, data and SFT exports (default: <lake>/demo-report).",
)
@click.option(
    "--value-model",
    type=click.Choice(VALUE_MODELS),
    default="auto",
    show_default=True,
    help="The value model to train: auto is the hybrid sparse text model, the best CPU recipe "
    "on held-out tasks (numpy only); transformer needs the train extra; baseline is the "
    "feature baseline.",
)
@output_option()
@click.pass_context
def demo(
    ctx: click.Context,
    lake: str,
    quick: bool,
    seed: int,
    seeds: list[int] | None,
    out: str | None,
    value_model: str,
    output: str,
) -> None:
    """Run the generation loop end to end on the synthetic environment.

    gen-0 rollouts → ingest → label → tag gen-0 → credit → SFT export → behaviour cloning and a
    value model (the hybrid sparse text model by default) → gen-1 on held-out
    tasks with best-of-N → ingest with lineage → tag gen-1;
    then success per generation and method (SQL over the lake), the policy comparison table
    and PNG plots. With --seeds, the loop once per seed and the tables over seeds.
    """
    seed_given = ctx.get_parameter_source("seed") is not click.core.ParameterSource.DEFAULT
    if seeds is not None and seed_given:
        raise click.UsageError("give --seed (one run) or --seeds (several), not both")
    if output != "json":  # said first: the run takes a minute, and its numbers are this model's
        click.echo(choose_value_model(value_model).describe())
    if seeds is not None:
        _demo_seeds(lake, quick, seeds, out, output, value_model)
        return
    progress = progress_for("items")
    report = run_demo(
        lake, quick=quick, seed=seed, out=out, progress=progress, value_model=value_model
    )
    if output == "json":
        click.echo(dumps(report.to_dict()))
        return
    from trajlake.cli.text_output import TextOutput

    TextOutput().loop_report(report)


@click.command()
@click.option(
    "--lake",
    default=DEFAULT_TOUR_LAKE,
    show_default=True,
    metavar="PATH",
    help="Where the tour's lake lives (created if missing; re-running adds nothing).",
)
@output_option()
def tour(lake: str, output: str) -> None:
    """Ingest the bundled sample rollouts, tag them, query them, time-travel, maintain."""
    make_output(output).tour_report(run_tour(lake))
