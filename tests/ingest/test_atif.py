"""ATIF import, and export → import round trips through `trajlake.export.atif`.

No real ATIF file was found (FORMATS.md, "Not represented"): the trajectories below are
synthetic, written from the Harbor RFC 0001 schema (v1.4 example shape, v1.6 content parts).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.export.atif import export_atif, to_atif
from trajlake.export.jsonl import read_canonical
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._registry import detect
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.atif import AtifAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data"

STOCKS: dict[str, Any] = {
    "schema_version": "ATIF-v1.4",
    "session_id": "synthetic-0001",
    "agent": {"name": "harbor-agent", "version": "1.0.0", "model_name": "model-a", "extra": {}},
    "notes": "Synthetic trajectory for tests.",
    "final_metrics": {
        "total_prompt_tokens": 1120,
        "total_completion_tokens": 124,
        "total_cached_tokens": 200,
        "total_cost_usd": 0.00078,
        "total_steps": 4,
    },
    "steps": [
        {
            "step_id": 1,
            "timestamp": "2025-10-11T10:29:59Z",
            "source": "system",
            "message": "Be brief.",
        },
        {
            "step_id": 2,
            "timestamp": "2025-10-11T10:30:00Z",
            "source": "user",
            "message": "What is the price of EXMPL?",
        },
        {
            "step_id": 3,
            "timestamp": "2025-10-11T10:30:02Z",
            "source": "agent",
            "model_name": "model-b",
            "reasoning_effort": "medium",
            "message": "I will look up price and volume.",
            "reasoning_content": "Two lookups, in one step.",
            "tool_calls": [
                {"tool_call_id": "c1", "function_name": "search", "arguments": {"q": "price"}},
                {"tool_call_id": "c2", "function_name": "search", "arguments": {"q": "volume"}},
            ],
            "observation": {
                "results": [
                    {"source_call_id": "c1", "content": "EXMPL trades at 185.35"},
                    {"source_call_id": "c2", "content": "volume 1.5M"},
                ]
            },
            "metrics": {"prompt_tokens": 520, "completion_tokens": 80, "cached_tokens": 200},
        },
        {
            "step_id": 4,
            "timestamp": "2025-10-11T10:30:05Z",
            "source": "agent",
            "message": "EXMPL is at 185.35 on 1.5M shares.",
            "metrics": {
                "prompt_tokens": 600,
                "completion_tokens": 44,
                "completion_token_ids": [11, 12, 13],
                "logprobs": [-0.1, -0.2, -0.3],
                "cost_usd": 0.00033,
                "extra": {"reasoning_tokens": 12},
            },
        },
    ],
}


def _write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, indent=2))
    return path


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(AtifAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _read(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def test_steps_become_messages(tmp_path: Path) -> None:
    (record,) = _records(_write(tmp_path / "trajectory.json", STOCKS))
    assert [m.role for m in record.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    system, user, agent, r1, r2, final = record.messages
    assert (system.content, user.content) == ("Be brief.", "What is the price of EXMPL?")
    assert agent.reasoning == "Two lookups, in one step."
    assert agent.tool_calls is not None
    assert [(c.id, c.name, json.loads(c.arguments or "")) for c in agent.tool_calls] == [
        ("c1", "search", {"q": "price"}),
        ("c2", "search", {"q": "volume"}),
    ]
    assert [(r.tool_call_id, r.name, r.content) for r in (r1, r2)] == [
        ("c1", "search", "EXMPL trades at 185.35"),
        ("c2", "search", "volume 1.5M"),
    ]
    assert (agent.model, final.model) == ("model-b", "model-a")  # step model, else the agent's
    assert (agent.prompt_tokens, agent.completion_tokens, agent.cached_tokens) == (520, 80, 200)
    assert (final.token_ids, final.logprobs, final.reasoning_tokens) == (
        [11, 12, 13],
        [-0.1, -0.2, -0.3],
        12,
    )
    assert (
        agent.timestamp is not None and agent.timestamp.isoformat() == "2025-10-11T10:30:02+00:00"
    )
    assert r1.timestamp is None  # observations carry no time of their own
    # Per-step metrics exist: the totals are their sums (1120 / 124, as final_metrics says).
    assert (record.prompt_tokens, record.completion_tokens) == (1120, 124)
    # Two models, one message each: the one with more completion tokens (80 vs 44) is the policy.
    assert (record.harness, record.harness_version, record.policy_model) == (
        "harbor-agent",
        "1.0.0",
        "model-b",
    )
    assert record.attrs is not None and record.attrs["models"] == {"model-b": 1, "model-a": 1}
    assert record.cost_usd == 0.00078
    assert record.attrs is not None and record.attrs["session_id"] == "synthetic-0001"
    assert record.resolved is None and record.reward is None  # Harbor keeps rewards outside
    assert record.started_at is not None and record.ended_at is not None
    assert record.started_at < record.ended_at


def test_v16_parts_system_observations_and_totals(tmp_path: Path) -> None:
    document = {
        "schema_version": "ATIF-v1.6",
        "session_id": "synthetic-0002",
        "agent": {"name": "cua", "version": "0.1"},
        "final_metrics": {"total_prompt_tokens": 900, "total_completion_tokens": 30},
        "steps": [
            {
                "step_id": 1,
                "source": "user",
                "message": [
                    {"type": "text", "text": "Click the button."},
                    {"type": "image", "source": {"media_type": "image/png", "path": "shots/1.png"}},
                ],
            },
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [{"tool_call_id": "k1", "function_name": "click", "arguments": {}}],
                "observation": {"results": [{"source_call_id": "k1", "content": "clicked"}]},
            },
            {
                "step_id": 3,
                "source": "system",
                "message": "",
                "observation": {"results": [{"content": "context compacted"}]},
            },
        ],
    }
    (record,) = _records(_write(tmp_path / "t.json", document))
    user = record.messages[0]
    assert user.content == "Click the button."
    assert user.parts is not None
    assert [(p.type, p.uri, p.mime_type) for p in user.parts] == [
        ("text", None, None),
        ("image", "shots/1.png", "image/png"),
    ]
    # A system step with an empty message only carries its observation.
    assert [m.role for m in record.messages] == ["user", "assistant", "tool", "tool"]
    assert (record.messages[3].tool_call_id, record.messages[3].content) == (
        None,
        "context compacted",
    )
    # No step has metrics: final_metrics gives the totals.
    assert (record.prompt_tokens, record.completion_tokens, record.total_tokens) == (900, 30, 930)


def test_jsonl_of_trajectories_and_bad_input(tmp_path: Path) -> None:
    second = copy.deepcopy(STOCKS) | {"session_id": "synthetic-0003"}
    wrong = copy.deepcopy(STOCKS) | {"session_id": "x", "schema_version": "ATIF-v2.0"}
    unknown = copy.deepcopy(STOCKS) | {"session_id": "y"}
    unknown["steps"][1]["source"] = "narrator"
    path = tmp_path / "many.jsonl"
    path.write_text(
        "\n".join(json.dumps(d) for d in (STOCKS, second, wrong, unknown)) + "\n{oops\n"
    )
    items = _read(path)
    assert [type(i).__name__ for i in items] == [
        "ParsedTrajectory",
        "ParsedTrajectory",
        "BadRecord",
        "BadRecord",
        "BadRecord",
    ]
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert [b.line for b in bad] == [3, 4, 5]
    assert "unsupported ATIF version" in bad[0].error and "narrator" in bad[1].error
    assert "malformed JSON" in bad[2].error
    good = [i for i in items if isinstance(i, ParsedTrajectory)]
    assert good[0].record.trajectory_id != good[1].record.trajectory_id
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(STOCKS, indent=2)[:500])
    (item,) = _read(cut)
    assert isinstance(item, BadRecord) and "malformed JSON" in item.error


def test_sniff_is_specific(tmp_path: Path) -> None:
    adapter = AtifAdapter()
    path = _write(tmp_path / "trajectory.json", STOCKS)
    source = SourceFile(str(path), os.path.getsize(path))
    assert adapter.sniff(source, read_head(source)) == 1.0
    others = [
        *expand_sources([str(DATA)]),
        *(expand_sources([str(SHARED_CORPUS)]) if SHARED_CORPUS.exists() else []),
    ]
    for other in others:
        if "/harbor/" in other.uri and other.name == "trajectory.json":
            continue  # Harbor trial folders hold ATIF files (tests/ingest/test_harbor.py)
        assert adapter.sniff(other, read_head(other)) == 0.0, other.uri


def test_canonical_lines_of_atif_imports_stay_canonical(lake: tl.Lake, tmp_path: Path) -> None:
    lake.ingest(_write(tmp_path / "trajectory.json", STOCKS))
    out = tmp_path / "canonical.jsonl"
    lake.export_jsonl(str(out))
    assert '"schema_version": "ATIF-v1.4"' in out.read_text()  # in attrs, not at the top
    source = SourceFile(str(out), os.path.getsize(out))
    assert AtifAdapter().sniff(source, read_head(source)) == 0.0
    assert detect(source).name == "canonical"


_FIELDS = (
    "role", "content", "parts", "reasoning", "tool_calls", "tool_call_id", "name", "is_error",
    "exit_code", "model", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
    "reasoning_tokens", "token_ids", "logprobs", "timestamp", "turn",
)  # fmt: skip


def _assert_same(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    assert [t["trajectory_id"] for t in before] == [t["trajectory_id"] for t in after]
    for a, b in zip(before, after, strict=True):
        assert len(a["messages"]) == len(b["messages"])
        for x, y in zip(a["messages"], b["messages"], strict=True):
            for field in _FIELDS:
                if field == "finish_reason":
                    continue  # ATIF has no finish reason
                left, right = x.get(field), y.get(field)
                if field == "content":  # ATIF messages are never null: "" stands for none
                    left, right = left or "", right or ""
                assert left == right, (a["trajectory_id"], x["idx"], field)
        for field in ("task_id", "resolved", "reward", "rewards", "outcome_source", "status"):
            assert a[field] == b[field], field
        for field in ("prompt_tokens", "completion_tokens", "total_tokens", "content_hash"):
            assert a[field] == b[field], field
        assert (a["tools"], a["attrs"], a["policy_model"]) == (
            b["tools"],
            b["attrs"],
            b["policy_model"],
        )


@pytest.mark.parametrize("out", ["atif", "atif.jsonl", "atif.jsonl.gz"])
def test_export_then_import_round_trips(lake: tl.Lake, tmp_path: Path, out: str) -> None:
    # Real sources: Inspect logs (tool calls, errors, images, per-call usage) and NeMo Gym
    # rollouts (reasoning, trajectory-level usage, shaped rewards).
    lake.ingest([DATA / "inspect_ai", DATA / "responses"])
    before = read_canonical(lake)
    report = export_atif(lake, str(tmp_path / out))
    assert report.trajectories == len(before) == 30
    assert report.messages == sum(len(t["messages"]) for t in before)
    if out == "atif":
        files = sorted(f.name for f in (tmp_path / out).iterdir())
        # One file per trajectory, and the manifest mapping each file to its trajectory id.
        assert files.pop(files.index("manifest.jsonl")) and len(files) == 30
        assert all(f.endswith(".json") for f in files)
    other = tl.open_lake(tmp_path / "other", create=True)
    imported = other.ingest(tmp_path / out)
    assert imported.formats == {"atif": 1 if out != "atif" else 30}
    assert (imported.added, imported.quarantined) == (30, 0)
    _assert_same(before, read_canonical(other))
    # Into the lake it came from: the same trajectories, nothing added.
    assert lake.ingest(tmp_path / out).added == 0


def test_export_keeps_what_atif_has_no_field_for(tmp_path: Path) -> None:
    record = {
        "trajectory_id": "t/1",
        "harness": None,
        "messages": [
            {"role": "user", "content": "hi", "thread": "main", "idx": 0},
            {
                "role": "assistant",
                "thread": "main",
                "idx": 1,
                "tool_calls": [
                    {"id": None, "name": "patch", "arguments": "*** Begin Patch", "type": "custom"},
                    {"id": "b", "name": "ls", "arguments": '{"path":"."}', "type": "function"},
                ],
            },
            {
                "role": "tool",
                "content": "boom",
                "tool_call_id": "b",
                "is_error": True,
                "exit_code": 2,
                "thread": "main",
                "idx": 2,
            },
            {"role": "user", "content": "sub", "thread": "agent-1", "idx": 0},
        ],
    }
    document = to_atif(record)
    assert document["agent"] == {"name": "unknown", "version": "unknown"}
    assert "1 message(s) of other threads" in document["notes"]
    step = document["steps"][1]
    assert [c["tool_call_id"] for c in step["tool_calls"]] == ["call-2-0", "b"]
    assert step["tool_calls"][0]["arguments"] == {"_raw_arguments": "*** Begin Patch"}
    assert step["extra"]["trajlake"]["tool_call_types"] == ["custom", "function"]
    assert step["extra"]["trajlake"]["tool_call_arguments"] == [None, '{"path":"."}']
    assert step["extra"]["trajlake"]["results"] == [{"is_error": True, "exit_code": 2}]
    (parsed,) = _records(_write(tmp_path / "t.json", document))
    assert parsed.trajectory_id == "t/1" and parsed.harness is None
    calls = parsed.messages[1].tool_calls
    assert calls is not None
    assert [(c.arguments, c.type) for c in calls] == [
        ("*** Begin Patch", "custom"),
        ('{"path":"."}', "function"),
    ]
    result = parsed.messages[2]
    assert (result.is_error, result.exit_code, result.name) == (True, 2, "ls")  # name: by call id
