"""The `view` command: serve the read-only web viewer over a lake, or write a static bundle."""

from __future__ import annotations

import webbrowser
from urllib.parse import quote

import click

from trajlake.cli.options import LakeSpec, at_option, lake_options


@click.command("view")
@lake_options
@at_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8765, show_default=True, help="Port (0 picks a free one).")
@click.option(
    "--token",
    default=None,
    envvar="TRAJLAKE_VIEW_TOKEN",
    help="Secret every request must carry (needed to bind beyond loopback; env "
    "TRAJLAKE_VIEW_TOKEN).",
)
@click.option("--open/--no-open", "open_browser", default=False, help="Open the page in a browser.")
@click.option(
    "--bundle",
    "bundle",
    type=click.Path(file_okay=False),
    default=None,
    help="Write a static bundle to DIR (opens from disk, no server) instead of serving.",
)
@click.option("--where", default=None, help="With --bundle: SQL predicate over trajectories.")
@click.option(
    "--limit",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="With --bundle: most trajectories (newest first).",
)
def view(
    lake: LakeSpec,
    at: str | None,
    host: str,
    port: int,
    token: str | None,
    open_browser: bool,
    bundle: str | None,
    where: str | None,
    limit: int,
) -> None:
    """Browse the lake at a snapshot: runs, transcripts with per-turn credit, candidates
    side by side with their scores, and the lake's snapshots, tags and lineage.

    Read-only; binds to loopback unless --host is given, which then needs --token. With
    --bundle DIR, writes the selection (--where, --at, --limit) as static files instead:
    open DIR/index.html from disk.
    """
    from trajlake.view import check_bind, run_view, write_bundle

    if bundle is not None:
        report = write_bundle(lake.open(), bundle, where=where, at=at, limit=limit)
        more = f" (first {limit}; raise --limit for more)" if report.truncated else ""
        click.echo(
            f"wrote {report.trajectories} trajectories{more}, {report.credit_files} credit and "
            f"{report.candidate_files} candidate files ({report.bytes / 1e6:.1f} MB) at snapshot "
            f"{report.snapshot} to {report.directory}; open {report.directory}/index.html"
        )
        return
    if where is not None:
        raise click.UsageError("--where applies to --bundle; the page has its own filter box")
    check_bind(host, token)  # before the lake is opened: a refused bind touches nothing

    def ready(bound_host: str, bound_port: int) -> None:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        url = f"http://{shown}:{bound_port}/" + (f"?token={quote(token)}" if token else "")
        click.echo(f"trajlake view: serving {lake.uri} on {url}  (Ctrl-C to stop)", err=True)
        if open_browser:
            webbrowser.open(url)

    run_view(lake.open(), at=at, host=host, port=port, token=token, ready=ready)
