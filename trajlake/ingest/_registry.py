"""Known source formats and content-based detection.

Detection asks every adapter's `sniff` about the first 64 KiB; when none is sure, it streams
the file's key structure (`trajlake.ingest._keys`) and asks again. A file no adapter claims is
skipped with a reason (docs, patches, JSON without trajectory keys) — or quarantined when it
looks like a trajectory (message-like keys) or cannot be read, so nothing is lost silently.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from dataclasses import dataclass

from trajlake.errors import FormatDetectionError
from trajlake.ingest._adapter import Adapter
from trajlake.ingest._keys import SCAN_BUDGET, KeyStructure, scan_keys
from trajlake.ingest._limits import Limits, watching
from trajlake.ingest._sources import SourceFile

log = logging.getLogger(__name__)

_ADAPTER_CLASSES: dict[str, str] = {
    "canonical": "trajlake.ingest.canonical:CanonicalAdapter",
    # Before openai-messages: an Orchard rollout is also a chat object, and ties go to the first.
    "orchard-rl": "trajlake.ingest.orchard_rl:OrchardRlAdapter",
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
    "otlp": "trajlake.ingest.otlp:OtlpAdapter",
}
"""Format name → adapter class (module:Class); one module per source format."""

_MIN_CONFIDENCE = 0.5
HEAD_BYTES = 65536
_DAMAGED_LINES_PASSED = 3
_BOM = b"\xef\xbb\xbf"
_TRAJECTORY_KEYS = frozenset(
    {"messages", "history", "trajectory", "steps", "events", "turns", "conversation",
     "conversations", "transcript", "chat_history"}
)  # fmt: skip
"""Keys whose list value makes a JSON file look like a trajectory (or a list of them)."""
_SKIP_KINDS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".md", ".markdown", ".rst", ".txt", ".html"), "README/markdown/text"),
    ((".patch", ".diff"), "patches"),
    ((".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".env"), "config files"),
    ((".py", ".js", ".ts", ".sh", ".rs", ".go", ".java", ".c", ".h"), "source code"),
    ((".png", ".jpg", ".jpeg", ".gif", ".webp", ".pdf", ".zip", ".tar"), "binary files"),
    ((".csv", ".tsv", ".parquet", ".log"), "tables and logs"),
)


@functools.cache
def adapters() -> dict[str, Adapter]:
    """Format name → adapter instance, for `--format` and detection."""
    return {name: _adapter(name) for name in _ADAPTER_CLASSES}


@functools.cache
def _adapter(name: str) -> Adapter:
    """One adapter instance, its module imported on first use (a parsing worker imports only
    the format it reads: all of them would cost each worker a sixth of a second)."""
    module_name, class_name = _ADAPTER_CLASSES[name].split(":")
    adapter: Adapter = getattr(importlib.import_module(module_name), class_name)()
    return adapter


def format_names() -> list[str]:
    """Names accepted by `--format` (besides 'auto')."""
    return sorted(adapters())


def get_adapter(name: str) -> Adapter:
    """The adapter of a format name (ValueError listing the choices when unknown)."""
    if name not in _ADAPTER_CLASSES:
        choices = ", ".join(format_names())
        raise ValueError(f"unknown format {name!r}; choose one of: auto, {choices}")
    return _adapter(name)


@dataclass(frozen=True)
class Detection:
    """What detection made of a file: its adapter, or why it is skipped or quarantined."""

    adapter: Adapter | None = None
    skipped: str | None = None
    """The kind of non-trajectory file (`README/markdown/text`, `patches`, …)."""
    rejected: str | None = None
    """Why the file is quarantined (unreadable, damaged, unrecognised structure)."""


def detect(source: SourceFile) -> Adapter:
    """The adapter most confident about a file, or FormatDetectionError saying what to pass."""
    found = classify(source)
    if found.adapter is not None:
        return found.adapter
    why = found.rejected or f"no trajectory format ({found.skipped})"
    raise FormatDetectionError(
        f"{source.uri}: cannot tell the trajectory format from its content ({why}); pass "
        f"--format with one of: {', '.join(format_names())}"
    )


def classify(source: SourceFile, limits: Limits | None = None) -> Detection:
    """Detect a file's format from its first bytes, then from its streamed key structure."""
    if source.problem is not None:
        return Detection(rejected=source.problem)
    keys: KeyStructure | None = None
    with watching(limits or Limits()) as watch:
        try:
            with source.open() as stream:
                head = stream.read(HEAD_BYTES).removeprefix(_BOM)
                adapter = _best(source, head, None)
                if adapter is None and head:
                    more = stream if len(head) >= HEAD_BYTES - len(_BOM) else None
                    keys = scan_keys(head, more)
                    adapter = _best(source, head, keys)
            if adapter is None and keys is not None and not keys.complete:
                adapter = _past_damaged_lines(source)
        except OSError as e:
            return Detection(rejected=f"cannot read: {e}")
    if adapter is not None:
        return Detection(adapter)
    if watch.damage is not None:
        return Detection(rejected=watch.damage)
    if keys is not None and looks_like_trajectory(keys):
        return Detection(
            rejected=f"unrecognised structure: keys {keys.describe()} look like a "
            "trajectory but match no format; pass --format if you know it"
        )
    return Detection(skipped=_skip_kind(source, head, keys))


