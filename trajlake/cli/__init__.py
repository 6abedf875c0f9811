"""The `trajlake` command line: one module per command group; the only place that prints."""

from trajlake.cli.main import cli, main

__all__ = ["cli", "main"]
