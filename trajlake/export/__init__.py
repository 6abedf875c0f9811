"""Export: canonical JSONL for round trips, ATIF for agent-trajectory tools, SFT datasets."""

from trajlake.export.atif import export_atif, to_atif
from trajlake.export.jsonl import ExportReport, export_jsonl, iter_canonical, read_canonical
from trajlake.export.sft import SftExportReport, export_sft

__all__ = [
    "ExportReport",
    "SftExportReport",
    "export_atif",
    "export_jsonl",
    "export_sft",
    "iter_canonical",
    "read_canonical",
    "to_atif",
]
