"""The one base of line-oriented adapters: first-line sniffing, line numbers, one error contract.

A subclass that states only its key test and its record builder must get what every JSONL
adapter gives: blank lines and a byte-order mark skipped, each bad line a BadRecord with its
line number and byte offset, mapping and validation errors reported alike, good lines intact.
"""

from __future__ import annotations

import io
import json
from typing import IO, Any

from trajlake.ingest._adapter import BadRecord, ParsedTrajectory, to_parsed
from trajlake.ingest._jsonl_adapter import Builder, JsonLinesAdapter, first_line, json_object
from trajlake.ingest._sources import SourceFile
from trajlake.ingest.canonical import CanonicalAdapter

SOURCE = SourceFile("memory://rollouts.jsonl", None)


def _trajectory(tid: str) -> dict[str, Any]:
    return {"id": tid, "turns": [{"role": "user", "content": "hi"}]}


def _record(value: Any) -> dict[str, Any]:
    obj = json_object(value)
    if "turns" not in obj:
        raise ValueError("field 'turns': missing")
    return {"trajectory_id": obj["id"], "messages": obj["turns"]}


class _TurnsAdapter(JsonLinesAdapter):
    """A made-up format `{id, turns}` per line: only the key test and the builder are its own."""

    def sniff_value(self, value: Any) -> float:
        return 1.0 if isinstance(value, dict) and "turns" in value else 0.0

    def builder(self, source: SourceFile, stream: IO[bytes]) -> Builder:
        return _record


def test_first_line_is_parsed_or_left_to_the_prefix_test() -> None:
    whole = first_line(b'\n\n  {"a": 1}\n{"b": 2}\n')
    assert whole.parsed and whole.value == {"a": 1} and whole.complete
    cut = first_line(b'{"a": "' + b"x" * 100)
    assert not cut.parsed and not cut.complete and cut.text.startswith(b'{"a"')
    adapter = _TurnsAdapter()
    assert adapter.sniff(SOURCE, json.dumps(_trajectory("t")).encode() + b"\n") == 1.0
    assert adapter.sniff(SOURCE, b'{"turns": [') == 0.0  # the default prefix test: not sure


def test_lines_keep_their_numbers_offsets_and_errors() -> None:
    lines = [
        b"\xef\xbb\xbf" + json.dumps(_trajectory("a")).encode(),  # BOM before line 1
        b"",
        b'{"id": "b", "turns": [',  # malformed JSON
        b"[1, 2]",  # not an object: the mapping's TypeError
        b'{"id": "c"}',  # the mapping's ValueError
        b'{"id": "d", "turns": [{"role": 7}]}',  # a validation error
        json.dumps(_trajectory("e")).encode(),
    ]
    data = b"\n".join(lines) + b"\n"
    out = list(_TurnsAdapter().read(SOURCE, io.BytesIO(data)))
    good = [p for p in out if isinstance(p, ParsedTrajectory)]
    bad = [p for p in out if isinstance(p, BadRecord)]
    assert [(p.record.trajectory_id, p.line) for p in good] == [("a", 1), ("e", 7)]
    assert [b.line for b in bad] == [3, 4, 5, 6]
    starts = [sum(len(x) + 1 for x in lines[: i - 1]) for i in (3, 4, 5, 6)]
    assert [b.offset for b in bad] == starts
    assert bad[0].error.startswith("malformed JSON")
    assert bad[1].error == "expected a JSON object, got list"
    assert bad[2].error == "field 'turns': missing"
    assert bad[3].field is not None and bad[3].field.startswith("messages.0.role")
    assert [b.raw for b in bad[1:]] == lines[3:6]


def test_raw_bytes_are_made_only_for_a_bad_record() -> None:
    made: list[int] = []

    def raw() -> tuple[bytes, int]:
        made.append(1)
        return b"{}", 2

    good = to_parsed({"trajectory_id": "x", "messages": []}, offset=0, raw=raw)
    assert isinstance(good, ParsedTrajectory) and not made
    bad = to_parsed(lambda: _record({"id": "y"}), offset=3, raw=raw)
    assert isinstance(bad, BadRecord) and made == [1]
    assert (bad.line, bad.offset, bad.raw, bad.raw_size) == (None, 3, b"{}", 2)


def test_canonical_lines_after_blank_lines_are_recognised() -> None:
    # The first line is found past leading blank lines, as for every line-oriented format
    # (before the shared base, canonical alone read the empty line and gave up).
    line = json.dumps({"trajectory_id": "t", "source_format": "x", "messages": []}).encode()
    assert CanonicalAdapter().sniff(SOURCE, b"\n\n" + line + b"\n") == 1.0
