"""The `label` command: attach verifier outcomes (SWE-bench, sb-cli, Terminal-Bench, CSV/JSONL).

Labels are their own step because verifier outcomes usually arrive after the rollouts are stored;
`ingest --labels` runs the same `attach_labels` when both are at hand. Problems go to stderr so that
`--output json` on stdout stays one parseable document.
"""

from __future__ import annotations

from typing import cast

import click

from trajlake.cli.options import LakeSpec, lake_options, output_option
from trajlake.cli.output import dumps
from trajlake.ingest.labels import LABEL_FORMATS, LabelFormat, attach_labels


@click.command("label")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@lake_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *LABEL_FORMATS]),
    default="auto",
    show_default=True,
    help="Label format; auto detects it from each file's content (in folders: verifier outputs).",
)
@click.option(
    "--run-id",
    default=None,
    metavar="RUN",
    help="Run the labels belong to (default: the run folder a report sits in).",
)
@output_option()
def label(
    paths: tuple[str, ...], lake: LakeSpec, fmt: str, run_id: str | None, output: str
) -> None:
    """Attach verifier outcomes from PATH... (files or folders) to the lake's trajectories.

    Reads SWE-bench results.json / report.json, sb-cli reports, Terminal-Bench results.json
    and CSV/JSONL of trajectory_id or task_id (+ run_id) with resolved and/or reward. Labels
    match by trajectory id, else by task id + run id; query the `outcomes` view for the result.
    Re-labelling with the same files adds nothing.
    """
    report = attach_labels(lake.open(), list(paths), format=cast(LabelFormat, fmt), run_id=run_id)
    if output == "json":
        click.echo(dumps(report.to_dict()))
        return
    click.echo(report.summary())
    for problem in report.problems[:20]:
        click.echo(f"  {problem}", err=True)
