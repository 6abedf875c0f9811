"""trajlake: LLM-agent rollouts as persistent, versioned training assets.

`open_lake(uri)` opens a lake of versioned Delta tables; ingest rollouts, query them with SQL
at any snapshot or tag, and export them. Heavy dependencies (torch) are never imported here.
"""

from importlib.metadata import PackageNotFoundError, version

from trajlake.errors import TrajlakeError
from trajlake.lake import (
    BufferedWriter,
    CommitResult,
    Lake,
    MaintenanceReport,
    Snapshot,
    Tag,
    ValidationReport,
    init_lake,
    open_lake,
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
