"""The `trajlake` root command: global options, logging set-up and error handling.

Errors about data, lake state or arguments (TrajlakeError, ValueError, OSError, EOFError) end
the command with one line on stderr and exit code 1; `--verbose` adds the traceback. Ctrl-C
exits with 130. Anything else is a bug and keeps its traceback. EOFError is caught here because
click would otherwise print a bare `Aborted!` for it (it takes it for a closed prompt).
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from typing import Any

import click

import trajlake as tl
from trajlake.errors import TrajlakeError

USER_ERRORS: tuple[type[BaseException], ...] = (TrajlakeError, ValueError, OSError, EOFError)
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
        from rich.logging import RichHandler

        from trajlake.cli.progress import stderr_console

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


# Each command's module is imported when the command runs (or `--help` lists them): a command
# pays only for what it uses, and ingest workers, which re-import the entry script, pay for
# none of the others.
COMMANDS = {
    "demo": ("trajlake.cli.demo_cmd", "demo"),
    "tour": ("trajlake.cli.demo_cmd", "tour"),
    "init": ("trajlake.cli.lake_cmds", "init"),
    "ingest": ("trajlake.cli.data_cmds", "ingest"),
    "label": ("trajlake.cli.label_cmd", "label"),
    "credit": ("trajlake.cli.credit_cmd", "credit"),
    "credit-eval": ("trajlake.cli.credit_eval_cmd", "credit_eval"),
    "sql": ("trajlake.cli.data_cmds", "sql"),
    "show": ("trajlake.cli.data_cmds", "show"),
    "log": ("trajlake.cli.lake_cmds", "log_cmd"),
    "tag": ("trajlake.cli.lake_cmds", "tag"),
    "tags": ("trajlake.cli.lake_cmds", "tags"),
    "validate": ("trajlake.cli.lake_cmds", "validate"),
    "maintain": ("trajlake.cli.lake_cmds", "maintain"),
    "schema": ("trajlake.cli.lake_cmds", "schema"),
    "lineage": ("trajlake.cli.lineage_cmd", "lineage_cmd"),
    "score": ("trajlake.cli.value_cmds", "score"),
    "rerank": ("trajlake.cli.value_cmds", "rerank"),
    "serve": ("trajlake.cli.value_cmds", "serve"),
    "proxy": ("trajlake.cli.proxy_cmd", "proxy"),
    "otlp-receiver": ("trajlake.cli.otlp_cmd", "otlp_receiver"),
    "view": ("trajlake.cli.view_cmd", "view"),
    "export": ("trajlake.cli.data_cmds", "export_group"),
    "publish": ("trajlake.cli.publish_cmd", "publish"),
    "train": ("trajlake.cli.value_cmds", "train_group"),
    "eval": ("trajlake.cli.value_cmds", "eval_group"),
}


class TrajlakeGroup(click.Group):
    """The root group: commands loaded on first use; user errors become one stderr line and
    Ctrl-C exit code 130."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command, cmd_name)
        return command

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


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="trajlake")
