"""trajlake's canonical JSONL: a trajectory with its messages per line (schemas/canonical.json)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, ClassVar

from pydantic import ValidationError

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bad_from_validation,
    bounded,
    iter_json_lines,
)
from trajlake.ingest._sources import SourceFile
from trajlake.schema import CanonicalTrajectory

_FIELDS = frozenset(CanonicalTrajectory.model_fields)


class CanonicalAdapter:
    """Reads canonical JSONL lines, validating each against the record types."""

    name: ClassVar[str] = "canonical"
    description: ClassVar[str] = "*.jsonl — trajlake canonical JSONL (`trajlake export jsonl`)"
    line_records: ClassVar[bool] = True
    """Every line is a whole record: big files can be parsed in chunks."""

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure when the first line is an object with messages and only canonical keys."""
        first, newline, _ = head.partition(b"\n")
        try:
            obj = json.loads(first)
        except ValueError:
            # A first line longer than the sniffed head: judge by the keys it starts with.
            complete = bool(newline)
            looks = first.lstrip().startswith(b'{"trajectory_id"') and b'"messages"' in first
            return 0.6 if looks and not complete else 0.0
        if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
            return 0.0
        keys = set(obj)
        if keys <= _FIELDS and ("trajectory_id" in keys or "source_format" in keys):
            return 1.0
        return 0.3 if keys <= _FIELDS else 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory per line; a line that fails validation becomes a BadRecord."""
        for line, offset, raw, value in iter_json_lines(stream):
            if isinstance(value, BadRecord):
                yield value
                continue
            kept, size = bounded(raw)
            if not isinstance(value, dict):
                yield BadRecord(
                    f"expected a JSON object, got {type(value).__name__}",
                    line,
                    offset,
                    None,
                    kept,
                    size,
                )
                continue
            try:
                record = CanonicalTrajectory.model_validate(value)
            except ValidationError as e:
                yield bad_from_validation(e, line=line, offset=offset, raw=kept, raw_size=size)
                continue
            yield ParsedTrajectory(record, line=line, offset=offset)
