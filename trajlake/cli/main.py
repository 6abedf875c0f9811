"""The `trajlake` root command: global options, logging set-up and error handling.

Errors about data, lake state or arguments (TrajlakeError, ValueError, OSError, EOFError) end
the command with one line on stderr and exit code 1; `--verbose` adds the traceback. Ctrl-C
exits with 130. Anything else is a bug and keeps its traceback. EOFError is caught here because
click would otherwise print a bare `Aborted!` for it (it takes it for a closed prompt).
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any

import click
from rich.logging import RichHandler

import trajlake as tl
from trajlake.cli.credit_cmd import credit
from trajlake.cli.credit_eval_cmd import credit_eval
from trajlake.cli.data_cmds import export_group, ingest, show, sql
from trajlake.cli.demo_cmd import demo, tour
from trajlake.cli.label_cmd import label
from trajlake.cli.lake_cmds import init, log_cmd, maintain, schema, tag, tags, validate
from trajlake.cli.lineage_cmd import lineage_cmd
from trajlake.cli.progress import stderr_console
from trajlake.cli.proxy_cmd import proxy
from trajlake.cli.value_cmds import eval_group, rerank, score, serve, train_group

USER_ERRORS: tuple[type[BaseException], ...] = (tl.TrajlakeError, ValueError, OSError, EOFError)
"""What a user can fix: reported in one line, without a traceback."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
EXIT_INTERRUPTED = 130


def one_line(error: BaseException) -> str:
    """The error message on one line (engines such as DuckDB add context lines and carets)."""
    lines = [line.strip() for line in str(error).splitlines()]
    text = " ".join(line for line in lines if line and set(line) != {"^"})
    if isinstance(error, EOFError):  # gzip's and bz2's "ended early" carry no file name
        return f"input ended early ({text or 'EOFError'})"
    return text or type(error).__name__


def configure_logging(level: str) -> logging.Handler:
    """Send trajlake's log records to stderr at `level` (rich on a terminal, plain otherwise)."""
    handler: logging.Handler
    if getattr(sys.stderr, "isatty", lambda: False)():
        handler = RichHandler(console=stderr_console(), show_path=False, show_time=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("trajlake")
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    return handler


def _remove_handler(handler: logging.Handler) -> None:
    logger = logging.getLogger("trajlake")
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


class TrajlakeGroup(click.Group):
    """A group that turns user errors into one stderr line and Ctrl-C into exit code 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except USER_ERRORS as e:
            if ctx.params.get("verbose"):
                click.echo("".join(traceback.format_exception(e)).rstrip(), err=True)
            click.echo(f"error: {one_line(e)}", err=True)
            ctx.exit(1)


@click.group(cls=TrajlakeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(tl.__version__, "--version", "-V", prog_name="trajlake")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="WARNING",
    show_default=True,
    envvar="TRAJLAKE_LOG_LEVEL",
    help="Log records at this level and above go to stderr (env TRAJLAKE_LOG_LEVEL).",
)
@click.option("--verbose", "-v", is_flag=True, help="Show the traceback of errors.")
@click.pass_context
def cli(ctx: click.Context, log_level: str, verbose: bool) -> None:
    """trajlake: agent rollouts as versioned training assets in a lake of Delta tables.

    Every command that works on a lake takes --lake URI (or env TRAJLAKE_LAKE); commands that
    read take --at REF (a snapshot id, tag, ISO timestamp or 'latest').
    """
    handler = configure_logging(log_level)
    ctx.call_on_close(lambda: _remove_handler(handler))


for command in (
    demo,
    tour,
    init,
    ingest,
    label,
    credit,
    credit_eval,
    sql,
    show,
    log_cmd,
    tag,
    tags,
    validate,
    maintain,
    schema,
    lineage_cmd,
    score,
    rerank,
    serve,
    proxy,
):
    cli.add_command(command)
for group in (export_group, train_group, eval_group):
    cli.add_command(group)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="trajlake")
