"""Data commands: `ingest`, `sql`, `show` and the `export` group (jsonl here; atif, sft and groups
in their own modules, added to the group at the end).

Anything that can refuse the command (an allow-list that does not parse, an `--out` inside the lake)
is checked before the lake is opened or the query runs, so a refused command leaves nothing behind.
"""

from __future__ import annotations

from typing import cast, get_args

import click

from trajlake._names import refuse_inside_lake
from trajlake.cli.export_atif_cmd import atif
from trajlake.cli.export_groups_cmd import groups
from trajlake.cli.export_sft_cmd import sft
from trajlake.cli.options import (
    LakeSpec,
    at_option,
    lake_options,
    make_output,
    output_option,
    redaction_policy_options,
    where_option,
)
from trajlake.cli.progress import progress_for
from trajlake.cli.transcript import with_effective_outcome
from trajlake.ingest import AllowList, format_names, redaction_report
from trajlake.schema import Stage


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@lake_options
@click.option("--create", is_flag=True, help="Create the lake first if there is none at --lake.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *format_names()]),
    default="auto",
    show_default=True,
    help="Source format; auto detects it from each file's content.",
)
@click.option("--generation", type=int, default=None, help="Agent generation to record.")
@click.option(
    "--run-id",
    default=None,
    help="Run / experiment id to record; it becomes part of every id (<id>@RUN), so runs "
    "that reuse rollout ids stay apart.",
)
@click.option("--stage", type=click.Choice(get_args(Stage)), default=None, help="Stage to record.")
@click.option(
    "--strict",
    is_flag=True,
    help="Fail on the first bad record instead of quarantining it, and on a trajectory id "
    "taken by other messages instead of keeping it under a derived id.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Trajectories per commit (bounds memory).",
)
@click.option(
    "--no-redact",
    "no_redact",
    is_flag=True,
    help="Keep secrets as they are (by default API keys, tokens, private keys and passwords "
    "become typed placeholders such as <SECRET:openai_key:1>).",
)
@redaction_policy_options
@click.option(
    "--redact-report",
    is_flag=True,
    help="Print what would be redacted (kind, file, trajectory, masked context) and write "
    "nothing; the lake is not opened.",
)
@click.option(
    "--dedupe-content",
    is_flag=True,
    help="Also skip trajectories whose content hash is already stored (the same rollout "
    "read from two formats); see the `duplicates` view.",
)
@click.option(
    "--labels",
    "labels",
    multiple=True,
    metavar="PATH",
    help="Verifier outputs to attach after ingesting (as `trajlake label`), repeatable.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Parsing processes for big inputs (default: one per core).",
)
@output_option()
def ingest(
    paths: tuple[str, ...],
    lake: LakeSpec,
    create: bool,
    fmt: str,
    generation: int | None,
    run_id: str | None,
    stage: str | None,
    strict: bool,
    batch_size: int,
    no_redact: bool,
    redact_personal: bool,
    allow_list: str | None,
    redact_report: bool,
    dedupe_content: bool,
    labels: tuple[str, ...],
    workers: int | None,
    output: str,
) -> None:
    """Ingest trajectory files: paths, directories, globs or URLs (.gz/.zst too).

    Bad records go to the quarantine table (with file, line and reason) unless --strict;
    records already in the lake are counted as duplicates and not stored twice.
    """
    # Read before the lake is opened (or created): a bad entry must leave nothing behind.
    allowed = AllowList.load(allow_list) if allow_list is not None else None
    if redact_report:
        found = redaction_report(
            list(paths), format=fmt, redact_personal=redact_personal, allow_list=allowed
        )
        make_output(output).redaction_report(found)
        return
    report = lake.open(create=create).ingest(
        list(paths),
        format=fmt,
        generation=generation,
        run_id=run_id,
        stage=cast(Stage | None, stage),
        strict=strict,
        batch_size=batch_size,
        redact=not no_redact,
        redact_personal=redact_personal,
        allow_list=allowed,
        dedupe_content=dedupe_content,
        workers=workers,
        labels=list(labels) or None,
        progress=progress_for("bytes"),
    )
    make_output(output).ingest_report(report)


SQL_TIMEOUT = 300.0
"""`trajlake sql --timeout` default, in seconds: long enough for real work, short of a runaway."""


def _memory_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from trajlake.query import parse_size

    if value is not None:
        try:
            parse_size(value, "--memory-limit")
        except ValueError as e:
            raise click.BadParameter(str(e)) from e
    return value


@click.command()
@click.argument("query")
@lake_options
@at_option
@output_option("text", "json", "csv")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write all rows to this Parquet file instead of printing them.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="Rows shown by --output text (0: all); json and csv print every row.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=SQL_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Stop the query after this long (0: no limit).",
)
@click.option(
    "--memory-limit",
    default=None,
    metavar="SIZE",
    callback=_memory_limit,
    help="Memory DuckDB may use, e.g. 16GB (default: min(4 GiB, half the memory)); past it a "
    "query spills to the lake's private area, or fails.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="DuckDB threads (default: the usable cores, at most 8).",
)
def sql(
    query: str,
    lake: LakeSpec,
    at: str | None,
    output: str,
    out: str | None,
    limit: int,
    timeout: float,
    memory_limit: str | None,
    threads: int | None,
) -> None:
    """Run a read-only SQL QUERY (DuckDB) over the lake's tables at a snapshot.

    Tables: trajectories, messages, calls, labels, credits, scores, models, quarantine;
    views: tool_calls, outcomes. Ctrl-C stops a running query.
    """
    if out is not None:  # before the query runs: a refused --out leaves nothing behind
        refuse_inside_lake(out, lake.uri, what="--out file")
    result = lake.open().sql(
        query, at=at, timeout=timeout or None, memory_limit=memory_limit, threads=threads
    )
    if out is None:
        make_output(output).query_result(result, limit=limit)
        return
    import pyarrow.parquet as pq

    pq.write_table(result.to_arrow(), out)
    make_output(output).query_written(out, len(result))


@click.command()
@click.argument("trajectory_id")
@lake_options
@at_option
@click.option("--full", is_flag=True, help="Do not cut long tool results and arguments.")
@output_option()
def show(trajectory_id: str, lake: LakeSpec, at: str | None, full: bool, output: str) -> None:
    """Show one trajectory as a transcript (json: the canonical record).

    The transcript's outcome is the effective one (the `outcomes` view: a label beats what the
    rollout recorded) with the source that gave it, and the recorded one when they differ.
    """
    opened = lake.open()
    record = opened.trajectory(trajectory_id, at=at)
    if output != "json":  # json stays the stored record, as it ingests back
        record = with_effective_outcome(opened, record, at)
    make_output(output).trajectory(record, full=full)


@click.group("export")
def export_group() -> None:
    """Export trajectories from the lake."""


@export_group.command("jsonl")
@click.argument("out", metavar="OUT")
@lake_options
@at_option
@where_option()
@output_option()
def export_jsonl_cmd(
    out: str, lake: LakeSpec, at: str | None, where: str | None, output: str
) -> None:
    """Write canonical JSONL to OUT (a path or URL; .gz/.zst compress), one trajectory per line.

    The file ingests back losslessly with `trajlake ingest`.
    """
    report = lake.open().export_jsonl(out, at=at, where=where, progress=progress_for("items"))
    make_output(output).export(report)


export_group.add_command(atif)
export_group.add_command(sft)
export_group.add_command(groups)
