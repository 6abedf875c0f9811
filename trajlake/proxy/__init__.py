"""Recording proxy: wire dialects, stream reassembly and rollout reconstruction.

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
