"""OTLP/JSON trace export requests → flat spans, with every decoding problem named.

The OTLP/JSON mapping (`resourceSpans → scopeSpans → spans`): ids in hex (base64, which
protobuf's own JSON printer writes, is accepted too), 64-bit integers as strings, attributes as
`[{key, value: {stringValue|intValue|doubleValue|boolValue|arrayValue|kvlistValue|bytesValue}}]`.
A span without a trace id, or an attribute value of no known type, is a problem (quarantined by
the adapter); the rest of the request is still read.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_ID_BYTES = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


@dataclass(frozen=True)
class Problem:
    """Something in a request that could not be read: where (`field`) and why."""

    field: str
    error: str
    value: Any = None
    trace_id: str | None = None
    span_id: str | None = None

    def raw(self) -> bytes:
        """What the quarantine row keeps: the ids, the field and the offending value."""
        kept = {"traceId": self.trace_id, "spanId": self.span_id, "field": self.field}
        kept["value"] = self.value
        return json.dumps(kept, ensure_ascii=False, default=str).encode()


@dataclass(frozen=True)
class SpanEvent:
    """A span event: name, time and attributes."""

    name: str
    time_ns: int | None
    attributes: dict[str, Any]


@dataclass
class Span:
    """One span with its resource, in plain Python values."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int | None
    end_ns: int | None
    status_code: int
    status_message: str | None
    attributes: dict[str, Any]
    events: list[SpanEvent]
    resource: dict[str, Any]
    scope: str | None
    line: int | None = None
    offset: int | None = None
    where: str = ""
    """The span's path in its request (`resourceSpans[0].scopeSpans[0].spans[2]`)."""
    problems: list[Problem] = field(default_factory=list)
    """Attributes that could not be read (they are left out of `attributes`)."""

    @property
    def is_error(self) -> bool:
        """Whether the span's status is ERROR."""
        return self.status_code == 2


def any_value(value: Any, where: str, problems: list[Problem]) -> Any:
    """The Python value of an OTLP `AnyValue` (None, with a problem, when it has no known type)."""
    if not isinstance(value, Mapping):
        problems.append(Problem(where, "attribute value is not an object", value))
        return None
    if not value:
        return None  # an empty AnyValue is the null value
    if "stringValue" in value:
        return _typed(value["stringValue"], str, where, problems)
    if "boolValue" in value:
        return _typed(value["boolValue"], bool, where, problems)
    if "intValue" in value:
        return _int_value(value["intValue"], where, problems)
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
        problems.append(Problem(where, "doubleValue is not a number", raw))
        return None
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values") or []
        return [any_value(v, f"{where}[{i}]", problems) for i, v in enumerate(items)]
    if "kvlistValue" in value:
        return key_values((value["kvlistValue"] or {}).get("values") or [], where, problems)
    if "bytesValue" in value:
        return value["bytesValue"]  # base64 text: kept as sent
    problems.append(Problem(where, f"attribute value of unknown type {sorted(value)}", value))
    return None


def _typed(raw: Any, kind: type, where: str, problems: list[Problem]) -> Any:
    if isinstance(raw, kind):
        return raw
    problems.append(Problem(where, f"expected a {kind.__name__}, got {type(raw).__name__}", raw))
    return None


def _int_value(raw: Any, where: str, problems: list[Problem]) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw)
        except ValueError:
            pass
    problems.append(Problem(where, "intValue is not an integer", raw))
    return None


def key_values(items: Any, where: str, problems: list[Problem]) -> dict[str, Any]:
    """`[{key, value}]` as a dict; malformed entries become problems."""
    out: dict[str, Any] = {}
    if not isinstance(items, list):
        problems.append(Problem(where, "attributes are not a list", items))
        return out
    for i, item in enumerate(items):
        key = item.get("key") if isinstance(item, Mapping) else None
        if not isinstance(key, str):
            problems.append(Problem(f"{where}[{i}]", "attribute without a string key", item))
            continue
        out[key] = any_value(item.get("value"), f"{where}.{key}", problems)
    return out


