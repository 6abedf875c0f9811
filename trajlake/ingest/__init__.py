"""Ingest: read rollouts in their native formats into the lake, quarantining bad records."""

from trajlake.ingest._adapter import Adapter, BadRecord, ParsedTrajectory
from trajlake.ingest._pipeline import IngestOptions, IngestReport, ingest
from trajlake.ingest._redact_report import RedactionFinding, RedactionReport, redaction_report
from trajlake.ingest._registry import adapters, detect, format_names, get_adapter
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.ingest.labels import LABEL_FORMATS, LabelReport, attach_labels, read_labels
from trajlake.ingest.redact import AllowList, redact_uri

__all__ = [
    "LABEL_FORMATS",
    "Adapter",
    "AllowList",
    "BadRecord",
    "IngestOptions",
    "IngestReport",
    "LabelReport",
    "ParsedTrajectory",
    "RedactionFinding",
    "RedactionReport",
    "SourceFile",
    "adapters",
    "attach_labels",
    "detect",
    "expand_sources",
    "format_names",
    "get_adapter",
    "ingest",
    "read_labels",
    "redact_uri",
    "redaction_report",
]
