"""The one-pass mapping of plain chat messages gives exactly what the general mapping gives
(`chat_message` + `name_tool_results`), and hands every other shape to it."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest

from trajlake.ingest._rows import _plain_message
from trajlake.ingest.openai_messages import _plain_messages
from trajlake.wire.chat import chat_message, name_tool_results


def _general(obj: dict[str, Any]) -> list[dict[str, Any]]:
    messages = [chat_message(m) for m in copy.deepcopy(obj["messages"])]
    name_tool_results(messages)
    return messages


def _call(i: int, **changes: Any) -> dict[str, Any]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return {**call, **changes}


# Values a field of a generated message may take: plain ones and every kind of odd one.
_VALUES: dict[str, list[Any]] = {
    "role": ["system", "user", "assistant", "tool", "developer", "function", None, 3, ["user"]],
    "content": ["text", "", None, [{"type": "text", "text": "x"}], 5, {"a": 1}],
    "tool_call_id": ["c0", "c1", "c9", None, 7],
    "name": ["bash", "", None, 4, ["n"]],
    "tool_calls": [
        [_call(0)],
        [_call(0), _call(1, type=None)],
        [_call(1, id=None)],
        [],
        None,
        [_call(0, function={"name": "bash", "arguments": {"a": 1}})],
        [_call(0, function={"name": None, "arguments": "{}"})],
        [{"id": "c0", "name": "bash", "arguments": "{}"}],  # flat, as canonical lines write it
        [_call(0, index=0)],
        [_call(0, id=5)],
        ["not a call"],
        {"id": "c0"},
    ],
    "reasoning_content": ["thought"],
    "function_call": [{"name": "f", "arguments": "{}"}],
}


def _messages(rng: random.Random, n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        if rng.random() < 0.02:
            out.append(rng.choice(["text", 3, None, ["m"]]))
            continue
        keys = ["role"] + [k for k in _VALUES if k != "role" and rng.random() < 0.4]
        out.append({k: rng.choice(_VALUES[k]) for k in keys})
    return out


def test_generated_messages_map_as_the_general_mapping_maps_them() -> None:
    rng = random.Random(12)
    fast = 0
    for _ in range(4000):
        obj: dict[str, Any] = {"messages": _messages(rng, rng.randint(0, 6))}
        mapped = _plain_messages(obj)
        if mapped is None:
            continue
        fast += 1
        expected = _general(obj)
        assert mapped == expected
        assert [list(m) for m in mapped] == [list(m) for m in expected]  # key order too
        assert all(_plain_message(m) for m in mapped)
    assert fast > 200  # the shape is common among the generated lists, not an accident


def test_a_plain_conversation_is_mapped_in_one_pass() -> None:
    obj = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": None, "tool_calls": [_call(0), _call(1)]},
            {"role": "tool", "tool_call_id": "c0", "content": "out"},
            {"role": "tool", "tool_call_id": "c1", "name": "named", "content": "out"},
            {"role": "tool", "tool_call_id": "c7", "content": "unanswered call"},
        ]
    }
    mapped = _plain_messages(obj)
    assert mapped == _general(obj)
    assert mapped is not None
    assert [m.get("name") for m in mapped] == [None, None, None, "bash", "named", None]
    assert mapped[2]["tool_calls"][0] == {
        "id": "c0",
        "name": "bash",
        "arguments": "{}",
        "type": "function",
    }


@pytest.mark.parametrize(
    "line",
    [
        {"messages": [{"role": "developer", "content": "x"}]},  # renamed role, kept in attrs
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"messages": [{"role": "assistant", "function_call": {"name": "f", "arguments": ""}}]},
        {"messages": [{"role": "assistant", "reasoning_content": "why"}]},
        {"messages": [{"role": "user", "content": "x", "extra": 1}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"name": "b", "arguments": "{}"}]}]},
        {"messages": [{"role": "tool", "tool_call_id": 3, "content": "x"}]},
        {"messages": [{"role": "user", "content": "look"}], "images": [{"bytes": "aGk="}]},
        {"messages": ["text"]},
        {"messages": "not a list"},
        ["not an object"],
    ],
)
def test_other_shapes_go_to_the_general_mapping(line: Any) -> None:
    assert _plain_messages(line) is None


def test_every_plain_combination_of_fields() -> None:
    """All combinations of plain field values for a pair of messages, exhaustively."""
    plain = {
        "role": ["system", "user", "assistant", "tool"],
        "content": ["t", "", None],
        "tool_call_id": ["c0", None],
        "name": ["n", None, 4],
        "tool_calls": [[_call(0)], [], None, [_call(0, id=None, type=None)]],
    }
    combos = [
        dict(zip(plain, values, strict=True)) for values in itertools.product(*plain.values())
    ]
    rng = random.Random(3)
    for first in combos:
        second = rng.choice(combos)
        obj = {"messages": [first, second]}
        mapped = _plain_messages(obj)
        assert mapped is not None
        assert mapped == _general(obj)
