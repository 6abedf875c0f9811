"""SFT row formats on a tiny hand-made conversation with a tool call: exact rows."""

from __future__ import annotations

import json

from trajlake.export._sft_formats import encode_row, to_axolotl, to_openai, to_sharegpt, to_trl
from trajlake.export._sft_select import SftConversation, to_chat_message

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}


def conversation() -> SftConversation:
    return SftConversation(
        trajectory_id="t1",
        task_id="task",
        content_hash="h",
        resolved=True,
        messages=[
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "look", "reasoning": "hmm", "tool_calls": [CALL]},
            {"role": "tool", "content": "a.py", "tool_call_id": "c1", "name": "bash"},
            {"role": "assistant", "content": "done"},
        ],
        tools=TOOLS,
        weights=[None, None, 0.0, None, 0.5],
        turns=[None, None, 0, 0, 1],
    )


def test_chat_message_from_canonical() -> None:
    canonical = {
        "role": "assistant",
        "content": None,
        "reasoning": "r",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": '{"cmd": "ls"}', "type": None}],
        "turn": 0,
        "idx": 2,
    }
    assert to_chat_message(canonical) == {
        "role": "assistant",
        "content": "",
        "reasoning": "r",
        "tool_calls": [CALL],
    }
    tool = {"role": "tool", "content": "x", "tool_call_id": "c1", "name": "bash", "idx": 3}
    assert to_chat_message(tool) == {
        "role": "tool",
        "content": "x",
        "tool_call_id": "c1",
        "name": "bash",
    }


def test_openai_row() -> None:
    assert to_openai(conversation()) == {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "look", "tool_calls": [CALL], "weight": 0},
            {"role": "tool", "content": "a.py", "tool_call_id": "c1"},
            {"role": "assistant", "content": "done", "weight": 1},
        ],
        "tools": TOOLS,
    }


def test_trl_row() -> None:
    conv = conversation()
    assert to_trl(conv) == {
        "messages": conv.messages,
        "tools": TOOLS,
        "message_weights": [0.0, 0.0, 0.0, 0.0, 0.5],
        "trajectory_id": "t1",
    }


def test_sharegpt_row() -> None:
    assert to_sharegpt(conversation()) == {
        "conversations": [
            {"from": "system", "value": "sys"},
            {"from": "human", "value": "fix it"},
            {"from": "function_call", "value": '{"name": "bash", "arguments": {"cmd": "ls"}}'},
            {"from": "observation", "value": "a.py"},
            {"from": "gpt", "value": "done"},
        ],
        "tools": json.dumps(TOOLS),
        "weights": [0.0, 0.0, 0.0, 0.0, 0.5],
        "trajectory_id": "t1",
    }


def test_sharegpt_merges_parallel_tool_results_and_lists_calls() -> None:
    call2 = {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "oops"}}
    conv = SftConversation(
        "t",
        None,
        None,
        None,
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [CALL, call2]},
            {"role": "tool", "content": "r1", "tool_call_id": "c1", "name": "bash"},
            {"role": "tool", "content": "r2", "tool_call_id": "c2", "name": "bash"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ],
        [],
        [None, 1.0, None, None, 0.0, None],
        [None, 0, 0, 0, 1, 1],
    )
    row = to_sharegpt(conv)
    assert row["conversations"] == [
        {"from": "human", "value": "go"},
        {
            "from": "function_call",
            "value": '[{"name": "bash", "arguments": {"cmd": "ls"}}, '
            '{"name": "bash", "arguments": "oops"}]',
        },
        {"from": "observation", "value": "r1\nr2"},
        {"from": "gpt", "value": "done"},
    ]  # the closing user turn carries no loss and would break the alternation
    assert row["weights"] == [0.0, 1.0, 0.0, 0.0]


def test_sharegpt_merges_consecutive_assistant_turns() -> None:
    conv = SftConversation(
        "t",
        None,
        None,
        None,
        [
            {"role": "assistant", "content": "orphan"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "thinking"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": "r1", "tool_call_id": "c1", "name": "bash"},
        ],
        [],
        [0.0, None, 0.0, 1.0, None],
        [0, 0, 1, 2, 2],
    )
    row = to_sharegpt(conv)
    assert [t["from"] for t in row["conversations"]] == ["human", "function_call"]
    assert row["weights"] == [0.0, 1.0]


def test_axolotl_row() -> None:
    assert to_axolotl(conversation())["messages"] == [
        {"role": "system", "content": "sys", "weight": 0.0, "train": False},
        {"role": "user", "content": "fix it", "weight": 0.0, "train": False},
        {
            "role": "assistant",
            "content": "look",
            "reasoning": "hmm",
            "tool_calls": [CALL],
            "weight": 0.0,
            "train": False,
        },
        {
            "role": "tool",
            "content": "a.py",
            "tool_call_id": "c1",
            "name": "bash",
            "weight": 0.0,
            "train": False,
        },
        {"role": "assistant", "content": "done", "weight": 0.5, "train": True},
    ]


def test_encode_row_keeps_order_and_unicode() -> None:
    assert encode_row({"b": "é", "a": [1]}) == '{"b":"é","a":[1]}'
