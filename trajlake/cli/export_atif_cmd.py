"""`trajlake export atif`: trajectories as Harbor ATIF files (a member of the `export` group).

`trajlake.export.atif` is imported inside the command, not at the top: `trajlake --help` imports
every command module to list it, and only a run of this command should pay for the exporter.
"""

from __future__ import annotations

import click

from trajlake.cli.options import (
    LakeSpec,
    at_option,
    lake_options,
    make_output,
    output_option,
    where_option,
)
from trajlake.cli.progress import progress_for


@click.command("atif")
@click.argument("out", metavar="OUT")
@lake_options
@at_option
@where_option()
@output_option()
def atif(out: str, lake: LakeSpec, at: str | None, where: str | None, output: str) -> None:
    """Write Harbor ATIF v1.6 to OUT: a directory of <trajectory_id>.json files (ids unsafe as
    file names get an escaped name with a hash; manifest.jsonl maps each file to its id), or,
    when OUT ends in .jsonl (.gz/.zst compress), one ATIF object per line. OUT may not lie
    inside the lake.

    Fields ATIF has no place for (task, outcome, attrs) travel under extra.trajlake, so the
    files ingest back (`trajlake ingest --format atif`) as the same trajectories.
    """
    from trajlake.export.atif import export_atif

    report = export_atif(lake.open(), out, at=at, where=where, progress=progress_for("items"))
    make_output(output).export(report)
