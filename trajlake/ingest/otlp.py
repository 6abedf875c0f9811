"""OpenTelemetry trace exports (OTLP/JSON) with GenAI spans: one trajectory per conversation.

A file is one `ExportTraceServiceRequest` as JSON, a JSON list of them, or JSON lines with one
request per line (what the OpenTelemetry Collector's file exporter writes). Spans of one trace
may be spread over many lines, so the whole file is read before trajectories are built: a trace
becomes a trajectory, or a conversation (`gen_ai.conversation.id`, OpenInference `session.id`)
does across its traces. Chat spans become `calls` rows, messages come from the last call of each
thread (`trajlake.ingest._otlp_assemble`). Malformed lines, spans without ids and attributes of
the wrong type are quarantined with file, line and field; the rest of the file is kept.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, ClassVar

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    ParsedTrajectory,
    bounded,
    iter_json_lines,
    parse_document,
    raw_json,
    to_parsed,
)
from trajlake.ingest._jsonl_adapter import first_line
from trajlake.ingest._otlp_assemble import assemble, group_spans
from trajlake.ingest._otlp_conventions import GenAISpan, read_span
from trajlake.ingest._otlp_spans import Problem, Span, spans_of_request
from trajlake.ingest._sources import SourceFile

if TYPE_CHECKING:
    from trajlake.ingest._keys import KeyStructure

__all__ = ["OtlpAdapter", "read_requests"]

_TOP_KEY = "resourceSpans"


class OtlpAdapter:
    """Reads OTLP/JSON trace exports: GenAI, older GenAI and OpenInference span layouts."""

    name: ClassVar[str] = "otlp"
    description: ClassVar[str] = (
        "*.json / *.jsonl — OpenTelemetry OTLP/JSON trace export (GenAI or OpenInference spans)"
    )

    def sniff(self, source: SourceFile, head: bytes, keys: KeyStructure | None = None) -> float:
        """Sure when the first JSON object (or the first of a list) has a `resourceSpans` list."""
        if keys is not None:
            return 1.0 if keys.shape.kinds.get(_TOP_KEY) == "array" else 0.0
        line = first_line(head)
        value = line.value
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, dict):
            return 1.0 if isinstance(value.get(_TOP_KEY), list) else 0.0
        return 0.0  # a cut or pretty-printed head: judged by its key structure

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """Bad records as they are found, then every trajectory of the file."""
        spans: list[GenAISpan] = []
        for item in read_requests(stream):
            if isinstance(item, BadRecord):
                yield item
                continue
            info = read_span(item)
            for problem in [*item.problems, *info.problems]:
                yield _bad(problem, item.line, item.offset)
            spans.append(info)
        yield from trajectories(spans)


def trajectories(spans: list[GenAISpan]) -> Iterator[Parsed]:
    """The trajectories of a set of read spans, each with its `calls` rows."""
    for group in group_spans(spans):
        first = min(group.spans, key=lambda s: (s.span.line or 0, s.span.offset or 0)).span
        record, calls = assemble(group)
        where = [s.span.where for s in group.spans]
        parsed = to_parsed(
            record, line=first.line, offset=first.offset, raw=functools.partial(raw_json, where)
        )
        if isinstance(parsed, ParsedTrajectory):
            parsed.calls = calls
        yield parsed


def read_requests(stream: IO[bytes]) -> Iterator[Span | BadRecord]:
    """Every span of a file of export requests (JSON, a JSON list, or JSON lines)."""
    data = stream.read()
    for line, offset, value in _requests(data):
        if isinstance(value, BadRecord):
            yield value
            continue
        for item in spans_of_request(value):
            if isinstance(item, Problem):
                yield _bad(item, line, offset)
                continue
            item.line, item.offset = line, offset
            yield item


def _requests(data: bytes) -> Iterator[tuple[int | None, int | None, Any]]:
    """(line, offset, request or BadRecord) for each request of the file."""
    head = first_line(data[: 1 << 16])
    lines = data.strip().count(b"\n") + 1
    if not head.parsed and lines > 1:
        document = parse_document(data)  # pretty-printed JSON: one document
        if not isinstance(document, BadRecord):
            for i, request in enumerate(document if isinstance(document, list) else [document]):
                yield 1, i, request
            return
    for number, start, _raw, value in iter_json_lines(io.BytesIO(data)):
        if isinstance(value, list):  # a list of requests on one line
            for request in value:
                yield number, start, request
        else:
            yield number, start, value


def _bad(problem: Problem, line: int | None, offset: int | None) -> BadRecord:
    kept, size = bounded(problem.raw())
    return BadRecord(problem.error, line, offset, problem.field, kept, size)
