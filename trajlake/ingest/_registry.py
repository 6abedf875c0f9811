"""Known source formats and content-based detection."""

from __future__ import annotations

from trajlake.errors import FormatDetectionError
from trajlake.ingest._adapter import Adapter
from trajlake.ingest._sources import SourceFile, read_head
from trajlake.ingest.canonical import CanonicalAdapter

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (CanonicalAdapter(),)}
"""Format name → adapter, for `--format`."""

_MIN_CONFIDENCE = 0.5


def format_names() -> list[str]:
    """Names accepted by `--format` (besides 'auto')."""
    return sorted(ADAPTERS)


def get_adapter(name: str) -> Adapter:
    """The adapter of a format name (ValueError listing the choices when unknown)."""
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(
            f"unknown format {name!r}; choose one of: auto, {', '.join(format_names())}"
        ) from None


def detect(source: SourceFile) -> Adapter:
    """The adapter most confident about a file, or FormatDetectionError saying what to pass."""
    head = read_head(source)
    scored = sorted(((a.sniff(source, head), a.name) for a in ADAPTERS.values()), reverse=True)
    best_score, best_name = scored[0]
    if best_score < _MIN_CONFIDENCE:
        raise FormatDetectionError(
            f"{source.uri}: cannot tell the trajectory format from its content; pass --format "
            f"with one of: {', '.join(format_names())}"
        )
    return ADAPTERS[best_name]
