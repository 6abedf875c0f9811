"""`load_turns` and the `turns` view SQL over a lake's messages."""

from __future__ import annotations

import duckdb
import pytest

import trajlake as tl
from trajlake.credit.turns import TURNS_VIEW_SQL, TURNS_VIEW_TABLES, load_turns, outcome_value
from trajlake.query import DERIVED_VIEWS, VIEW_TABLES


def handmade() -> dict[str, object]:
    return {
        "trajectory_id": "hand-1",
        "task_id": "task-1",
        "resolved": False,
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [
                    {"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'},
                    {"id": "c2", "name": "bash", "arguments": '{"command": "cat a"}'},
                ],
                "completion_tokens": 7,
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a", "exit_code": 0},
            {"role": "tool", "tool_call_id": "c2", "content": "no", "exit_code": 2},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c3", "name": "submit"}]},
            {"role": "tool", "tool_call_id": "c3", "content": "ok", "is_error": False},
            {"role": "assistant", "content": "done"},
        ],
    }


def test_load_turns(lake: tl.Lake) -> None:
    lake.write([handmade()])
    [traj] = load_turns(lake)
    assert (traj.trajectory_id, traj.task_id, traj.outcome, traj.thread) == (
        "hand-1",
        "task-1",
        0.0,
        "main",
    )
    assert [t.turn for t in traj.turns] == [0, 1, 2]
    first, second, third = traj.turns
    assert first.action_text == 'look\nbash({"command": "ls"})\nbash({"command": "cat a"})'
    assert first.tool_names == ("bash", "bash") and first.is_error and first.tokens == 7
    assert second.action_text == "submit()" and not second.is_error and second.tokens is None
    assert third.action_text == "done" and third.tool_names == () and not third.is_error
    assert load_turns(lake, where="task_id = 'other'") == []
    assert load_turns(lake, thread="sub") == []


def test_turns_view_sql_in_plain_duckdb(sample_lake: tl.Lake) -> None:
    assert sorted(TURNS_VIEW_TABLES) == ["messages"]
    files = sample_lake.table_files("messages")
    db = duckdb.connect()
    listed = ", ".join("'" + f.removeprefix("file://") + "'" for f in files)
    db.execute(f"CREATE VIEW messages AS SELECT * FROM read_parquet([{listed}])")
    db.execute(f"CREATE VIEW turns AS {TURNS_VIEW_SQL}")
    columns = [c[0] for c in db.execute("DESCRIBE turns").fetchall()]
    assert columns == [
        "trajectory_id",
        "thread",
        "turn",
        "action_text",
        "tool_names",
        "is_error",
        "tokens",
    ]
    [(n_turns,)] = db.execute("SELECT count(*) FROM turns").fetchall()
    expected = sample_lake.sql(
        "SELECT count(*) AS n FROM messages WHERE role = 'assistant'"
    ).to_dicts()[0]["n"]
    assert n_turns == expected == sum(len(t.turns) for t in load_turns(sample_lake))
    errors = sample_lake.sql(
        "SELECT count(DISTINCT (trajectory_id, turn)) AS n FROM messages "
        "WHERE role = 'tool' AND is_error"
    ).to_dicts()[0]["n"]
    assert db.execute("SELECT count(*) FROM turns WHERE is_error").fetchall() == [(errors,)]


def test_outcome_value() -> None:
    assert outcome_value(True, 0.3) == 1.0
    assert outcome_value(False, None) == 0.0
    assert outcome_value(None, 0.25) == 0.25
    assert outcome_value(None, None) is None


def test_turns_view_registered_in_the_lake(
    sample_lake: tl.Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DERIVED_VIEWS, "turns", TURNS_VIEW_SQL)
    monkeypatch.setitem(VIEW_TABLES, "turns", TURNS_VIEW_TABLES)
    rows = sample_lake.sql(
        "SELECT trajectory_id, turn, tool_names, tokens FROM turns "
        "WHERE trajectory_id = 'sample-0-0000000' ORDER BY turn"
    ).to_dicts()
    [traj] = load_turns(sample_lake, where="trajectory_id = 'sample-0-0000000'")
    assert [(r["turn"], tuple(r["tool_names"]), r["tokens"]) for r in rows] == [
        (t.turn, t.tool_names, t.tokens) for t in traj.turns
    ]
