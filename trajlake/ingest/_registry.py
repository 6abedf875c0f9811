"""Known source formats and content-based detection."""

from __future__ import annotations

import functools
import importlib

from trajlake.errors import FormatDetectionError
from trajlake.ingest._adapter import Adapter
from trajlake.ingest._sources import SourceFile, read_head

_ADAPTER_CLASSES: dict[str, str] = {
    "canonical": "trajlake.ingest.canonical:CanonicalAdapter",
    "openai-messages": "trajlake.ingest.openai_messages:OpenAIMessagesAdapter",
    "swe-agent": "trajlake.ingest.swe_agent:SweAgentAdapter",
    "mini-swe-agent": "trajlake.ingest.mini_swe_agent:MiniSweAgentAdapter",
    "openhands": "trajlake.ingest.openhands:OpenHandsAdapter",
    "claude-code": "trajlake.ingest.claude_code:ClaudeCodeAdapter",
    "codex": "trajlake.ingest.codex:CodexAdapter",
    "inspect": "trajlake.ingest.inspect_ai:InspectAdapter",
    "atif": "trajlake.ingest.atif:AtifAdapter",
    "responses": "trajlake.ingest.responses:ResponsesAdapter",
    "tau-bench": "trajlake.ingest.tau_bench:TauBenchAdapter",
    "aider": "trajlake.ingest.aider:AiderAdapter",
    "tau2-bench": "trajlake.ingest.tau2_bench:Tau2BenchAdapter",
    "llm-proxy": "trajlake.ingest.llm_proxy:LlmProxyAdapter",
}
"""Format name → adapter class (module:Class); one module per source format."""

_MIN_CONFIDENCE = 0.5


@functools.cache
def adapters() -> dict[str, Adapter]:
    """Format name → adapter instance, for `--format` and detection."""
    found: dict[str, Adapter] = {}
    for name, target in _ADAPTER_CLASSES.items():
        module_name, class_name = target.split(":")
        module = importlib.import_module(module_name)
        found[name] = getattr(module, class_name)()
    return found


def format_names() -> list[str]:
    """Names accepted by `--format` (besides 'auto')."""
    return sorted(adapters())


def get_adapter(name: str) -> Adapter:
    """The adapter of a format name (ValueError listing the choices when unknown)."""
    try:
        return adapters()[name]
    except KeyError:
        choices = ", ".join(format_names())
        raise ValueError(f"unknown format {name!r}; choose one of: auto, {choices}") from None


def detect(source: SourceFile) -> Adapter:
    """The adapter most confident about a file, or FormatDetectionError saying what to pass."""
    head = read_head(source)
    scored = sorted(((a.sniff(source, head), a.name) for a in adapters().values()), reverse=True)
    best_score, best_name = scored[0]
    if best_score < _MIN_CONFIDENCE:
        raise FormatDetectionError(
            f"{source.uri}: cannot tell the trajectory format from its content; pass --format "
            f"with one of: {', '.join(format_names())}"
        )
    return adapters()[best_name]
