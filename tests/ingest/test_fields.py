"""Fields the sources have are kept: normal model names, the dominant model, task sources, times."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import SHARED_CORPUS
from trajlake.ingest import ParsedTrajectory, SourceFile
from trajlake.ingest._models import dominant_model, normalize_model, task_source_of
from trajlake.ingest.claude_code import ClaudeCodeAdapter
from trajlake.ingest.swe_agent import SweAgentAdapter
from trajlake.schema import CanonicalTrajectory, Message

DATA = Path(__file__).parents[1] / "data"
BIG_SESSION = (
    SHARED_CORPUS
    / "05_coding_cli_sessions/claude_code_jsonl/marot_spotter/test/fixtures/transcripts"
    / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("@google/gemini-2.5-pro", "google/gemini-2.5-pro"),
        ("google/gemini-2.5-pro", "google/gemini-2.5-pro"),
        ("gemini/gemini-3-pro-preview", "google/gemini-3-pro-preview"),
        ("vertex_ai/gemini-2.0-flash", "google/gemini-2.0-flash"),
        ("openai/gpt-4o", "openai/gpt-4o"),
        ("gpt-4o", "openai/gpt-4o"),
        ("o3-mini", "openai/o3-mini"),
        ("openai:gpt-realtime-2", "openai/gpt-realtime-2"),
        ("claude-opus-4-6", "anthropic/claude-opus-4-6"),
        ("anthropic/claude-sonnet-4-5-20250929", "anthropic/claude-sonnet-4-5-20250929"),
        ("openrouter/anthropic/claude-sonnet-4.5", "anthropic/claude-sonnet-4.5"),
        ("bedrock/us.anthropic.claude-3-5-sonnet-20240620-v1:0",
         "anthropic/claude-3-5-sonnet-20240620-v1:0"),
        ("hosted_vllm/Qwen/Qwen3-8B", "qwen/Qwen3-8B"),
        ("azureai/Meta-Llama-3-1-405B-Instruct-jqf", "meta-llama/Meta-Llama-3-1-405B-Instruct-jqf"),
        ("my-finetune-v2", "my-finetune-v2"),  # an unknown family stays as written
        ("<synthetic>", None),  # Claude Code's own messages name no model
    ],
)  # fmt: skip
def test_model_names_have_one_normal_form(raw: str, normal: str | None) -> None:
    assert normalize_model(raw) == normal
    if normal is not None:
        assert normalize_model(normal) == normal  # normal names stay as they are


def _message(model: str, tokens: int, thread: str = "main") -> Message:
    return Message(
        trajectory_id="t", idx=0, role="assistant", model=model, completion_tokens=tokens,
        thread=thread,
    )  # fmt: skip


def test_dominant_model_counts_messages_then_tokens_then_first_use() -> None:
    messages = [_message("a", 10), _message("b", 50), _message("a", 10), _message("b", 1)]
    assert dominant_model(messages) == ("b", {"a": 2, "b": 2})  # tie on messages: b has 51 > 20
    messages = [_message("a", 5), _message("b", 5)]
    assert dominant_model(messages)[0] == "a"  # full tie: the first used
    # Subagent threads are listed but the main thread decides.
    messages = [_message("a", 1), *(_message("c", 9, thread="agent-x") for _ in range(3))]
    assert dominant_model(messages) == ("a", {"a": 1, "c": 3})


@pytest.mark.skipif(not BIG_SESSION.exists(), reason="shared corpus not available")
def test_multi_model_session_policy_is_its_dominant_model() -> None:
    source = SourceFile(str(BIG_SESSION), BIG_SESSION.stat().st_size)
    with open(BIG_SESSION, "rb") as stream:
        (record,) = [
            p.record for p in ClaudeCodeAdapter().read(source, stream)
            if isinstance(p, ParsedTrajectory)
        ]  # fmt: skip
    lines = [json.loads(line) for line in BIG_SESSION.read_text().splitlines() if line.strip()]
    # Count main-line assistant messages by id in the source, as the session reads them.
    by_id = {
        line["message"]["id"]: line["message"]["model"]
        for line in lines
        if line.get("type") == "assistant" and not line.get("isSidechain")
        and line["message"].get("model") not in (None, "<synthetic>")
    }  # fmt: skip
    counts = Counter(by_id.values())
    assert len(counts) > 1
    top = counts.most_common(1)[0][0]
    assert record.policy_model == normalize_model(top)
    assert record.attrs is not None and record.attrs["raw_policy_model"] == top
    assert set(record.attrs["models"]) >= set(counts)


def test_task_source_from_swe_bench_ids() -> None:
    assert task_source_of("marshmallow-code__marshmallow-1867") == "swe-bench"
    assert task_source_of("astropy__astropy-14598") == "swe-bench"
    assert task_source_of("6e44b9__sweagenttestrepo-1c2844") is None  # a test repo, no number
    assert task_source_of("github_issue") is None
    path = DATA / "swe_agent" / "marshmallow-code__marshmallow-1867.traj"
    source = SourceFile(str(path), path.stat().st_size)
    with open(path, "rb") as stream:
        (parsed,) = list(SweAgentAdapter().read(source, stream))
    assert isinstance(parsed, ParsedTrajectory)
    record: CanonicalTrajectory = parsed.record
    assert (record.task_id, record.task_source) == (
        "marshmallow-code__marshmallow-1867",
        "swe-bench",
    )
