"""τ²-bench adapter: voice-mode simulations checked against their ticks; text-mode runs."""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.tau2_bench import Tau2BenchAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
EXPERIMENT = Path(__file__).parents[1] / "data" / "tau2_bench" / "experiment"
SIMULATION = EXPERIMENT / "simulations" / "49b22f0c-4a56-41c5-922f-bc2a56e53a23.json.gz"
FULL = (
    SHARED_CORPUS
    / "06_eval_frameworks/tau2_bench/tests/test_voice/test_interaction_metrics/testdata/experiment"
)
needs_corpus = pytest.mark.skipif(not FULL.exists(), reason="shared corpus not available")


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(Tau2BenchAdapter().read(source, stream))


def _one(path: Path) -> CanonicalTrajectory:
    (item,) = _read(path)
    assert isinstance(item, ParsedTrajectory), item
    return normalize(item.record)


def _load(path: Path) -> dict[str, Any]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    result: dict[str, Any] = json.loads(data)
    return result


def _speech_runs(ticks: list[dict[str, Any]], party: str) -> list[tuple[int, int]]:
    """(first, last) tick of each run of consecutive speaking ticks of one party."""
    runs = []
    for speaking, group in itertools.groupby(
        ticks, key=lambda t: bool(t[f"{party}_chunk"]["contains_speech"])
    ):
        ids = [t["tick_id"] for t in group]
        if speaking:
            runs.append((ids[0], ids[-1]))
    return runs


def _check_voice(path: Path, record: CanonicalTrajectory) -> None:
    sim = _load(path)
    ticks = sim["ticks"]
    agent, user = _speech_runs(ticks, "agent"), _speech_runs(ticks, "user")
    expected = sorted(
        [(a, 0, "assistant", b) for a, b in agent] + [(a, 1, "user", b) for a, b in user]
    )
    assert [m.role for m in record.messages] == [role for _, _, role, _ in expected]
    assert record.messages[0].attrs is not None
    assert [(m.attrs or {}).get("tick_start") for m in record.messages] == [e[0] for e in expected]
    assert [(m.attrs or {}).get("tick_end") for m in record.messages] == [e[3] for e in expected]
    stamps = {t["tick_id"]: t["timestamp"] for t in ticks}
    assert [m.timestamp for m in record.messages] == [
        tl_time(stamps[first]) for first, _, _, _ in expected
    ]
    # The published ticks carry no transcript, no tool calls and no reward: nothing invented.
    assert all(m.content is None and not m.tool_calls for m in record.messages)
    assert record.reward is None and record.resolved is None and record.outcome_source is None
    assert record.prompt_tokens is None and record.cost_usd is None
    assert (record.status, record.exit_reason) == ("completed", sim["termination_reason"])
    assert record.started_at == tl_time(sim["start_time"])
    assert record.ended_at == tl_time(sim["end_time"])
    assert record.attempt == sim["trial"]
    assert record.attrs is not None
    assert record.attrs["simulation_id"] == sim["id"] and record.attrs["n_ticks"] == len(ticks)


def tl_time(text: str) -> dt.datetime:
    """A τ²-bench naive ISO time as the aware UTC datetime the adapter stores."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def test_voice_simulation_matches_its_ticks() -> None:
    record = _one(SIMULATION)
    _check_voice(SIMULATION, record)
    # Counted from the file: 15 agent and 11 user speech runs over 973 ticks.
    assert Counter(m.role for m in record.messages) == {"assistant": 15, "user": 11}
    assert record.n_turns == 15
    # Run info comes from the results.json beside the simulations folder.
    info = _load(EXPERIMENT / "results.json")["info"]
    assert record.task_id == "retail/40" and record.task_source == "tau2-bench/retail"
    assert record.policy_model == info["agent_info"]["llm"] == "openai:gpt-realtime-2"
    assert record.harness_version == info["git_commit"]
    assert record.attrs is not None and record.attrs["user_model"] == "gpt-4.1-2025-04-14"


@needs_corpus
def test_all_corpus_simulations() -> None:
    counts = {}
    for path in sorted((FULL / "simulations").glob("*.json")):
        record = _one(path)
        _check_voice(path, record)
        counts[path.stem[:8]] = len(record.messages)
    assert counts == {"49b22f0c": 26, "7c6a3e3e": 35, "cd9c5ed2": 33}
    assert _read(FULL / "results.json") == []  # run info only, its `tasks` empty


def test_ids_do_not_depend_on_location(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(gzip.decompress(SIMULATION.read_bytes()))
    moved = _one(copy)
    original = _one(SIMULATION)
    assert moved.trajectory_id == original.trajectory_id
    assert moved.task_id == "40" and moved.policy_model is None  # no results.json beside it


def _text_simulation(sim_id: str, reward: float) -> dict[str, Any]:
    """A half-duplex simulation in τ²-bench's SimulationRun layout (messages, reward_info)."""
    return {
        "id": sim_id,
        "task_id": "7",
        "timestamp": "2025-06-01T10:00:09",
        "start_time": "2025-06-01T10:00:00",
        "end_time": "2025-06-01T10:00:09",
        "duration": 9.0,
        "termination_reason": "max_steps",
        "agent_cost": 0.012,
        "user_cost": 0.003,
        "reward_info": {"reward": reward, "reward_breakdown": {"DB": reward, "COMMUNICATE": 1.0}},
        "messages": [
            {"role": "assistant", "content": "Hi! How can I help?", "turn_idx": 0},
            {"role": "user", "content": "Cancel order #W1.", "turn_idx": 1},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "name": "get_order", "arguments": {"order_id": "#W1"}},
                    {"id": "c2", "name": "get_user", "arguments": {}},
                ],
                "usage": {"prompt_tokens": 120, "completion_tokens": 30},
                "cost": 0.004,
                "timestamp": "2025-06-01T10:00:05",
                "turn_idx": 2,
            },
            {
                "role": "tool",
                "tool_messages": [
                    {"id": "c1", "role": "tool", "content": "{}", "error": False},
                    {"id": "c2", "role": "tool", "content": "not found", "error": True},
                ],
            },
            {"role": "user", "content": None, "tool_calls": [{"name": "toggle", "arguments": {}}]},
        ],
        "trial": 2,
        "seed": 1,
    }


