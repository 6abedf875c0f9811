"""`trajlake proxy`: the recording proxy a harness points its model base URL at.

The proxy server (aiohttp) is imported only when the command runs; `ServerLimits` is named here for
typing only. `trajlake serve` reuses `--limit KEY=VALUE` (`LIMIT_HELP`, `parse_limits`): both
servers take the same `ServerLimits`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from trajlake.cli.options import LakeSpec, lake_options, redaction_policy_options

if TYPE_CHECKING:
    from trajlake.proxy.server import ServerLimits

LIMIT_HELP = (
    "A server limit as KEY=VALUE (repeatable): max_body_bytes [64MiB], max_decoded_bytes "
    "[256MiB], header_timeout_s [20], body_idle_s [30], body_timeout_s [300], keepalive_s [75], "
    "max_inflight [1024], max_inflight_body_bytes [1GiB], max_connections [2048], "
    "shutdown_s [10], retry_after_s [1]."
)


def parse_limits(ctx: click.Context, param: Any, values: tuple[str, ...]) -> ServerLimits:
    """The `--limit KEY=VALUE` settings as `ServerLimits` (a click callback)."""
    from trajlake.proxy.server import ServerLimits

    try:
        return ServerLimits.parse(values)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from e


@click.command("proxy")
@lake_options
@click.option(
    "--upstream",
    required=True,
    metavar="URL",
    help="The model server (http://host:8000, or its .../v1 base URL).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8080, show_default=True, help="Port (0 picks a free one).")
@click.option(
    "--token",
    default=None,
    envvar="TRAJLAKE_PROXY_TOKEN",
    help="Clients must send `X-Trajlake-Token: TOKEN` (needed to bind beyond loopback; "
    "env TRAJLAKE_PROXY_TOKEN). Authorization headers go to the upstream untouched.",
)
@click.option("--generation", type=int, default=None, help="Generation of every rollout.")
@click.option(
    "--run-id", default=None, help="Run id of rollouts whose calls send no X-Trajlake-Run."
)
@click.option(
    "--harness", default=None, help="Harness of rollouts whose calls send no X-Trajlake-Harness."
)
@click.option(
    "--spool-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write-ahead spool, replayed on start (default: a per-lake folder under ~/.cache).",
)
@click.option(
    "--timeout", default=600.0, show_default=True, help="Seconds to wait for upstream bytes."
)
@click.option("--batch-size", default=64, show_default=True, help="Most rollouts per commit.")
@click.option(
    "--commit-seconds",
    default=1.0,
    show_default=True,
    help="How long a finished rollout waits for others to share its commit.",
)
@click.option(
    "--fsync",
    is_flag=True,
    help="fsync every spooled call (survives power loss; a killed proxy loses nothing without).",
)
@click.option(
    "--idle-close",
    type=click.FloatRange(min=0),
    default=1800.0,
    show_default=True,
    help="Seconds without a call after which an open rollout is committed with status error "
    "(exit_reason idle_closed); 0 never closes it.",
)
@click.option(
    "--limit", "limits", multiple=True, metavar="KEY=VALUE", callback=parse_limits, help=LIMIT_HELP
)
@redaction_policy_options
def proxy(
    lake: LakeSpec,
    upstream: str,
    host: str,
    port: int,
    token: str | None,
    generation: int | None,
    run_id: str | None,
    harness: str | None,
    spool_dir: Path | None,
    timeout: float,
    batch_size: int,
    commit_seconds: float,
    fsync: bool,
    idle_close: float,
    limits: ServerLimits,
    redact_personal: bool,
    allow_list: str | None,
) -> None:
    """Forward model calls to UPSTREAM unchanged and record every rollout into the lake.

    Point the harness at http://HOST:PORT/rollouts/ROLLOUT_ID/v1 (or send the header
    X-Trajlake-Rollout); tag rollouts with X-Trajlake-Task / -Generation / -Run. When a rollout
    ends, POST /rollouts/ROLLOUT_ID/outcome {resolved, reward, details} and
    POST /rollouts/ROLLOUT_ID/finish {status}: it is then committed (trajectories, messages,
    calls). Runs until Ctrl-C or SIGTERM.
    """
    from trajlake.ingest import AllowList
    from trajlake.proxy.server import default_spool_dir, run_proxy

    allowed = AllowList.load(allow_list) if allow_list is not None else None
    opened = lake.open(create=True)
    spool = spool_dir if spool_dir is not None else default_spool_dir(opened.uri)

    def ready(bound_host: str, bound_port: int) -> None:
        click.echo(
            f"recording proxy on http://{bound_host}:{bound_port} -> {upstream} "
            f"(lake {opened.uri}, spool {spool})",
            err=True,
        )

    run_proxy(
        opened,
        upstream,
        host=host,
        port=port,
        token=token,
        generation=generation,
        run_id=run_id,
        harness=harness,
        spool_dir=spool,
        timeout_s=timeout,
        batch_size=batch_size,
        commit_seconds=commit_seconds,
        fsync=fsync,
        idle_close_s=idle_close,
        redact_personal=redact_personal,
        allow_list=allowed,
        limits=limits,
        ready=ready,
    )
