"""`trajlake otlp-receiver`: receive OpenTelemetry GenAI traces over OTLP/HTTP into the lake.

The receiver (aiohttp, opentelemetry-proto) is imported only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from trajlake.cli.options import LakeSpec, lake_options, redaction_policy_options
from trajlake.cli.proxy_cmd import LIMIT_HELP, parse_limits

if TYPE_CHECKING:
    from trajlake._http_limits import ServerLimits


@click.command("otlp-receiver")
@lake_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port", default=4318, show_default=True, help="Port (4318 is OTLP/HTTP's; 0 picks one)."
)
@click.option(
    "--token",
    default=None,
    envvar="TRAJLAKE_OTLP_TOKEN",
    help="Clients must send `Authorization: Bearer TOKEN` or `X-Trajlake-Token: TOKEN` "
    "(needed to bind beyond loopback; env TRAJLAKE_OTLP_TOKEN).",
)
@click.option(
    "--spool",
    "spool_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write-ahead spool, replayed on start (default: a per-lake folder under ~/.cache).",
)
@click.option("--fsync", is_flag=True, help="fsync every spooled request (survives power loss).")
@click.option(
    "--commit-seconds",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="How long a trace whose root span arrived waits for late spans before its commit.",
)
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Commit a trace whose root span never arrives after this many seconds without spans.",
)
@click.option("--run-id", default=None, help="Run id of every trajectory received.")
@click.option("--generation", type=int, default=None, help="Generation of every trajectory.")
@click.option(
    "--limit", "limits", multiple=True, metavar="KEY=VALUE", callback=parse_limits, help=LIMIT_HELP
)
@redaction_policy_options
def otlp_receiver(
    lake: LakeSpec,
    host: str,
    port: int,
    token: str | None,
    spool_dir: Path | None,
    fsync: bool,
    commit_seconds: float,
    idle: float,
    run_id: str | None,
    generation: int | None,
    limits: ServerLimits,
    redact_personal: bool,
    allow_list: str | None,
) -> None:
    """Receive OTLP/HTTP traces on POST /v1/traces (JSON or protobuf, gzip) into the lake.

    Point an agent's OpenTelemetry exporter at http://HOST:PORT (OTEL_EXPORTER_OTLP_ENDPOINT).
    Each request is spooled before it is answered; a trace is committed (trajectories,
    messages, calls) once its root span has arrived. Runs until Ctrl-C or SIGTERM.
    """
    from trajlake.ingest import IngestOptions
    from trajlake.otlp_receiver import default_spool_dir, run_receiver

    opened = lake.open(create=True)
    spool = spool_dir if spool_dir is not None else default_spool_dir(opened.uri)
    options = IngestOptions(
        run_id=run_id,
        generation=generation,
        redact_personal=redact_personal,
        allow_list=allow_list,
        workers=1,
    )

    def ready(bound_host: str, bound_port: int) -> None:
        click.echo(
            f"otlp receiver on http://{bound_host}:{bound_port}/v1/traces "
            f"(lake {opened.uri}, spool {spool})",
            err=True,
        )

    run_receiver(
        opened,
        host=host,
        port=port,
        token=token,
        spool_dir=spool,
        fsync=fsync,
        commit_seconds=commit_seconds,
        idle_s=idle,
        options=options,
        limits=limits,
        ready=ready,
    )
