"""τ-bench adapter: the historical gpt-4o airline trajectories checked against their JSON."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.tau_bench import TauBenchAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
EXCERPT = Path(__file__).parents[1] / "data" / "tau_bench" / "gpt-4o-airline.json"
FULL = SHARED_CORPUS / "06_eval_frameworks/tau_bench/historical_trajectories/gpt-4o-airline.json"
needs_corpus = pytest.mark.skipif(not FULL.exists(), reason="shared corpus not available")


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(TauBenchAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _read(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def _check_against_source(path: Path) -> list[dict[str, Any]]:
    elements: list[dict[str, Any]] = json.loads(path.read_text())
    records = _records(path)
    assert len(records) == len(elements)
    assert len({r.trajectory_id for r in records}) == len(records)
    for element, record in zip(elements, records, strict=True):
        assert record.task_id == f"airline/{element['task_id']}"
        assert (record.task_source, record.policy_model) == ("tau-bench/airline", "gpt-4o")
        assert record.attempt == element["trial"]
        assert record.reward == element["reward"]
        assert record.resolved is (element["reward"] == 1.0)
        # reward_info is null in 5 full-file records (episodes that never reached `done`).
        reward_info = element["info"]["reward_info"] or {}
        components = reward_info.get("info") or {}  # r_actions or r_outputs, and hashes
        numbers = {k: v for k, v in components.items() if isinstance(v, (int, float))}
        assert record.rewards == (numbers or None)
        assert record.attrs is not None
        assert record.attrs.get("reward_info") == (reward_info or None)
        assert record.attrs["user_id"] == element["info"]["task"]["user_id"]
        traj = element["traj"]
        assert [m.role for m in record.messages] == [m["role"] for m in traj]
        assert [m.content for m in record.messages] == [m["content"] for m in traj]
        calls = [c for m in record.messages for c in m.tool_calls or []]
        source_calls = [c for m in traj for c in m.get("tool_calls") or []]
        assert [(c.id, c.name, c.arguments, c.type) for c in calls] == [
            (c["id"], c["function"]["name"], c["function"]["arguments"], c["type"])
            for c in source_calls
        ]
        # Every tool result answers a call made before it, under the same tool name.
        made: dict[str | None, str] = {}
        for m in record.messages:
            made.update({c.id: c.name for c in m.tool_calls or []})
            if m.role == "tool":
                assert made[m.tool_call_id] == m.name
        # No usage or timestamps in τ-bench files: none is invented.
        assert record.prompt_tokens is None and record.started_at is None
    return elements


def test_excerpt_matches_its_json() -> None:
    elements = _check_against_source(EXCERPT)
    assert len(elements) == 12  # tasks 1, 21, 41 x trials 0-3
    assert sum(1 for e in elements if e["reward"] == 1.0) == 6


@needs_corpus
def test_full_file_counts() -> None:
    elements = _check_against_source(FULL)
    records = _records(FULL)
    # SOURCES.md: 200 records, 50 airline tasks x 4 trials, 84 with reward 1.0.
    assert len(records) == 200
    assert len({r.task_id for r in records}) == 50
    assert sum(1 for r in records if r.resolved) == 84
    assert sum(r.n_tool_calls or 0 for r in records) == 1164
    roles = Counter(m.role for r in records for m in r.messages)
    assert roles == Counter(m["role"] for e in elements for m in e["traj"])
    assert roles == {"assistant": 2454, "user": 1490, "tool": 1164, "system": 200}


def test_ids_depend_on_content_not_location(tmp_path: Path) -> None:
    copy = tmp_path / "gpt-4o-airline.json"
    copy.write_text(json.dumps(json.loads(EXCERPT.read_text())))  # other whitespace, same data
    assert [r.trajectory_id for r in _records(copy)] == [r.trajectory_id for r in _records(EXCERPT)]
    # Another model's file has the same task x trial pairs: the conversations tell them apart.
    other = tmp_path / "sonnet-35-new-airline.json"
    elements = json.loads(EXCERPT.read_text())
    elements[0]["traj"][-1]["content"] = "a different last word"
    other.write_text(json.dumps(elements))
    records = _records(other)
    assert records[0].policy_model == "sonnet-35-new"
    assert records[0].trajectory_id != _records(EXCERPT)[0].trajectory_id


def test_bad_elements_are_quarantined_and_the_rest_kept(tmp_path: Path) -> None:
    elements: list[Any] = json.loads(EXCERPT.read_text())[:3]
    elements.insert(1, {"task_id": 9, "trial": 0, "reward": 1.0, "info": {}})  # no traj
    elements.insert(2, [1, 2])
    elements[4]["traj"][1] = {"role": "narrator", "content": "?"}
    path = tmp_path / "mixed-retail.json"
    path.write_text(json.dumps(elements))
    items = _read(path)
    assert [type(i).__name__ for i in items] == [
        "ParsedTrajectory",
        "BadRecord",
        "BadRecord",
        "ParsedTrajectory",
        "BadRecord",
    ]
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert [b.offset for b in bad] == [1, 2, 4]
    assert "traj" in bad[0].error and "JSON object" in bad[1].error
    assert bad[2].field == "messages.1.role"
    good = [i for i in items if isinstance(i, ParsedTrajectory)]
    assert good[0].record.task_source == "tau-bench/retail"
    path.write_text('{"not": "an array"}')
    (item,) = _read(path)
    assert isinstance(item, BadRecord) and "JSON array" in item.error
    path.write_text(EXCERPT.read_text()[:1000])
    (item,) = _read(path)
    assert isinstance(item, BadRecord) and "malformed JSON" in item.error


def test_sniff_is_specific() -> None:
    adapter = TauBenchAdapter()
    source = SourceFile(str(EXCERPT), os.path.getsize(EXCERPT))
    assert adapter.sniff(source, read_head(source)) == 1.0
    if SHARED_CORPUS.exists():
        for other in expand_sources([str(SHARED_CORPUS)]):
            score = adapter.sniff(other, read_head(other))
            assert (score >= 0.9) == ("/tau_bench/" in other.uri and other.uri.endswith(".json"))


def test_ingest_and_query(lake: tl.Lake) -> None:
    report = lake.ingest(EXCERPT.parent)  # LICENSE is skipped; SOURCE.txt is not a format
    assert report.formats == {"tau-bench": 1}
    assert (report.added, report.quarantined) == (12, 0)
    rows = lake.sql(
        "SELECT task_id, count(*), sum(resolved::int), max(attempt) FROM trajectories "
        "GROUP BY task_id ORDER BY task_id"
    ).rows()
    assert [(t, n, int(r), a) for t, n, r, a in rows] == [
        ("airline/1", 4, 1, 3),
        ("airline/21", 4, 3, 3),
        ("airline/41", 4, 2, 3),
    ]
    tools = lake.sql(
        "SELECT count(*) FROM tool_calls c JOIN messages m ON m.trajectory_id = c.trajectory_id "
        "AND m.role = 'tool' AND m.tool_call_id = c.call_id"
    ).rows()[0][0]
    assert tools == sum(
        len(m.get("tool_calls") or []) for e in json.loads(EXCERPT.read_text()) for m in e["traj"]
    )
    assert lake.ingest(EXCERPT).added == 0
