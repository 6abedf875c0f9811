"""The viewer's JSON API on a real lake: every endpoint's shape and values, checked against SQL
over the same snapshot (runs totals, outcomes, groups, credits, scores), and its errors."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.records import rows_for_table
from trajlake.sample import sample_trajectories
from trajlake.view import ViewData, ViewRequestError

NOW = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
EDITED = "edit-case"
TASK = "django__django-1000"  # sample-0-0000000 … 0000003


def _edit_trajectory() -> dict[str, Any]:
    """A two-turn rollout: a str_replace edit, then a failing test run; calls record latency."""
    edit = {
        "command": "str_replace",
        "path": "src/a.py",
        "old_str": "x = 1\n",
        "new_str": "x = 2\n",
    }
    return {
        "trajectory_id": EDITED,
        "task_id": "task-edit",
        "harness": "openhands",
        "policy_model": "m-policy",
        "run_id": "run-edit",
        "started_at": NOW,
        "messages": [
            {"role": "system", "content": "You edit code."},
            {"role": "user", "content": "Set x to 2."},
            {
                "role": "assistant",
                "turn": 0,
                "content": "Editing.",
                "prompt_tokens": 100,
                "completion_tokens": 10,
                "tool_calls": [
                    {"id": "c1", "name": "str_replace_editor", "arguments": json.dumps(edit)}
                ],
            },
            {"role": "tool", "turn": 0, "tool_call_id": "c1", "content": "edited"},
            {
                "role": "assistant",
                "turn": 1,
                "prompt_tokens": 150,
                "completion_tokens": 5,
                "tool_calls": [{"id": "c2", "name": "bash", "arguments": '{"command": "pytest"}'}],
            },
            {
                "role": "tool",
                "turn": 1,
                "tool_call_id": "c2",
                "content": "1 failed",
                "exit_code": 1,
            },
            {"role": "user", "thread": "sub-1", "content": "copied", "is_copied_context": True},
            {"role": "assistant", "thread": "sub-1", "turn": 0, "content": "sub answer"},
        ],
    }


def _calls() -> list[dict[str, Any]]:
    return [
        {
            "call_id": f"call-{seq}",
            "trajectory_id": EDITED,
            "thread": "main",
            "seq": seq,
            "dialect": "chat",
            "latency_ms": 100.0 * (seq + 1),
            "attrs": {"cost_usd": 0.01},
        }
        for seq in range(2)
    ]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    """40 sample rollouts (10 tasks × 4), tagged gen-0; then 8 more, an edit case, labels,
    two credit runs, and scores of two models."""
    lake = tl.open_lake(tmp_path_factory.mktemp("view") / "lake", create=True)
    lake.write(list(sample_trajectories(40)))
    lake.tag("gen-0")
    lake.write([*sample_trajectories(8, start=40), _edit_trajectory()])
    lake.commit({"calls": rows_for_table("calls", _calls())})
    ids = [r[0] for r in lake.sql("SELECT trajectory_id FROM trajectories ORDER BY 1").rows()]
    # A label that overrides the rollout's own outcome of the first trajectory.
    label = {
        "label_id": "l1",
        "trajectory_id": ids[0],
        "resolved": True,
        "reward": 1.0,
        "source": "swebench",
        "created_at": NOW,
    }
    lake.commit({"labels": rows_for_table("labels", [label])})
    run_credit(lake, estimator="outcome", name="outcome-rise")
    run_credit(lake, estimator="group", mask="all", name="group-all")
    scores = [
        {"model_id": "m-a", "trajectory_id": t, "turn": None, "score": (i * 37 % 11) / 11}
        for i, t in enumerate(ids)
    ]
    # m-b scored two of TASK's four candidates, the same (a tie: the smaller id ranks first).
    scores += [
        {"model_id": "m-b", "trajectory_id": f"sample-0-000000{i}", "turn": None, "score": 0.5}
        for i in range(2)
    ]
    scores += [{"model_id": "m-a", "trajectory_id": ids[0], "turn": 2, "score": 0.9}]  # a prefix
    lake.commit({"scores": rows_for_table("scores", scores)})
    return lake


@pytest.fixture(scope="module")
def data(lake: tl.Lake) -> ViewData:
    view = ViewData(lake)
    yield view
    view.close()


def _count(lake: tl.Lake, condition: str, params: list[Any] | None = None, at: Any = None) -> int:
    query = "SELECT count(*) FROM trajectories t LEFT JOIN outcomes o USING (trajectory_id) "
    query += f"WHERE {condition}"
    return int(lake.sql(query, params=params, at=at).rows()[0][0])


def test_meta_lists_refs_counts_and_facets(lake: tl.Lake, data: ViewData) -> None:
    meta = data.answer("meta", {})
    latest = lake.snapshot().snapshot_id
    assert meta["mode"] == "server" and meta["read_only"] is True
    assert meta["at"] == {"ref": None, "snapshot": latest}
    assert meta["latest_snapshot"] == latest
    kinds = [r["kind"] for r in meta["refs"]]
    assert kinds[0] == "tag" and meta["refs"][0]["ref"] == "gen-0"
    assert [r["snapshot"] for r in meta["refs"][1:]] == list(range(latest, -1, -1))
    assert meta["counts"]["trajectories"] == 49
    assert meta["counts"]["messages"] == _count_table(lake, "messages")
    assert meta["counts"]["credits"] == _count_table(lake, "credits")
    assert meta["counts"]["scores"] == 52 and meta["counts"]["labels"] == 1
    harness = {f["value"]: f["n"] for f in meta["facets"]["harness"]}
    assert harness == dict(lake.sql("SELECT harness, count(*) FROM trajectories GROUP BY 1").rows())
    assert meta["facets"]["tag"] == [{"value": "gen-0", "n": 40}]
    runs = {r["run_name"]: r for r in meta["credit_runs"]}
    assert set(runs) == {"outcome-rise", "group-all"}
    assert runs["outcome-rise"]["n_turns"] == int(
        lake.sql("SELECT count(*) FROM credits WHERE run_name = 'outcome-rise'").rows()[0][0]
    )
    assert meta["score_models"] == [
        {"model_id": "m-a", "n_trajectories": 49},
        {"model_id": "m-b", "n_trajectories": 2},
    ]
    json.dumps(meta)  # JSON as it stands


def _count_table(lake: tl.Lake, table: str) -> int:
    return int(lake.sql(f"SELECT count(*) FROM {table}").rows()[0][0])


def test_runs_total_equals_sql_count_of_the_same_filter(lake: tl.Lake, data: ViewData) -> None:
    page = data.answer("runs", {"where": "n_turns > 12", "harness": "swe-agent", "limit": "5"})
    assert page["total"] == _count(lake, "t.n_turns > 12 AND t.harness = 'swe-agent'")
    assert len(page["rows"]) == 5 and page["offset"] == 0 and page["limit"] == 5
    assert set(page["rows"][0]) >= {
        "trajectory_id",
        "task_id",
        "harness",
        "policy_model",
        "generation",
        "run_id",
        "status",
        "exit_reason",
        "resolved",
        "reward",
        "outcome_source",
        "n_turns",
        "n_messages",
        "n_tool_calls",
        "total_tokens",
        "cost_usd",
        "started_at",
        "is_subagent",
        "n_redactions",
    }
    assert all(r["n_turns"] > 12 for r in page["rows"])


def test_resolved_filter_follows_the_outcomes_view(lake: tl.Lake, data: ViewData) -> None:
    for value, condition in [
        ("true", "o.resolved"),
        ("false", "NOT o.resolved"),
        ("unknown", "o.resolved IS NULL"),
    ]:
        page = data.answer("runs", {"resolved": value, "limit": "500"})
        assert page["total"] == _count(lake, condition)
        expected = {
            r[0] for r in lake.sql(f"SELECT trajectory_id FROM outcomes o WHERE {condition}").rows()
        }
        assert {r["trajectory_id"] for r in page["rows"]} == expected
    # The label turned the first trajectory's own failure into a success.
    first = lake.sql("SELECT min(trajectory_id) FROM trajectories").rows()[0][0]
    row = next(r for r in data.answer("runs", {"q": first})["rows"] if r["trajectory_id"] == first)
    assert row["resolved"] is True and row["outcome_source"] == "label:swebench"


def test_runs_sort_and_paging_cover_every_row_once(data: ViewData) -> None:
    seen: list[str] = []
    previous = None
    for offset in range(0, 60, 20):
        page = data.answer(
            "runs", {"sort": "n_turns", "order": "asc", "offset": str(offset), "limit": "20"}
        )
        for row in page["rows"]:
            assert previous is None or (row["n_turns"] or 0) >= previous
            previous = row["n_turns"] or 0
        seen += [r["trajectory_id"] for r in page["rows"]]
    assert len(seen) == len(set(seen)) == page["total"] == 49
    assert data.answer("runs", {"offset": "1000"}) | {"elapsed_ms": 0} == {
        "total": 49,
        "offset": 1000,
        "limit": 50,
        "sort": "started_at",
        "order": "desc",
        "elapsed_ms": 0,
        "rows": [],
    }


def test_tag_and_at_pin_the_snapshot(lake: tl.Lake, data: ViewData) -> None:
    assert data.answer("runs", {"tag": "gen-0"})["total"] == 40
    gen0 = lake.snapshot("gen-0").snapshot_id
    assert data.answer("runs", {"at": "gen-0"})["total"] == 40
    assert data.answer("meta", {"at": "gen-0"})["at"] == {"ref": "gen-0", "snapshot": gen0}
    assert data.answer("meta", {"at": str(gen0)})["counts"]["credits"] == 0
    with pytest.raises(ViewRequestError) as e:
        data.answer("runs", {"at": "no-such-tag"})
    assert e.value.status == 404 and e.value.field == "at"


def test_groups_sum_to_the_total(lake: tl.Lake, data: ViewData) -> None:
    filters = {"where": "n_turns >= 10"}
    total = data.answer("runs", filters)["total"]
    for by in ("harness", "policy_model", "generation", "run_id", "task_id"):
        groups = data.answer("groups", {**filters, "by": by})
        assert groups["by"] == by
        assert sum(g["n"] for g in groups["rows"]) == total
        for g in groups["rows"]:
            rate = g["n_resolved"] / g["n_labelled"] if g["n_labelled"] else None
            assert g["success_rate"] == (None if rate is None else pytest.approx(rate))
    by_task = {g["key"]: g for g in data.answer("groups", {"by": "task_id"})["rows"]}
    expected = lake.sql(
        "SELECT task_id, count(*), count(*) FILTER (WHERE resolved), count(resolved) "
        "FROM outcomes GROUP BY 1"
    ).rows()
    assert {k: (g["n"], g["n_resolved"], g["n_labelled"]) for k, g in by_task.items()} == {
        r[0]: (r[1], r[2], r[3]) for r in expected
    }
    tags = data.answer("groups", {"by": "tag"})["rows"]
    assert [(g["key"], g["n"]) for g in tags] == [("gen-0", 40)]


def test_tasks_count_scored_candidates(lake: tl.Lake, data: ViewData) -> None:
    tasks = data.answer("tasks", {"limit": "500"})
    expected = lake.sql("SELECT count(DISTINCT task_id) FROM trajectories").rows()[0][0]
    assert tasks["total"] == expected == len(tasks["rows"])
    assert sum(t["n"] for t in tasks["rows"]) == 49
    assert sum(t["n_scored"] for t in tasks["rows"]) == 49  # every one scored by m-a


def test_transcript_holds_every_message_once(lake: tl.Lake, data: ViewData) -> None:
    for trajectory_id in [EDITED, "sample-0-0000003"]:
        payload = data.answer("trajectory", {"id": trajectory_id})
        stored = lake.sql(
            "SELECT thread, idx FROM messages WHERE trajectory_id = ? ORDER BY 1, 2",
            [trajectory_id],
        ).rows()
        shown = sorted((t["thread"], m["idx"]) for t in payload["turns"] for m in t["messages"])
        assert shown == sorted(stored)
        assert payload["turns"][0]["thread"] == "main" and payload["turns"][0]["turn"] is None
        assert "tools" not in payload["trajectory"] and "messages" not in payload["trajectory"]
        json.dumps(payload)


def test_transcript_of_the_edit_case(data: ViewData) -> None:
    payload = data.answer("trajectory", {"id": EDITED})
    threads = {t["thread"]: t for t in payload["threads"]}
    assert threads["main"] == {
        "thread": "main",
        "n_messages": 6,
        "is_subagent": False,
        "n_copied_context": 0,
    }
    assert threads["sub-1"]["is_subagent"] and threads["sub-1"]["n_copied_context"] == 1
    main = [t for t in payload["turns"] if t["thread"] == "main"]
    assert [t["turn"] for t in main] == [None, 0, 1]
    edit_turn, test_turn = main[1], main[2]
    assert edit_turn["edits"] == [
        {
            "kind": "str_replace",
            "path": "src/a.py",
            "diff": "--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n",
        }
    ]
    call = edit_turn["messages"][0]["tool_calls"][0]
    assert call["name"] == "str_replace_editor" and call["arguments_json"]["path"] == "src/a.py"
    assert (edit_turn["prompt_tokens"], edit_turn["completion_tokens"]) == (100, 10)
    # cost and latency come from the calls that produced the turns (k-th call → k-th turn)
    assert (edit_turn["latency_ms"], test_turn["latency_ms"]) == (100.0, 200.0)
    assert edit_turn["cost_usd"] == pytest.approx(0.01)
    assert test_turn["messages"][1]["exit_code"] == 1
    assert payload["trajectory"]["started_at"] == NOW.isoformat()


def test_transcript_labels_and_outcome(lake: tl.Lake, data: ViewData) -> None:
    first = lake.sql("SELECT min(trajectory_id) FROM trajectories").rows()[0][0]
    payload = data.answer("trajectory", {"id": first})
    assert payload["outcome"] == {"resolved": True, "reward": 1.0, "source": "label:swebench"}
    assert [(lb["source"], lb["resolved"]) for lb in payload["labels"]] == [("swebench", True)]


def test_credit_turns_equal_the_credit_rows(lake: tl.Lake, data: ViewData) -> None:
    trajectory_id = "sample-0-0000005"
    payload = data.answer("credit", {"id": trajectory_id, "run": "outcome-rise"})
    rows = lake.sql(
        "SELECT thread, turn, value_before, value_after, credit, advantage, weight, mask, "
        "segment_id FROM credits WHERE run_name = 'outcome-rise' AND trajectory_id = ? "
        "ORDER BY turn",
        [trajectory_id],
    ).to_dicts()
    assert payload["turns"] == rows
    assert payload["estimator"] == "outcome" and payload["params"]["mask"] == "rise"
    assert payload["run_name"] == "outcome-rise" and isinstance(payload["source_snapshot"], int)
    with pytest.raises(ViewRequestError) as e:
        data.answer("credit", {"id": trajectory_id, "run": "no-such-run"})
    assert e.value.status == 404


def test_candidates_ranks_follow_scores(lake: tl.Lake, data: ViewData) -> None:
    task = TASK
    payload = data.answer("candidates", {"task_id": task})
    assert payload["model_id"] == "m-a" and payload["models"] == ["m-a", "m-b"]
    scores = dict(
        lake.sql(
            "SELECT s.trajectory_id, s.score FROM scores s "
            "JOIN trajectories t USING (trajectory_id) "
            "WHERE s.model_id = 'm-a' AND s.turn IS NULL AND t.task_id = ?",
            [task],
        ).rows()
    )
    candidates = payload["candidates"]
    assert len(candidates) == payload["n"] == len(scores)
    assert [c["score"] for c in candidates] == sorted(scores.values(), reverse=True)
    assert [c["rank"] for c in candidates] == list(range(1, len(candidates) + 1))
    assert [c["picked"] for c in candidates] == [True] + [False] * (len(candidates) - 1)
    assert payload["n_resolved"] == sum(c["resolved"] is True for c in candidates)
    first = candidates[0]
    n_turns = lake.sql(
        "SELECT count(DISTINCT turn) FROM messages WHERE trajectory_id = ? AND thread = 'main' "
        "AND role = 'assistant' AND turn IS NOT NULL",
        [first["trajectory_id"]],
    ).rows()[0][0]
    assert len(first["turns"]) == n_turns
    tool = lake.sql(
        "SELECT tool_calls[1].name FROM messages WHERE trajectory_id = ? AND turn = 0 "
        "AND role = 'assistant'",
        [first["trajectory_id"]],
    ).rows()[0][0]
    assert first["turns"][0]["summary"].startswith(f"{tool}: ")
    other = data.answer("candidates", {"task_id": task, "model_id": "m-b"})
    assert other["model_id"] == "m-b"
    ranks = [c["rank"] for c in other["candidates"]]
    n_scored = sum(r is not None for r in ranks)
    assert 0 < n_scored == other["n_scored"] < len(ranks)
    assert ranks == [*range(1, n_scored + 1), *[None] * (len(ranks) - n_scored)]  # unscored last
    assert [c["trajectory_id"] for c in other["candidates"][:2]] == [
        "sample-0-0000000",
        "sample-0-0000001",
    ]
    with pytest.raises(ViewRequestError) as e:
        data.answer("candidates", {"task_id": "no-such-task"})
    assert e.value.status == 404


def test_lake_page(lake: tl.Lake, data: ViewData) -> None:
    page = data.answer("lake", {})
    assert [s["snapshot"] for s in page["snapshots"]] == list(
        range(lake.snapshot().snapshot_id, -1, -1)
    )
    gen0 = lake.snapshot("gen-0").snapshot_id
    assert next(s for s in page["snapshots"] if s["snapshot"] == gen0)["tags"] == ["gen-0"]
    assert [(t["tag"], t["snapshot"]) for t in page["tags"]] == [("gen-0", gen0)]
    assert {r["run_name"] for r in page["credit_runs"]} == {"outcome-rise", "group-all"}
    assert page["exports"] == [] and page["models"] == []
    kinds = {n["kind"] for n in page["lineage"]["nodes"]}
    assert {"snapshot", "tag", "credit-run"} <= kinds
    assert all({"source", "target", "kind"} <= set(e) for e in page["lineage"]["edges"])


@pytest.mark.parametrize(
    ("endpoint", "params", "status", "field"),
    [
        ("runs", {"where": "no_such_column = 1"}, 400, "where"),
        ("runs", {"where": "1; DROP TABLE trajectories"}, 400, "where"),
        ("runs", {"sort": "content"}, 400, "sort"),
        ("runs", {"limit": "501"}, 400, "limit"),
        ("runs", {"resolved": "maybe"}, 400, "resolved"),
        ("runs", {"tag": "nope"}, 400, "tag"),
        ("groups", {"by": "content"}, 400, "by"),
        ("trajectory", {}, 400, "id"),
        ("trajectory", {"id": "nope"}, 404, "id"),
        ("nope", {}, 404, None),
    ],
)
def test_errors_name_the_bad_parameter(
    data: ViewData, endpoint: str, params: dict[str, str], status: int, field: str | None
) -> None:
    with pytest.raises(ViewRequestError) as e:
        data.answer(endpoint, params)
    assert (e.value.status, e.value.field) == (status, field)
    assert e.value.payload()["error"]


def test_quick_filters_are_bound_not_formatted(data: ViewData) -> None:
    # A quote in a value is data: it matches nothing, and breaks nothing.
    assert data.answer("runs", {"harness": "x' OR '1'='1"})["total"] == 0
    assert data.answer("runs", {"q": "'; --"})["total"] == 0


def test_where_is_read_only(tmp_path: Path, data: ViewData) -> None:
    with pytest.raises(ViewRequestError) as e:
        data.answer("runs", {"where": f"trajectory_id IN (SELECT * FROM read_text('{tmp_path}'))"})
    assert e.value.field == "where"
