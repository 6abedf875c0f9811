"""Orchard-style RL rollout dumps: every rollout stored, token ids round-trip, sibling rewards
become outcomes, missing rewards and malformed files reported (fixtures: tests/data/orchard_rl,
synthetic files described in its README)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest._registry import classify
from trajlake.ingest._sources import SourceFile
from trajlake.ingest.orchard_rl import rollout_tokens

DATA = Path(__file__).resolve().parents[1] / "data" / "orchard_rl"
DUMP = DATA / "dump"
TASK = "astropy__astropy-12907"


def _docs() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DUMP.glob("rollout_*.json"))}


def _by_file(lake: tl.Lake) -> dict[str, dict[str, Any]]:
    """file name → canonical trajectory dict."""
    rows = lake.sql("SELECT trajectory_id, source_uri FROM trajectories").rows()
    return {
        uri.rsplit("/", 1)[-1]: lake.trajectory(tid).model_dump(mode="json") for tid, uri in rows
    }


@pytest.fixture
def ingested(lake: tl.Lake) -> tuple[tl.Lake, Any]:
    report = lake.ingest([str(DUMP), str(DATA / "broken")], workers=1)
    return lake, report


def test_every_rollout_is_stored_and_rewards_files_are_companions(
    ingested: tuple[tl.Lake, Any],
) -> None:
    lake, report = ingested
    assert report.added == 5 and report.formats == {"orchard-rl": 6}
    assert report.files_companion == 2 and not report.files_skipped
    stored = _by_file(lake)
    assert sorted(stored) == sorted(_docs())
    first = stored["rollout_00.json"]
    assert first["task_id"] == TASK and first["stage"] == "rl"
    assert first["status"] == "completed" and first["exit_reason"] == "Submitted"
    assert first["final_output"] == _docs()["rollout_00.json"]["model_patch"]
    assert stored["rollout_01.json"]["status"] == "truncated"  # LimitsExceeded
    assert stored["rollout_02.json"]["attrs"]["metadata"]["sampler"]["temperature"] == 1.0
    again = lake.ingest([str(DUMP)], workers=1)
    assert again.added == 0 and again.duplicates == 5


def test_token_ids_round_trip(ingested: tuple[tl.Lake, Any]) -> None:
    lake, _ = ingested
    stored = _by_file(lake)
    for name, doc in _docs().items():
        expected = (doc["prompt_token_ids"], doc["response_token_ids"], doc["loss_mask"])
        assert rollout_tokens(stored[name]) == expected, name


def test_token_ids_sit_on_the_messages_they_belong_to(ingested: tuple[tl.Lake, Any]) -> None:
    lake, _ = ingested
    stored = _by_file(lake)["rollout_02.json"]
    doc = _docs()["rollout_02.json"]
    messages = stored["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    # The prompt block (system + user) sits on its last message; so does the tool block.
    assert messages[0]["token_ids"] is None and messages[3]["token_ids"] is None
    assert messages[1]["token_ids"] == doc["prompt_token_ids"]
    response, mask = doc["response_token_ids"], doc["loss_mask"]
    first_run = mask.index(0)
    assert messages[2]["token_ids"] == response[:first_run]
    assert messages[2]["completion_tokens"] == first_run
    assert messages[4]["token_ids"] == response[first_run : first_run + mask[first_run:].index(1)]
    assert messages[5]["token_ids"] == response[len(response) - mask[::-1].index(0) :]
    first = _by_file(lake)["rollout_00.json"]
    assert {m["tokenizer"] for m in first["messages"] if m["token_ids"]} == {
        "synthetic-whitespace-hash"
    }


def test_unsplittable_tokens_are_kept_whole_and_reported(ingested: tuple[tl.Lake, Any]) -> None:
    lake, report = ingested
    stored = _by_file(lake)["rollout_04.json"]
    info = stored["attrs"]["orchard_rl"]
    assert "consecutive assistant messages" in info["token_split"]
    assert all(m["token_ids"] is None for m in stored["messages"])
    assert any("rollout_04.json: token ids kept whole" in p for p in report.problems)


def test_rewards_become_outcomes(ingested: tuple[tl.Lake, Any]) -> None:
    lake, _ = ingested
    rows = lake.sql(
        "SELECT t.source_uri, o.resolved, o.reward, o.outcome_source "
        "FROM outcomes o JOIN trajectories t USING (trajectory_id)"
    ).rows()
    got = {uri.rsplit("/", 1)[-1]: (res, rew, src) for uri, res, rew, src in rows}
    assert got == {
        "rollout_00.json": (True, 1.0, "orchard-rl:rewards.json"),  # by rollout id
        "rollout_01.json": (False, -1.0, "orchard-rl:rewards.json"),
        "rollout_02.json": (False, -1.0, "orchard-rl:rewards.json"),  # by file stem
        "rollout_03.json": (None, None, None),
        "rollout_04.json": (True, 1.0, "orchard-rl:rollout"),  # the rollout's own reward
    }


def test_a_rollout_missing_from_rewards_is_reported(ingested: tuple[tl.Lake, Any]) -> None:
    lake, report = ingested
    missing = [p for p in report.problems if "rollout without reward" in p]
    assert len(missing) == 1 and "rollout_03.json" in missing[0]
    assert f"'{TASK}-r3' or 'rollout_03'" in missing[0]
    stored = _by_file(lake)["rollout_03.json"]
    assert "no entry" in stored["attrs"]["orchard_rl"]["reward_missing"]


def test_a_malformed_rollout_is_quarantined_with_file_and_reason(
    ingested: tuple[tl.Lake, Any],
) -> None:
    lake, report = ingested
    assert report.quarantined == 1
    [(uri, error)] = lake.sql("SELECT source_uri, error FROM quarantine").rows()
    assert uri.endswith("broken/bad_mask.json")
    bad = json.loads((DATA / "broken" / "bad_mask.json").read_text())
    n = len(bad["response_token_ids"])
    assert error == f"field 'loss_mask': {n - 2} values for {n} response tokens"


def test_bad_token_values_and_parent_rewards_jsonl(tmp_path: Path, lake: tl.Lake) -> None:
    task_dir = tmp_path / "dump" / "task-a"
    task_dir.mkdir(parents=True)
    doc = _docs()["rollout_01.json"]
    del doc["rollout_id"]
    (task_dir / "r0.json").write_text(json.dumps(doc))
    bad = {**doc, "loss_mask": [2] * len(doc["loss_mask"])}
    (task_dir / "r1.json").write_text(json.dumps(bad))
    lines = [{"file": "task-a/r0.json", "reward": 0.5}, {"file": "task-a/r1", "reward": 0}]
    (tmp_path / "dump" / "rewards.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    report = lake.ingest(str(tmp_path / "dump"), workers=1)
    assert report.added == 1 and report.quarantined == 1 and report.files_companion == 1
    [(res, rew, src)] = lake.sql("SELECT resolved, reward, outcome_source FROM outcomes").rows()
    assert (res, rew, src) == (True, 0.5, "orchard-rl:rewards.jsonl")
    [error] = lake.sql("SELECT error FROM quarantine").rows()
    assert error[0] == "field 'loss_mask': item 0 is 2, expected 0 or 1"


def test_detection_is_by_structure(tmp_path: Path) -> None:
    doc = _docs()["rollout_01.json"]
    # Messages first and a long response: the token keys lie far past the 64 KiB head.
    doc["messages"].append({"role": "user", "content": "x " * 40000})
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    assert big.stat().st_size > 65536
    assert classify(SourceFile(str(big), big.stat().st_size)).adapter.name == "orchard-rl"  # type: ignore[union-attr]
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"messages": doc["messages"][:2]}) + "\n")
    found = classify(SourceFile(str(chat), chat.stat().st_size)).adapter
    assert found is not None and found.name == "openai-messages"
    copy = tmp_path / "copy"
    shutil.copytree(DUMP, copy)
    pretty = copy / "rollout_00.json"
    assert classify(SourceFile(str(pretty), pretty.stat().st_size)).adapter.name == "orchard-rl"  # type: ignore[union-attr]
