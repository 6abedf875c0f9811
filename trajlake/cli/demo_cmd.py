"""`trajlake demo`: the quick tour on a local lake with the bundled sample rollouts."""

from __future__ import annotations

import click

from trajlake.cli.options import output_option
from trajlake.cli.output import make_output
from trajlake.demo import DEFAULT_LAKE, run_demo


@click.command()
@click.option(
    "--lake",
    default=DEFAULT_LAKE,
    show_default=True,
    metavar="PATH",
    help="Where the demo lake lives (created if missing; re-running adds nothing).",
)
@output_option()
def demo(lake: str, output: str) -> None:
    """Ingest the bundled sample rollouts, tag them, query them, time-travel, maintain."""
    make_output(output).demo_report(run_demo(lake))
