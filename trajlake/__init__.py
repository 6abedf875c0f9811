"""trajlake: LLM-agent rollouts as persistent, versioned training assets.

`open_lake(uri)` opens a lake of versioned Delta tables; ingest rollouts, query them with SQL
at any snapshot or tag, and export them. Heavy dependencies (torch) are never imported here.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from trajlake._lazy import lazy_exports

if TYPE_CHECKING:
    from trajlake.api import Lake, init_lake, open_lake
    from trajlake.errors import TrajlakeError
    from trajlake.lake import (
        BufferedWriter,
        CommitResult,
        MaintenanceReport,
        Snapshot,
        Tag,
        ValidationReport,
    )
    from trajlake.query import QueryResult, QuerySession
    from trajlake.schema import (
        SCHEMA_VERSION,
        CanonicalTrajectory,
        ContentPart,
        Message,
        ToolCall,
        Trajectory,
    )

try:
    __version__ = version("trajlake")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

# Names are imported on first use: ingest workers import `trajlake.ingest` modules, which
# would otherwise pay for the lake layer (delta-rs, DuckDB, pandas) in every process.
_LAZY = {
    "TrajlakeError": "trajlake.errors",
    # The user-facing Lake composes storage, query, ingest and export (`trajlake.api`);
    # `trajlake.lake` is the storage alone.
    **dict.fromkeys(["Lake", "init_lake", "open_lake"], "trajlake.api"),
    **dict.fromkeys(
        [
            "BufferedWriter",
            "CommitResult",
            "MaintenanceReport",
            "Snapshot",
            "Tag",
            "ValidationReport",
        ],
        "trajlake.lake",
    ),
    **dict.fromkeys(["QueryResult", "QuerySession"], "trajlake.query"),
    **dict.fromkeys(
        ["SCHEMA_VERSION", "CanonicalTrajectory", "ContentPart", "Message"],
        "trajlake.schema",
    ),
    **dict.fromkeys(
        ["ToolCall", "Trajectory"],
        "trajlake.schema",
    ),
}


__getattr__, __dir__ = lazy_exports("trajlake", _LAZY, globals())


__all__ = [
    "SCHEMA_VERSION",
    "BufferedWriter",
    "CanonicalTrajectory",
    "CommitResult",
    "ContentPart",
    "Lake",
    "MaintenanceReport",
    "Message",
    "QueryResult",
    "QuerySession",
    "Snapshot",
    "Tag",
    "ToolCall",
    "Trajectory",
    "TrajlakeError",
    "ValidationReport",
    "__version__",
    "init_lake",
    "open_lake",
]