def _best(source: SourceFile, head: bytes, keys: KeyStructure | None) -> Adapter | None:
    """The adapter most confident about the file, if any is confident enough."""
    best_score, best = 0.0, None
    for adapter in adapters().values():
        try:
            if keys is None:
                score = adapter.sniff(source, head)
            elif _takes_keys(type(adapter)):
                score = adapter.sniff(source, head, keys=keys)  # type: ignore[call-arg]
            else:
                continue  # judged on the head already
        except (ValueError, TypeError, RecursionError, MemoryError) as e:
            # A hostile head must cost only this adapter's vote, never the batch.
            log.debug("%s: %s sniff failed: %r", source.uri, adapter.name, e)
            continue
        if score > best_score:
            best_score, best = score, adapter
    return best if best_score >= _MIN_CONFIDENCE else None


def _past_damaged_lines(source: SourceFile) -> Adapter | None:
    """The adapter of a line-record file whose first lines are damaged, judged by the lines
    after them (the damaged lines are then quarantined one by one, not the file skipped)."""
    with source.open() as stream:
        buffered = stream.read(HEAD_BYTES).removeprefix(_BOM)
        for _ in range(_DAMAGED_LINES_PASSED):
            newline = buffered.find(b"\n")
            if newline < 0:  # a first line longer than the head: read past it, bounded
                tail = stream.readline(SCAN_BUDGET)
                if not tail.endswith(b"\n"):
                    return None
                line, buffered = buffered + tail, stream.read(HEAD_BYTES)
            else:
                line, buffered = buffered[:newline], buffered[newline + 1 :]
                buffered += stream.read(max(0, HEAD_BYTES - len(buffered)))
            intact = scan_keys(line, None)
            if intact.container == "object" and intact.complete:
                return None  # an intact first line: the file is judged by it
            if buffered.lstrip().startswith(b"{"):  # JSON lines follow
                adapter = _best(source, buffered, None)
                if adapter is not None:
                    return adapter
    return None


@functools.cache
def _takes_keys(adapter_type: type) -> bool:
    """Whether the adapter's `sniff` reads the key structure (adapters migrate one by one)."""
    sniff = getattr(adapter_type, "sniff", None)
    return sniff is not None and "keys" in inspect.signature(sniff).parameters


def looks_like_trajectory(keys: KeyStructure) -> bool:
    """Message-like keys: a list under `messages`/`history`/…, or `role` and `content`."""
    shape = keys.shape
    listed = any(shape.kinds.get(k) == "array" for k in _TRAJECTORY_KEYS)
    return listed or {"role", "content"} <= set(shape.keys)


def _skip_kind(source: SourceFile, head: bytes, keys: KeyStructure | None) -> str:
    """The kind of a file that holds no trajectory, for the skip summary."""
    if not head.strip():
        return "empty files"
    name = source.name.lower()
    if name.startswith(("readme", "license", "notice", "changelog")):
        return "README/markdown/text"
    for suffixes, kind in _SKIP_KINDS:
        if name.endswith(suffixes):
            return kind
    if keys is not None and keys.container != "none":
        lines = "JSON lines" if keys.json_lines else "JSON"
        return f"{lines} without trajectory keys"
    if b"\0" in head[:8192]:
        return "binary files"
    return "text in no known format"
