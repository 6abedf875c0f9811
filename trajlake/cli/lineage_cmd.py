"""The `lineage` command: generations → snapshots and tags → credit runs → SFT exports → models
→ the rollouts using them.

The graph is built and formatted by `trajlake.lineage` (text, JSON or Graphviz dot); the command
only picks the format, so the same graph is available from Python.
"""

from __future__ import annotations

from typing import cast

import click

from trajlake.cli.options import LakeSpec, at_option, lake_options, output_option
from trajlake.lineage import LineageFormat, format_lineage, lineage


@click.command("lineage")
@lake_options
@at_option
@output_option("text", "json", "dot")
def lineage_cmd(lake: LakeSpec, at: str | None, output: str) -> None:
    """Show how generations, snapshots, tags, credit runs, exports and models connect.

    Each generation's trajectories lead to the snapshots they arrived in and the tags naming
    them, then to the credit runs computed there and the SFT exports written from those runs
    (as recorded in the lake's `exports` table), to the models trained there (or on an export:
    a models row whose config.export_id names it) and the next generation's rollouts that used
    those models (trajectories whose attrs.lineage.value_model_id / policy_model_id or
    policy_model name the model). --output dot prints a Graphviz digraph (pipe it to
    `dot -Tsvg`).
    """
    graph = lineage(lake.open(), at=at)
    click.echo(format_lineage(graph, cast(LineageFormat, output)), nl=False)