def test_results_file_with_simulations(tmp_path: Path) -> None:
    info = _load(EXPERIMENT / "results.json")["info"]
    sims: list[Any] = [_text_simulation("s-1", 1.0), [1], _text_simulation("s-2", 0.0)]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"timestamp": "x", "info": info, "tasks": [], "simulations": sims}))
    source = SourceFile(str(path), os.path.getsize(path))
    assert Tau2BenchAdapter().sniff(source, read_head(source)) == 1.0
    items = _read(path)
    assert [type(i).__name__ for i in items] == [
        "ParsedTrajectory",
        "BadRecord",
        "ParsedTrajectory",
    ]
    assert isinstance(items[1], BadRecord) and items[1].offset == 1
    first, second = (normalize(i.record) for i in items if isinstance(i, ParsedTrajectory))
    assert (first.task_id, first.attempt, first.status) == ("retail/7", 2, "truncated")
    assert (first.reward, first.resolved, second.resolved) == (1.0, True, False)
    assert first.rewards == {"DB": 1.0, "COMMUNICATE": 1.0} and first.cost_usd == 0.012
    roles = [m.role for m in first.messages]
    assert roles == ["assistant", "user", "assistant", "tool", "tool", "user"]
    call = first.messages[2]
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls or []] == [
        ("c1", "get_order", '{"order_id": "#W1"}'),
        ("c2", "get_user", "{}"),
    ]
    assert (call.prompt_tokens, call.completion_tokens) == (120, 30)
    assert [(m.tool_call_id, m.name, m.is_error) for m in first.messages[3:5]] == [
        ("c1", "get_order", False),
        ("c2", "get_user", True),
    ]
    user_call = (first.messages[5].tool_calls or [])[0]
    assert (user_call.id, user_call.name) == (None, "toggle")  # τ²-bench's "" id is no id
    assert first.n_tool_calls == 3 and first.prompt_tokens == 120


def test_bad_files_are_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text('{"id": "x", "task_id": "1", "termination_reason": "user_stop"')
    (item,) = _read(path)
    assert isinstance(item, BadRecord) and "malformed JSON" in item.error
    path.write_text(json.dumps({"id": "x", "task_id": "1", "termination_reason": "user_stop"}))
    (item,) = _read(path)
    assert isinstance(item, BadRecord) and "messages or ticks" in item.error


def test_sniff_is_specific() -> None:
    adapter = Tau2BenchAdapter()
    for path, expected in ((SIMULATION, 1.0), (EXPERIMENT / "results.json", 0.0)):
        source = SourceFile(str(path), os.path.getsize(path))
        assert adapter.sniff(source, read_head(source)) == expected
    if SHARED_CORPUS.exists():
        for other in expand_sources([str(SHARED_CORPUS)]):
            score = adapter.sniff(other, read_head(other))
            mine = "/tau2_bench/" in other.uri and "/simulations/" in other.uri
            assert (score >= 0.9) == mine, other.uri


def test_ingest_and_query(lake: tl.Lake) -> None:
    report = lake.ingest(EXPERIMENT)  # results.json is recognised by no format and skipped
    assert report.formats == {"tau2-bench": 1}
    assert (report.added, report.quarantined) == (1, 0)
    rows = lake.sql("SELECT role, count(*) FROM messages GROUP BY role ORDER BY role").rows()
    assert [tuple(r) for r in rows] == [("assistant", 15), ("user", 11)]
    row = lake.sql("SELECT task_id, status, exit_reason, reward FROM trajectories").rows()[0]
    assert tuple(row) == ("retail/40", "completed", "user_stop", None)
    assert lake.ingest(EXPERIMENT, format="tau2-bench").added == 0  # results.json yields nothing
