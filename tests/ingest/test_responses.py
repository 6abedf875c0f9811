"""Responses-API adapter: NeMo Gym rollouts checked against their own JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._models import normalize_model
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.responses import ResponsesAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "responses"
CORPUS = SHARED_CORPUS / "06_eval_frameworks" / "nemo_gym_rollouts"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not available")
BINARY_ENVS = {"aviary", "example_multi_step"}  # rewards all 0/1 in these files
SHAPED_ENVS = {"blackjack", "example_tool_call_multireward", "grl_sokoban"}  # -1/1, 2.0, 10/-2


def _file(root: Path, env: str) -> Path:
    return root / "resources_servers" / env / "data" / "example_rollouts.jsonl"


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(ResponsesAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _read(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _items(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation's items as the file has them (last transition when cumulative)."""
    output = row["response"]["output"]
    if output and isinstance(output[0], list):
        output = output[-1]
    inputs = row["responses_create_params"]["input"]
    inputs = (
        [{"type": "message", "role": "user", "content": inputs}]
        if isinstance(inputs, str)
        else inputs
    )
    return [*inputs, *output]


def _check_env(root: Path, env: str) -> list[CanonicalTrajectory]:
    path = _file(root, env)
    rows = _rows(path)
    records = _records(path)
    assert len(records) == len(rows) == 5
    for row, record in zip(rows, records, strict=True):
        items = _items(row)
        calls = [i for i in items if i.get("type") == "function_call"]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        record_calls = [c for m in record.messages for c in m.tool_calls or []]
        assert [(c.id, c.name, c.arguments) for c in record_calls] == [
            (c["call_id"], c["name"], c["arguments"]) for c in calls
        ]
        tools = [m for m in record.messages if m.role == "tool"]
        assert [(m.tool_call_id, m.content) for m in tools] == [
            (o["call_id"], o["output"]) for o in outputs
        ]
        names = {c["call_id"]: c["name"] for c in calls}
        assert all(m.name == names[m.tool_call_id] for m in tools)
        users = [i for i in items if i.get("type") == "message" and i.get("role") == "user"]
        assert sum(1 for m in record.messages if m.role == "user") == len(users)
        assert record.task_source == env
        assert record.policy_model == normalize_model(row["response"]["model"])
        assert record.reward == row["reward"]
        assert record.trajectory_id == _records(path)[rows.index(row)].trajectory_id
        usage = row["response"].get("usage")
        if usage:
            assert record.prompt_tokens == usage["input_tokens"]
            assert record.completion_tokens == usage["output_tokens"]
    return records


def test_multi_step_tool_calls_outcomes_and_usage() -> None:
    records = _check_env(DATA, "example_multi_step")
    assert all(r.resolved is True and r.outcome_source == "reward" for r in records)
    record = records[0]
    row = _rows(_file(DATA, "example_multi_step"))[0]
    # Three calls, three results, then the answer: four model turns, one assistant each.
    turns = ["assistant", "tool"] * 3
    assert [m.role for m in record.messages] == ["system", "user", *turns, "assistant"]
    assert record.messages[-1].content == row["response"]["output"][-1]["content"][0]["text"]
    # Numbers beside `reward` are named rewards; booleans (accuracy, flags) stay in attrs.
    assert record.rewards == {"set_overlap": row["set_overlap"]}
    assert record.attrs is not None and record.attrs["accuracy"] is row["accuracy"] is True
    # Usage covers several calls: it is a trajectory total, not put on one message.
    assert all(m.prompt_tokens is None for m in record.messages)
    assert record.total_tokens == row["response"]["usage"]["total_tokens"]
    assert (
        record.started_at is not None
        and record.started_at.timestamp() == row["response"]["created_at"]
    )
    assert record.status == "completed" and record.tools == row["responses_create_params"]["tools"]


def test_cumulative_transitions_read_from_the_last_one() -> None:
    records = _check_env(DATA, "aviary")
    rows = _rows(_file(DATA, "aviary"))
    assert sum(1 for r in records if r.resolved) == sum(1 for r in rows if r["reward"] == 1.0) == 1
    # The request listed no tools; the response did.
    assert records[0].tools == rows[0]["response"]["tools"]
    assert records[0].harness == rows[0]["agent_ref"]["name"] == "gsm8k_aviary_agent"


def test_shaped_rewards_give_no_resolved() -> None:
    blackjack = _check_env(DATA, "blackjack")
    assert [r.reward for r in blackjack] == [-1.0, 1.0, -1.0, 1.0, 1.0]
    assert all(r.resolved is None for r in blackjack)
    # Multi-turn: user observations between assistant moves, one usage total.
    assert blackjack[0].status == "completed"  # terminated, not truncated
    multi = _check_env(DATA, "example_tool_call_multireward")
    row = _rows(_file(DATA, "example_tool_call_multireward"))[0]
    assert all(r.resolved is None and r.reward == 2.0 for r in multi)
    assert multi[0].rewards is not None
    assert {k: v for k, v in multi[0].rewards.items() if k.startswith("reward_components.")} == {
        f"reward_components.{k}": v for k, v in row["reward_components"].items()
    }
    assert multi[0].attempt == row["_ng_rollout_index"]
    assert multi[0].task_id == f"example_tool_call_multireward/{row['_ng_task_index']}"
    # reasoning + call, then the answer after the tool's output: two model turns.
    first, second = [m for m in multi[0].messages if m.role == "assistant"]
    assert first.tool_calls is not None and first.content is None and second.tool_calls is None
    assert first.attrs == {"item_ids": [i["id"] for i in row["response"]["output"][:2]]}
    assert multi[0].prompt_tokens == row["response"]["usage"]["input_tokens"]


