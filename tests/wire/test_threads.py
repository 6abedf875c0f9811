"""Threads from calls that resend their history: extension, a rewritten history, the fields
each message gets (the rule the recording proxy and OTLP ingest share)."""

from __future__ import annotations

from typing import Any

from trajlake.wire.threads import Placement, Threads, message_key

SYSTEM = {"role": "system", "content": "Be brief."}
ASK = {"role": "user", "content": "2+2?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 2}'}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "4"}
ANSWER = {"role": "assistant", "content": "4."}


def _place(
    threads: Threads, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], n: int
) -> Placement:
    return threads.place(
        inputs,
        outputs,
        input_fields={"timestamp": n},
        output_fields={"model": "m", "finish_reason": None},
        last_output_fields={"completion_tokens": n},
        call_id=f"call-{n}",
    )


def test_a_call_that_resends_the_history_extends_the_thread() -> None:
    threads = Threads()
    first = _place(threads, [SYSTEM, ASK], [CALL], 1)
    # Reformatted history (spacing, argument key order) is still the same history.
    call_again = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "arguments": '{"b":2,"a":2}'}]}
    second = _place(
        threads, [SYSTEM, {**ASK, "content": " 2+2? "}, call_again, RESULT], [ANSWER], 2
    )
    assert (first.thread, first.prefix, first.opened) == ("main", 0, True)
    assert (second.thread, second.prefix, second.opened, second.copied) == ("main", 3, False, 0)
    rows = threads.messages
    assert [m["role"] for m in rows] == ["system", "user", "assistant", "tool", "assistant"]
    assert {m["thread"] for m in rows} == {"main"}
    assert [m.get("timestamp") for m in rows] == [1, 1, None, 2, None]
    assert [m["attrs"]["call_id"] for m in rows if m["role"] == "assistant"] == ["call-1", "call-2"]
    assert [m.get("completion_tokens") for m in rows] == [None, None, 1, None, 2]
    assert all("finish_reason" not in m and "idx" not in m for m in rows)


def test_a_rewritten_history_opens_a_thread_with_its_copies_flagged() -> None:
    threads = Threads()
    _place(threads, [SYSTEM, ASK], [CALL], 1)
    summary = {"role": "user", "content": "Earlier: asked 2+2."}
    placed = _place(threads, [SYSTEM, summary], [ANSWER], 2)
    assert (placed.thread, placed.prefix, placed.opened, placed.copied) == ("t1", 0, True, 1)
    t1 = [m for m in threads.messages if m["thread"] == "t1"]
    assert [(m["role"], m.get("is_copied_context")) for m in t1] == [
        ("system", True),
        ("user", False),
        ("assistant", None),
    ]
    # A failed call adds nothing; `match` says which thread it would have extended.
    assert threads.match([message_key(m) for m in [SYSTEM, summary, ANSWER, ASK]]) == ("t1", 3)
    assert threads.match([message_key(ASK)]) is None
