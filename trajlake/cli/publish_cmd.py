"""`trajlake publish`: a lake snapshot or an export folder as a Hugging Face Hub dataset.

`--lake` is needed for a snapshot, optional with `--from-export` (it adds the sources and
redaction counts to the card), so this command declares it itself instead of `lake_options`.
The publisher's `ValueError`s are about the flags given, so they surface as usage errors.
"""

from __future__ import annotations

import sys

import click

from trajlake.cli.options import (
    LAKE_ENV,
    LakeSpec,
    at_option,
    output_option,
    parse_storage_options,
    shard_size_option,
)
from trajlake.cli.output import emit_report
from trajlake.cli.progress import progress_for


def _split_tables(values: tuple[str, ...]) -> list[str] | None:
    tables = [t.strip() for value in values for t in value.split(",") if t.strip()]
    return tables or None


@click.command("publish")
@click.argument("repo_id", metavar="REPO_ID")
@click.option(
    "--lake",
    envvar=LAKE_ENV,
    default=None,
    metavar="URI",
    help=f"Lake URI (env {LAKE_ENV}); needed unless --from-export.",
)
@click.option(
    "--storage-option",
    "storage_option",
    multiple=True,
    metavar="KEY=VALUE",
    help="Object-store option of the lake, repeatable.",
)
@at_option
@click.option(
    "--where",
    default=None,
    metavar="SQL",
    help="SQL condition on trajectories; every published table follows it.",
)
@click.option(
    "--tables",
    "tables",
    multiple=True,
    metavar="T[,T...]",
    help="Tables to publish, comma-separated or repeated (default: the trajectory tables "
    "holding rows: trajectories, messages, calls, labels, credits, scores).",
)
@click.option(
    "--private/--public",
    default=True,
    show_default=True,
    help="Visibility of a new repo; an existing repo must already have it.",
)
@click.option(
    "--license",
    "license",
    default=None,
    metavar="ID",
    help="Licence id for the card (e.g. apache-2.0, cc-by-4.0, other); required with --public.",
)
@click.option("--pretty-name", default=None, help="Title of the dataset card.")
@click.option(
    "--from-export",
    "from_export",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Publish this SFT or groups export folder (with its manifest.json) instead.",
)
@click.option(
    "--dry-run",
    "dry_run",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Write the dataset folder to DIR and upload nothing (no token needed).",
)
@click.option(
    "--token",
    default=None,
    help="Hub token (default: env HF_TOKEN, then the token of `hf auth login`).",
)
@click.option(
    "--endpoint",
    envvar="HF_ENDPOINT",
    default=None,
    metavar="URL",
    help="Hub URL (env HF_ENDPOINT; default https://huggingface.co).",
)
@shard_size_option("Start a new Parquet shard after about this many MB.")
@output_option()
def publish(
    repo_id: str,
    lake: str | None,
    storage_option: tuple[str, ...],
    at: str | None,
    where: str | None,
    tables: tuple[str, ...],
    private: bool,
    license: str | None,
    pretty_name: str | None,
    from_export: str | None,
    dry_run: str | None,
    token: str | None,
    endpoint: str | None,
    shard_mb: float,
    output: str,
) -> None:
    """Publish a lake snapshot (one Parquet config per table) or an export folder as the
    Hugging Face dataset REPO_ID, with a card holding provenance and each file's sha256.

    Private by default. --dry-run DIR writes the folder (load it with
    `datasets.load_dataset(DIR, TABLE)`) and uploads nothing.
    """
    from trajlake.publish import publish as publish_to_hub

    if lake is None and from_export is None:
        raise click.UsageError(f"--lake (or env {LAKE_ENV}) is required, unless --from-export")
    spec = LakeSpec(lake, parse_storage_options(storage_option)) if lake else None
    try:
        report = publish_to_hub(
            spec.open() if spec else None,
            repo_id,
            at=at,
            where=where,
            tables=_split_tables(tables),
            private=private,
            license=license,
            pretty_name=pretty_name,
            from_export=from_export,
            dry_run=dry_run,
            token=token,
            endpoint=endpoint,
            shard_mb=shard_mb,
            progress=progress_for("items"),
            show_upload_progress=bool(getattr(sys.stderr, "isatty", lambda: False)()),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    emit_report(report, output)
