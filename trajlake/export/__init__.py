"""Export: canonical JSONL round trips, ATIF for agent-trajectory tools, SFT datasets, RL groups."""

from trajlake.export.atif import export_atif, to_atif
from trajlake.export.groups import GroupsExportReport, export_groups
from trajlake.export.jsonl import ExportReport, export_jsonl, iter_canonical, read_canonical
from trajlake.export.sft import SftExportReport, export_sft
from trajlake.export.weighted_rows import weighted_rows

__all__ = [
    "ExportReport",
    "GroupsExportReport",
    "SftExportReport",
    "export_atif",
    "export_groups",
    "export_jsonl",
    "export_sft",
    "iter_canonical",
    "read_canonical",
    "to_atif",
    "weighted_rows",
]
