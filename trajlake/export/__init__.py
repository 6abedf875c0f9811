"""Export: canonical JSONL for round trips, ATIF for agent-trajectory tools."""

from trajlake.export.atif import export_atif, to_atif
from trajlake.export.jsonl import ExportReport, export_jsonl, iter_canonical, read_canonical

__all__ = [
    "ExportReport",
    "export_atif",
    "export_jsonl",
    "iter_canonical",
    "read_canonical",
    "to_atif",
]
