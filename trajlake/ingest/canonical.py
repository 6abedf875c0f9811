"""trajlake's canonical JSONL: a trajectory with its messages per line (schemas/canonical.json).

A line is already a canonical record, so the builder only checks it is an object; detection
requires canonical keys only, with an id or provenance, to tell it from other chat JSONL.
"""

from __future__ import annotations

from typing import IO, Any, ClassVar

from trajlake.ingest._jsonl_adapter import Builder, JsonLinesAdapter, json_object
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory

_FIELDS = frozenset(CanonicalTrajectory.model_fields)


class CanonicalAdapter(JsonLinesAdapter):
    """Reads canonical JSONL lines, validating each against the record types."""

    name: ClassVar[str] = "canonical"
    description: ClassVar[str] = "*.jsonl — trajlake canonical JSONL (`trajlake export jsonl`)"
    line_records: ClassVar[bool] = True
    """Every line is a whole record: big files can be parsed in chunks."""

    def sniff_value(self, value: Any) -> float:
        """Sure when the first line is an object with messages and only canonical keys."""
        if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
            return 0.0
        keys = set(value)
        if keys <= _FIELDS and ("trajectory_id" in keys or "source_format" in keys):
            return 1.0
        return 0.3 if keys <= _FIELDS else 0.0

    def sniff_prefix(self, text: bytes, complete: bool) -> float:
        """A first line longer than the sniffed head: judge by the keys it starts with."""
        looks = text.startswith(b'{"trajectory_id"') and b'"messages"' in text
        return 0.6 if looks and not complete else 0.0

    def builder(self, source: SourceFile, stream: IO[bytes]) -> Builder:
        """A canonical line is its own record."""
        return json_object
