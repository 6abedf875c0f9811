"""JSON lines read by orjson give exactly the values `json` gives, and the lines orjson cannot
read exactly (integers past 64 bits, deep nesting, NaN, bad text) are read by `json` as before."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from trajlake.ingest._adapter import BadRecord, _fast_value, iter_json_lines, loads
from trajlake.ingest._limits import Limits, watching


def _chat_line(**metadata: Any) -> bytes:
    messages = [
        {"role": "system", "content": "You fix bugs. \u00e9\u4e2d \U0001f600"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "ls -la", "n": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py\t\\ \"q\""},
    ]  # fmt: skip
    return json.dumps({"messages": messages, "metadata": metadata}).encode()


EXACT_LINES = [
    _chat_line(reward=1.0, steps=7, ok=True, none=None),
    _chat_line(small=1e-05, big=1e16, neg=-0.0, zero=-0, third=1 / 3, tiny=5e-324),
    # 19 digits and more: read by `json` (the same values)
    _chat_line(top=9223372036854775807, bottom=-9223372036854775808, u64=18446744073709551615),
    _chat_line(ts_ns=1_700_000_000_123_456_789),
    b'{"messages": [], "metadata": {"a": 1, "b": 2, "a": 3}}',  # the last duplicate wins
    b'{"a": "\\ud83d\\ude00 \\u00e9 \\u0000 \\n"}',
    b'{"wide": [' + b",".join(b'{"k": [%d]}' % i for i in range(600)) + b"]}",  # many, shallow
    b"[" * 300 + b"1" + b"]" * 300,
]
FALLBACK_LINES = [
    _chat_line(big=123456789012345678901234567890),
    _chat_line(neg=-9223372036854775809, over=18446744073709551616),
    b'{"x": NaN, "y": [Infinity, -Infinity]}',
    b'{"x": 1e400}',
    b"[" * 600 + b"]" * 600,
]


def _decoded(line: bytes) -> Any:
    with watching(Limits()):
        ((_, _, _, value),) = list(iter_json_lines(io.BytesIO(line + b"\n")))
    return value


@pytest.mark.parametrize("line", EXACT_LINES + FALLBACK_LINES)
def test_values_equal_json_values(line: bytes) -> None:
    value = _decoded(line)
    with watching(Limits()):
        expected = loads(line)
    # repr: the same types (int, not float), the same key order, -0.0 kept
    assert repr(value) == repr(expected)


@pytest.mark.parametrize("line", EXACT_LINES[:2] + EXACT_LINES[4:])
def test_orjson_reads_the_lines_it_reads_exactly(line: bytes) -> None:
    exact, value = _fast_value(line)
    assert exact and repr(value) == repr(json.loads(line))


@pytest.mark.parametrize("line", [*EXACT_LINES[2:4], *FALLBACK_LINES, b'{"lone": "\\ud800"}'])
def test_json_reads_the_lines_orjson_cannot_read_exactly(line: bytes) -> None:
    assert _fast_value(line) == (False, None)


def test_integers_past_64_bits_stay_integers() -> None:
    value = _decoded(_chat_line(big=123456789012345678901234567890))
    assert value["metadata"]["big"] == 123456789012345678901234567890
    assert type(value["metadata"]["big"]) is int


def test_non_finite_numbers_are_null_and_counted() -> None:
    with watching(Limits()) as watch:
        ((_, _, _, value),) = list(iter_json_lines(io.BytesIO(b'{"x": NaN, "y": [Infinity]}\n')))
    assert value == {"x": None, "y": [None]}
    assert watch.non_finite_parsed == 2


def test_nesting_past_the_recursion_limit_is_a_bad_record() -> None:
    value = _decoded(b"[" * 100_000 + b"]" * 100_000)
    assert isinstance(value, BadRecord)
    assert "nested too deeply" in value.error


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"lone": "\\ud800"}', "unpaired UTF-16 surrogate"),
        (b'{"bad": "\xff"}', "invalid UTF-8 at byte 9"),
        (b'{"a": 1,}', "malformed JSON: Expecting property name"),
        (b'{"a": "\x01"}', "malformed JSON: Invalid control character"),
        (b'{"a": 1} {"b": 2}', "malformed JSON: Extra data"),
    ],
)
def test_bad_lines_are_reported_as_json_reports_them(line: bytes, reason: str) -> None:
    value = _decoded(line)
    assert isinstance(value, BadRecord)
    assert reason in value.error