@needs_corpus
def test_every_environment_matches_its_file() -> None:
    envs = sorted(p.name for p in (CORPUS / "resources_servers").iterdir())
    assert len(envs) == 14
    resolved = {}
    for env in envs:
        records = _check_env(CORPUS, env)
        rows = _rows(_file(CORPUS, env))
        binary = all(r["reward"] in (0.0, 1.0) for r in rows)
        assert binary == (env not in SHAPED_ENVS), env
        expected = [r["reward"] == 1.0 if binary else None for r in rows]
        assert [r.resolved for r in records] == expected, env
        resolved[env] = sum(1 for r in records if r.resolved)
    assert sum(resolved.values()) == 38  # rows with reward 1.0 in the 11 binary environments
    # A rollout whose only assistant message made the one call carries the usage itself.
    single = _records(_file(CORPUS, "example_single_tool_call"))
    lone = [r for r in single if sum(m.role == "assistant" for m in r.messages) == 1]
    assert lone, "expected rollouts answered in one call"
    for record in lone:
        (assistant,) = [m for m in record.messages if m.role == "assistant"]
        assert assistant.prompt_tokens == record.prompt_tokens is not None
        assert assistant.cached_tokens is not None and assistant.reasoning_tokens is not None
    deepswe = _records(_file(CORPUS, "deepswe"))
    row = _rows(_file(CORPUS, "deepswe"))[0]
    assert deepswe[0].task_id == row["task_id"] == "ts-pattern-match-each"
    assert deepswe[0].rewards is not None
    assert deepswe[0].rewards["f2p_passed"] == row["f2p_passed"]
    assert "f2p_total" not in deepswe[0].rewards  # counts of tests, not scores: kept in attrs
    assert deepswe[0].attrs is not None and deepswe[0].attrs["f2p_total"] == row["f2p_total"]


def test_sniff_is_specific() -> None:
    adapter = ResponsesAdapter()
    path = _file(DATA, "aviary")
    source = SourceFile(str(path), os.path.getsize(path))
    assert adapter.sniff(source, read_head(source)) == 1.0
    if SHARED_CORPUS.exists():
        for other in expand_sources([str(SHARED_CORPUS)]):
            score = adapter.sniff(other, read_head(other))
            assert (score >= 0.9) == other.uri.endswith("example_rollouts.jsonl"), other.uri


def test_bad_lines_are_quarantined(tmp_path: Path) -> None:
    lines = _file(DATA, "blackjack").read_text().splitlines()
    broken = json.loads(lines[1])
    broken["response"] = "gone"
    odd = json.loads(lines[2])
    odd["response"]["output"].append({"type": "message", "role": "narrator", "content": "?"})
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(broken), json.dumps(odd), "{oops", lines[3]]))
    items = _read(path)
    assert [type(i).__name__ for i in items] == [
        "ParsedTrajectory",
        "BadRecord",
        "BadRecord",
        "BadRecord",
        "ParsedTrajectory",
    ]
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert [b.line for b in bad] == [2, 3, 4]
    assert "response" in bad[0].error and bad[1].field is not None
    assert "role" in bad[1].field and "malformed JSON" in bad[2].error


def test_ingest_and_query(lake: tl.Lake) -> None:
    report = lake.ingest(DATA)
    assert report.formats == {"responses": 4}
    assert (report.added, report.quarantined) == (20, 0)
    rows = lake.sql(
        "SELECT task_source, count(*), count(resolved), sum(n_tool_calls) FROM trajectories "
        "GROUP BY task_source ORDER BY task_source"
    ).rows()
    assert [(e, n, r, int(c)) for e, n, r, c in rows] == [
        ("aviary", 5, 5, 13),
        ("blackjack", 5, 0, 0),
        ("example_multi_step", 5, 5, 16),
        ("example_tool_call_multireward", 5, 0, 5),
    ]
    pairs = lake.sql(
        "SELECT count(*) FROM tool_calls c JOIN messages m ON m.trajectory_id = c.trajectory_id "
        "AND m.role = 'tool' AND m.tool_call_id = c.call_id AND m.name = c.tool_name"
    ).rows()[0][0]
    assert pairs == 13 + 16 + 5
    overlap = lake.sql(
        "SELECT count(*) FROM trajectories WHERE rewards['set_overlap'] = 1.0 "
        "AND json_extract(attrs, '$.accuracy')::BOOLEAN"
    ).rows()[0][0]
    assert overlap == 5
    assert lake.ingest(DATA, format="responses").added == 0
