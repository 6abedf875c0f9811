"""`trajlake demo`: the generation loop on the synthetic environment; `trajlake tour`: the quick
tour of a lake with the bundled sample rollouts."""

from __future__ import annotations

import click

from trajlake.cli.options import output_option
from trajlake.cli.output import dumps, make_output
from trajlake.cli.progress import progress_for
from trajlake.demo import DEFAULT_LAKE, run_demo
from trajlake.tour import DEFAULT_TOUR_LAKE, run_tour


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
    "--out",
    default=None,
    metavar="DIR",
    help="Folder for the report, plots, data and SFT exports (default: <lake>/demo-report).",
)
@output_option()
def demo(lake: str, quick: bool, seed: int, out: str | None, output: str) -> None:
    """Run the generation loop end to end on the synthetic environment.

    gen-0 rollouts → ingest → label → tag gen-0 → credit → SFT export → behaviour cloning and a
    tiny value model → gen-1 on held-out tasks with best-of-N → ingest with lineage → tag gen-1;
    then success per generation and method (SQL over the lake), the policy comparison table
    and PNG plots.
    """
    report = run_demo(lake, quick=quick, seed=seed, out=out, progress=progress_for("items"))
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
