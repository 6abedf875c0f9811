"""OTLP/HTTP trace request bodies → OTLP/JSON dicts: JSON or protobuf, plain or gzip."""

from __future__ import annotations

import json
import zlib
from typing import Any

from trajlake.errors import missing_extra

JSON_TYPE = "application/json"
PROTOBUF_TYPE = "application/x-protobuf"


class BadRequest(ValueError):
    """A body that is not an OTLP trace export request (answered 400) or too big (413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def decompressed(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body without its `Content-Encoding` (gzip, deflate), at most `limit` bytes."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise BadRequest(f"unsupported Content-Encoding {encoding!r} (use gzip or none)", 415)
    inflater = zlib.decompressobj(31 if encoding == "gzip" else zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadRequest(f"body is not valid {encoding} data: {e}") from e
    if len(data) > limit or inflater.unconsumed_tail:
        raise BadRequest(f"decompressed body is larger than {limit} bytes", 413)
    return data


def export_request(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The request as an OTLP/JSON dict (`resourceSpans` …), from JSON or protobuf."""
    kind = (content_type or JSON_TYPE).split(";")[0].strip().lower()
    if kind == PROTOBUF_TYPE:
        return _from_protobuf(body)
    if kind != JSON_TYPE:
        raise BadRequest(
            f"unsupported Content-Type {kind!r}: send {JSON_TYPE} or {PROTOBUF_TYPE}", 415
        )
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"body is not JSON: {e}") from e
    if not isinstance(value, dict) or not isinstance(value.get("resourceSpans", []), list):
        raise BadRequest("body is not an ExportTraceServiceRequest (no resourceSpans list)")
    return value


def _from_protobuf(body: bytes) -> dict[str, Any]:
    try:
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError as e:
        raise missing_extra("opentelemetry-proto", "otlp") from e
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as e:
        raise BadRequest(f"body is not an ExportTraceServiceRequest protobuf: {e}") from e
    # Ids come out in base64 (protobuf's JSON mapping of bytes); the otlp adapter reads both.
    value: dict[str, Any] = json_format.MessageToDict(message)
    return value


def protobuf_response() -> bytes:
    """An empty ExportTraceServiceResponse (full success), serialised."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    data: bytes = ExportTraceServiceResponse().SerializeToString()
    return data
