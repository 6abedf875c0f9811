"""Recording proxy: calls in the wire dialects and rollout reconstruction.

Messages and SSE streams are read by `trajlake.wire`, the code ingest uses for the same formats
(`StreamAssembler` is re-exported here for the proxy's users).

Parsing and reconstruction are pure Python; the HTTP server lives in its own modules.
"""

from __future__ import annotations

from trajlake.proxy.dialects import (
    ENDPOINTS,
    CallInput,
    CallOutput,
    Dialect,
    StreamAssembler,
    parse_request,
    parse_response,
)
from trajlake.proxy.reconstruct import RecordedCall, RolloutMeta, reconstruct

__all__ = [
    "ENDPOINTS",
    "CallInput",
    "CallOutput",
    "Dialect",
    "RecordedCall",
    "RolloutMeta",
    "StreamAssembler",
    "parse_request",
    "parse_response",
    "reconstruct",
]
