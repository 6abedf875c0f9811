"""Derived fields: turns, rollups and content hashes are computed, never invented."""

from __future__ import annotations

import hashlib
import json

from trajlake.records import (
    content_hash,
    dict_rows,
    normalize,
    record_rows,
    rows_for_table,
    rows_to_tables,
)
from trajlake.sample import sample_trajectories
from trajlake.schema import CanonicalTrajectory, Message


def _record(**fields: object) -> CanonicalTrajectory:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "a0",
            "tool_calls": [{"id": "c0", "name": "bash", "arguments": '{"cmd": "ls"}'}],
            "prompt_tokens": 100,
            "completion_tokens": 10,
        },
        {"role": "tool", "tool_call_id": "c0", "content": "out"},
        {"role": "assistant", "content": "sub", "thread": "sub-1"},
        {"role": "assistant", "content": "a1", "prompt_tokens": 150, "completion_tokens": 20},
        {"role": "user", "content": "continue"},
    ]
    return CanonicalTrajectory.model_validate(
        {"trajectory_id": "t", "messages": messages, **fields}
    )


def test_turns_follow_assistant_messages_per_thread() -> None:
    record = normalize(_record())
    assert [(m.thread, m.idx, m.turn) for m in record.messages] == [
        ("main", 0, None),
        ("main", 1, None),
        ("main", 2, 0),
        ("main", 3, 0),
        ("sub-1", 0, 0),
        ("main", 4, 1),
        ("main", 5, 1),
    ]


def test_rollups_sum_what_is_known_and_leave_unknown_null() -> None:
    record = normalize(_record())
    assert record.n_messages == 7
    assert record.n_turns == 2  # main thread only
    assert record.n_tool_calls == 1
    assert record.prompt_tokens == 250
    assert record.completion_tokens == 30
    assert record.total_tokens == 280
    bare = normalize(
        CanonicalTrajectory.model_validate({"trajectory_id": "b", "messages": [{"role": "user"}]})
    )
    assert bare.prompt_tokens is None and bare.total_tokens is None and bare.cost_usd is None


def test_values_from_the_source_win_over_derived_ones() -> None:
    record = normalize(_record(prompt_tokens=999, n_turns=7))
    assert record.prompt_tokens == 999
    assert record.n_turns == 7


def test_content_hash_ignores_ids_and_json_spacing_but_not_content() -> None:
    a = normalize(_record()).content_hash
    b_record = _record(trajectory_id="other")
    b_record.messages[2].tool_calls[0].arguments = '{ "cmd":"ls" }'  # type: ignore[index]
    b_record.messages[2].prompt_tokens = 5
    assert normalize(b_record).content_hash == a
    c_record = _record()
    c_record.messages[1].content = "another task"
    assert content_hash(c_record.messages) != a


def test_missing_id_is_derived_from_content() -> None:
    data = {"messages": [{"role": "user", "content": "x"}]}
    first = normalize(CanonicalTrajectory.model_validate(data))
    second = normalize(CanonicalTrajectory.model_validate(data))
    assert first.trajectory_id == second.trajectory_id
    assert first.trajectory_id.startswith("h-")
    assert first.messages[0].trajectory_id == first.trajectory_id


def test_clashing_message_indices_are_renumbered_in_order() -> None:
    record = CanonicalTrajectory.model_validate({"trajectory_id": "t", "messages": []})
    record.messages = [
        Message(trajectory_id="t", idx=0, role="user", content="a"),
        Message(trajectory_id="t", idx=0, role="assistant", content="b"),
        Message(trajectory_id="t", idx=0, role="user", content="c", thread="sub"),
    ]
    normalize(record)
    assert [(m.thread, m.idx) for m in record.messages] == [("main", 0), ("main", 1), ("sub", 0)]


def _reference_hash(messages: list[Message]) -> str:
    """The content hash as defined: one compact JSON line per message, sha256 over all."""
    digest = hashlib.sha256()
    for m in messages:
        calls = []
        for c in m.tool_calls or ():
            try:
                args = json.dumps(
                    json.loads(c.arguments or ""), sort_keys=True, separators=(",", ":")
                )
            except ValueError:
                args = (c.arguments or "").strip()
            calls.append([c.name, args])
        item = [m.thread, m.role, (m.content or "").strip(), (m.reasoning or "").strip(), calls]
        digest.update(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def test_content_hash_keeps_its_definition() -> None:
    """Unicode, control characters, odd JSON arguments: the hash is the documented one."""
    record = _record()
    record.messages[1].content = '  naïve "quoted" \\ tab\t nul\x00 line\u2028sep 😀 \x7f  '
    record.messages[2].reasoning = "думаю…\n"
    record.messages[2].tool_calls[0].arguments = '{"b": [1.5, 1e-05, 10000000000000000], "a": "é"}'  # type: ignore[index]
    record.messages[3].content = None
    assert content_hash(record.messages) == _reference_hash(record.messages)
    for sample in sample_trajectories(20):
        parsed = CanonicalTrajectory.model_validate(sample)
        assert content_hash(parsed.messages) == _reference_hash(parsed.messages)


def test_row_normalisation_matches_the_records() -> None:
    """`dict_rows` of a plain dict gives the rows `record_rows` gives the validated record."""
    data = _record().model_dump(exclude_none=True)
    for m in data["messages"]:  # as a chat adapter hands them over: no keys, no turns
        del m["idx"], m["trajectory_id"]
        if m["thread"] == "main":
            del m["thread"]
    record = CanonicalTrajectory.model_validate(data)
    trajectory, messages = record_rows(record)
    a = rows_to_tables([trajectory], messages)
    trajectory, messages = dict_rows(data)
    b = rows_to_tables([trajectory], messages)
    for name in ("trajectories", "messages"):
        assert a[name].equals(b[name]), name


def test_missing_keys_take_defaults_and_given_nulls_stay() -> None:
    table = rows_for_table(
        "messages",
        [
            {"trajectory_id": "t", "idx": 0, "role": "user"},
            {"trajectory_id": "t", "idx": 1, "role": "user", "thread": "main", "attrs": {"k": 1}},
        ],
    )
    assert table.column("thread").to_pylist() == ["main", "main"]
    assert table.column("is_copied_context").to_pylist() == [False, False]
    assert table.column("attrs").to_pylist() == [None, '{"k":1}']
