"""Lake commands: init, log, tag, tags, validate, maintain, and schema (which needs no lake).

These act on the lake as storage (its snapshot log, tags and files), not on its data. `validate`
exits 1 on problems so scripts and CI can gate on it; `schema` prints the record schemas from
`trajlake.schema` without opening anything, for users writing producers.
"""

from __future__ import annotations

import click

from trajlake.cli.options import LakeSpec, at_option, lake_options, make_output, output_option
from trajlake.cli.output import dumps, tags_by_snapshot
from trajlake.schema import TABLES, json_schema_documents, table_schema

SCHEMA_NAMES = (*TABLES, "canonical")


@click.command()
@lake_options
@output_option()
def init(lake: LakeSpec, output: str) -> None:
    """Create a new, empty lake at --lake (snapshot 0)."""
    make_output(output).lake_created(lake.init())


@click.command("log")
@lake_options
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Newest snapshots to show (0: all).",
)
@output_option()
def log_cmd(lake: LakeSpec, limit: int, output: str) -> None:
    """List snapshots, newest first: id, time, operation, rows added and tags."""
    opened = lake.open()
    snapshots = opened.snapshots()[::-1]
    if limit:
        snapshots = snapshots[:limit]
    make_output(output).snapshots(snapshots, tags_by_snapshot(opened.tags()))


@click.command()
@click.argument("name")
@lake_options
@at_option
@click.option("--note", default="", help="Why this snapshot matters (stored with the tag).")
@output_option()
def tag(name: str, lake: LakeSpec, at: str | None, note: str, output: str) -> None:
    """Name a snapshot (default: the latest) NAME; tags are immutable and keep its data readable."""
    make_output(output).tag_created(lake.open().tag(name, at=at, note=note))


@click.command()
@lake_options
@output_option()
def tags(lake: LakeSpec, output: str) -> None:
    """List tags and the snapshots they name."""
    make_output(output).tags(lake.open().tags())


@click.command()
@lake_options
@output_option()
@click.pass_context
def validate(ctx: click.Context, lake: LakeSpec, output: str) -> None:
    """Check that every snapshot's tables load and their files exist (exit 1 on problems)."""
    report = lake.open().validate()
    make_output(output).validation(report)
    if not report.ok:
        ctx.exit(1)


@click.command()
@lake_options
@click.option("--dry-run", is_flag=True, help="Report what would be done; change nothing.")
@output_option()
def maintain(lake: LakeSpec, dry_run: bool, output: str) -> None:
    """Compact small files, checkpoint, expire old log entries and vacuum (tags are kept)."""
    make_output(output).maintenance(lake.open().maintain(dry_run=dry_run))


@click.command()
@click.option(
    "--table",
    "-t",
    type=click.Choice(SCHEMA_NAMES),
    default=None,
    help="One table (or 'canonical', the JSONL line); default: all.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "arrow"]),
    default="json",
    show_default=True,
    help="JSON Schema of the rows, or the Arrow schema of the tables.",
)
def schema(table: str | None, fmt: str) -> None:
    """Print the record schemas (no lake needed)."""
    if fmt == "json":
        docs = json_schema_documents()
        click.echo(dumps(docs[table] if table else docs))
        return
    if table == "canonical":
        raise ValueError(
            "the canonical JSONL line has no Arrow schema: it is stored as the "
            "trajectories and messages tables (use --format json)"
        )
    for i, name in enumerate([table] if table else TABLES):
        if i:
            click.echo()
        click.echo(f"# {name}")
        click.echo(str(table_schema(name)))
