"""Text with a lone UTF-16 surrogate (`"\\ud800"` in JSON) end to end: `content_hash` hashes it
deterministically on both the record and the row path, ingest quarantines the source line with
its file, line and field, and rows given to the lake directly are refused with the table,
column and trajectory named, never a bare UnicodeEncodeError."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.errors import InvalidRecord
from trajlake.records import content_hash, normalize_row
from trajlake.schema import Message

LONE = "x\ud800y"


def _messages(text: str) -> list[Message]:
    return [
        Message(trajectory_id="t", idx=0, role="user", content=text),
        Message(trajectory_id="t", idx=1, role="assistant", content="ok"),
    ]


def _row_hash(text: str) -> str:
    rows = [m.model_dump() for m in _messages(text)]
    record = normalize_row({"trajectory_id": "t", "messages": rows})
    return str(record["content_hash"])


def test_a_lone_surrogate_hashes_deterministically_and_apart() -> None:
    digest = content_hash(_messages(LONE))
    assert digest == content_hash(_messages(LONE)) == _row_hash(LONE)  # both paths agree
    others = {content_hash(_messages(t)) for t in ("xy", "x\ufffdy", "x\\ud800y", "x\udbffy")}
    assert digest not in others and len(others) == 4
    # The definition, by hand: compact JSON per message with the surrogate passed through.
    lines = [
        ["main", "user", LONE, "", []],
        ["main", "assistant", "ok", "", []],
    ]
    text = "".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n" for x in lines)
    assert digest == hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def test_valid_text_hashes_as_before() -> None:
    # Hashes of valid text are stored in every lake: the fallback must not change them.
    lines = [["main", "user", "héllo 😀", "", []], ["main", "assistant", "ok", "", []]]
    text = "".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n" for x in lines)
    expected = hashlib.sha256(text.encode()).hexdigest()
    assert content_hash(_messages("héllo 😀")) == _row_hash("héllo 😀") == expected


def test_ingest_quarantines_the_line_and_keeps_the_rest(lake: tl.Lake, tmp_path: Path) -> None:
    source = tmp_path / "chats.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": t}, {"role": "assistant", "content": "ok"}]}
        for t in ("fine", LONE)
    ]
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))  # `\ud800` as an escape
    assert "\\ud800" in source.read_text()
    report = lake.ingest(str(source), format="openai-messages")
    assert (report.added, report.quarantined) == (1, 1)
    (bad,) = lake.sql("SELECT source_uri, line, error FROM quarantine").to_dicts()
    assert (bad["source_uri"], bad["line"]) == (str(source), 2)
    assert "unpaired UTF-16 surrogate ('\\ud800') at messages[0].content" in bad["error"]
    assert lake.sql("SELECT content FROM messages WHERE role = 'user'").rows() == [("fine",)]


def test_writing_such_text_directly_names_where_it_is(lake: tl.Lake) -> None:
    record = {
        "trajectory_id": "t-lone",
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": LONE}],
    }
    with pytest.raises(
        InvalidRecord,
        match=r"messages\.content of trajectory 't-lone' holds an unpaired UTF-16 surrogate",
    ):
        lake.write([record])
    assert lake.sql("SELECT count(*) FROM trajectories").rows() == [(0,)]
