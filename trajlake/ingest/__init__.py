"""Ingest: read rollouts in their native formats into the lake, quarantining bad records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajlake._lazy import lazy_exports

if TYPE_CHECKING:
    from trajlake.ingest._adapter import Adapter, BadRecord, ParsedTrajectory
    from trajlake.ingest._pipeline import IngestOptions, IngestReport, ingest
    from trajlake.ingest._redact_report import (
        RedactionFinding,
        RedactionReport,
        redaction_report,
    )
    from trajlake.ingest._registry import adapters, detect, format_names, get_adapter
    from trajlake.ingest._sources import SourceFile, expand_sources
    from trajlake.ingest.labels import (
        LABEL_FORMATS,
        LabelReport,
        ReadLabels,
        attach_labels,
        commit_labels,
        prepare_labels,
        read_labels,
    )
    from trajlake.redact import AllowList, redact_uri

# Imported on first use: a parsing worker imports only the adapter it runs, not the pipeline
# (and through it the lake layer) that drives it.
_LAZY = {
    **dict.fromkeys(["Adapter", "BadRecord", "ParsedTrajectory"], "trajlake.ingest._adapter"),
    **dict.fromkeys(["IngestOptions", "IngestReport", "ingest"], "trajlake.ingest._pipeline"),
    **dict.fromkeys(
        ["RedactionFinding", "RedactionReport", "redaction_report"],
        "trajlake.ingest._redact_report",
    ),
    **dict.fromkeys(
        ["adapters", "detect", "format_names", "get_adapter"], "trajlake.ingest._registry"
    ),
    **dict.fromkeys(["SourceFile", "expand_sources"], "trajlake.ingest._sources"),
    **dict.fromkeys(
        [
            "LABEL_FORMATS",
            "LabelReport",
            "ReadLabels",
            "attach_labels",
            "commit_labels",
            "prepare_labels",
            "read_labels",
        ],
        "trajlake.ingest.labels",
    ),
    **dict.fromkeys(["AllowList", "redact_uri"], "trajlake.redact"),
}


__getattr__, __dir__ = lazy_exports("trajlake.ingest", _LAZY, globals())


__all__ = [
    "LABEL_FORMATS",
    "Adapter",
    "AllowList",
    "BadRecord",
    "IngestOptions",
    "IngestReport",
    "LabelReport",
    "ParsedTrajectory",
    "ReadLabels",
    "RedactionFinding",
    "RedactionReport",
    "SourceFile",
    "adapters",
    "attach_labels",
    "commit_labels",
    "detect",
    "expand_sources",
    "format_names",
    "get_adapter",
    "ingest",
    "prepare_labels",
    "read_labels",
    "redact_uri",
    "redaction_report",
]