def hex_id(value: Any, name: str) -> str | None:
    """A trace/span id as lowercase hex (from hex, or from protobuf JSON's base64); None when
    absent or all zero (the OTLP "invalid id")."""
    if not isinstance(value, str) or not value:
        return None
    size = _ID_BYTES[name]
    text = value.lower()
    if len(text) == 2 * size and all(c in "0123456789abcdef" for c in text):
        return None if set(text) == {"0"} else text
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{name} {value!r} is neither hex nor base64") from None
    if len(raw) != size:
        raise ValueError(f"{name} {value!r} is {len(raw)} bytes, expected {size}")
    return None if not any(raw) else raw.hex()


def _nanos(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value or None
    if isinstance(value, str) and value.isdigit():
        return int(value) or None
    return None


def _status(status: Any) -> tuple[int, str | None]:
    if not isinstance(status, Mapping):
        return 0, None
    code = status.get("code", 0)
    if isinstance(code, str):
        code = _STATUS_CODES.get(code, 0)
    message = status.get("message")
    return (code if isinstance(code, int) else 0), (message if isinstance(message, str) else None)


def spans_of_request(request: Any) -> Iterator[Span | Problem]:
    """Every span of one `ExportTraceServiceRequest` (or a problem where one cannot be read)."""
    if not isinstance(request, Mapping) or not isinstance(request.get("resourceSpans"), list):
        yield Problem("resourceSpans", "not an OTLP trace export request (no resourceSpans list)")
        return
    for r, resource_spans in enumerate(request["resourceSpans"]):
        base = f"resourceSpans[{r}]"
        if not isinstance(resource_spans, Mapping):
            yield Problem(base, "resourceSpans entry is not an object", resource_spans)
            continue
        problems: list[Problem] = []
        resource_attrs = (resource_spans.get("resource") or {}).get("attributes") or []
        resource = key_values(resource_attrs, f"{base}.resource.attributes", problems)
        yield from problems
        for s, scope_spans in enumerate(resource_spans.get("scopeSpans") or []):
            where = f"{base}.scopeSpans[{s}]"
            if not isinstance(scope_spans, Mapping):
                yield Problem(where, "scopeSpans entry is not an object", scope_spans)
                continue
            scope = (scope_spans.get("scope") or {}).get("name")
            for i, raw in enumerate(scope_spans.get("spans") or []):
                yield _span(raw, f"{where}.spans[{i}]", resource, scope)


def _span(raw: Any, where: str, resource: dict[str, Any], scope: Any) -> Span | Problem:
    if not isinstance(raw, Mapping):
        return Problem(where, "span is not an object", raw)
    try:
        trace_id = hex_id(raw.get("traceId"), "traceId")
        span_id = hex_id(raw.get("spanId"), "spanId")
        parent_id = hex_id(raw.get("parentSpanId"), "parentSpanId")
    except ValueError as e:
        return Problem(where, str(e), {k: raw.get(k) for k in _ID_BYTES})
    if trace_id is None or span_id is None:
        missing = "traceId" if trace_id is None else "spanId"
        return Problem(f"{where}.{missing}", f"span without a {missing}", raw.get("name"), trace_id)
    problems: list[Problem] = []
    attributes = key_values(raw.get("attributes") or [], f"{where}.attributes", problems)
    events = []
    for n, event in enumerate(raw.get("events") or []):
        if not isinstance(event, Mapping):
            problems.append(Problem(f"{where}.events[{n}]", "event is not an object", event))
            continue
        attrs = key_values(event.get("attributes") or [], f"{where}.events[{n}]", problems)
        name = event.get("name")
        events.append(
            SpanEvent(
                name if isinstance(name, str) else "", _nanos(event.get("timeUnixNano")), attrs
            )
        )
    code, message = _status(raw.get("status"))
    name = raw.get("name")
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name=name if isinstance(name, str) else "",
        start_ns=_nanos(raw.get("startTimeUnixNano")),
        end_ns=_nanos(raw.get("endTimeUnixNano")),
        status_code=code,
        status_message=message,
        attributes=attributes,
        events=events,
        resource=resource,
        scope=scope if isinstance(scope, str) else None,
        where=where,
        problems=[_with_ids(p, trace_id, span_id) for p in problems],
    )


def _with_ids(problem: Problem, trace_id: str, span_id: str) -> Problem:
    return Problem(problem.field, problem.error, problem.value, trace_id, span_id)
