"""Export: canonical JSONL for round trips (SFT formats come with the credit runs)."""

from trajlake.export.jsonl import ExportReport, export_jsonl, iter_canonical, read_canonical

__all__ = ["ExportReport", "export_jsonl", "iter_canonical", "read_canonical"]
