"""The OTLP/HTTP trace receiver: GenAI traces posted by instrumented agents, spooled, then
ingested with the `otlp` adapter (`trajlake otlp-receiver`). aiohttp is imported when it runs."""

from __future__ import annotations

from trajlake.otlp_receiver._batches import Batcher, split_by_trace
from trajlake.otlp_receiver.server import create_receiver_app, default_spool_dir, run_receiver

__all__ = ["Batcher", "create_receiver_app", "default_spool_dir", "run_receiver", "split_by_trace"]
