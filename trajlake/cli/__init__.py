"""The `trajlake` command line: one module per command group; the only place that prints.

Commands are thin: they parse flags, call the library function of the same name and hand the
result to an `Output`, so the CLI mirrors the Python API one to one and every behaviour is
testable without a terminal. Command modules are imported on first use (see `main.COMMANDS`).
"""

from trajlake.cli.main import cli, main

__all__ = ["cli", "main"]
