"""The row fast path gives exactly the rows of the model path, and loses nothing.

Inputs: real message lists (τ-bench, MIT, tests/data/tau_bench) in the Orchard and plain chat
layouts; real conversations from every corpus adapter re-shaped as OpenAI chat lines (skipped
without the corpus); generated lines covering the shapes the fast path hands back to the
model path (content parts, legacy calls, images, odd types) and broken lines.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import trajlake as tl
from trajlake.ingest import IngestOptions, ingest
from trajlake.ingest._adapter import ParsedTrajectory
from trajlake.ingest._parse import ParsedChunk, ParseTask, Stamp, parse_task
from trajlake.ingest._pipeline import _line_chunks, _tasks
from trajlake.ingest._registry import detect
from trajlake.ingest._rows import ParsedRow, plain_chat_record
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.ingest.openai_messages import OpenAIMessagesAdapter, _record
from trajlake.records import dict_rows, record_rows, rows_to_tables
from trajlake.redact import Redactor, redact_row, redact_trajectory, row_texts, trajectory_texts
from trajlake.schema import CanonicalTrajectory

DATA = Path(__file__).parents[1] / "data"
TAU = DATA / "tau_bench" / "gpt-4o-airline.json"
SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
KEYS = {"trajectories": ["trajectory_id"], "messages": ["trajectory_id", "thread", "idx"]}


def _write(path: Path, lines: list[Any]) -> Path:
    """One line per item: bytes and strings as they are, anything else as JSON."""
    with open(path, "wb") as f:
        for x in lines:
            raw = (
                x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode()
            )
            f.write(raw + b"\n")
    return path


def _parse(path: Path, fast: bool, **task: Any) -> ParsedChunk:
    stamp = Stamp("ingest-1", NOW, fast_path=fast)
    return parse_task(
        ParseTask(str(path), os.path.getsize(path), None, "openai-messages", **task), stamp
    )


def _sorted(table: pa.Table, name: str) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in KEYS[name]])


def assert_same_rows(a: ParsedChunk, b: ParsedChunk) -> None:
    """Every column of `trajectories` and `messages` equal; quarantine equal; same counts."""
    assert (a.trajectories, a.quarantined, a.redactions) == (
        b.trajectories,
        b.quarantined,
        b.redactions,
    )
    assert a.problems == b.problems
    for name in ("trajectories", "messages"):
        x, y = _sorted(a.tables[name], name), _sorted(b.tables[name], name)
        assert x.schema == y.schema
        differ = [c for c in x.column_names if not x.column(c).equals(y.column(c))]
        assert differ == [], f"{name}: columns differ: {differ}"
    if "quarantine" in a.tables or "quarantine" in b.tables:
        assert a.tables["quarantine"].equals(b.tables["quarantine"])


def _tau_lines() -> list[dict[str, Any]]:
    """τ-bench's real message lists, alternately in the Orchard and the plain chat layout."""
    lines = []
    for i, element in enumerate(json.loads(TAU.read_text())):
        meta = {"instance_id": f"airline/{element['task_id']}", "rollout_id": f"t{i}"}
        meta["reward"] = element.get("reward")
        if i % 2:
            lines.append({"tools": "[]", "messages": element["traj"], "metadata": json.dumps(meta)})
        else:
            lines.append({"messages": element["traj"], "metadata": meta, "tools": []})
    return lines


def _odd_lines() -> list[Any]:
    """Shapes the fast path hands to the models, and lines that must be quarantined."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"b": 1, "a": 2}'},
    }
    base = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
    ]
    return [
        {"messages": [*base, {"role": "assistant", "content": None, "tool_calls": [call]}]},
        {"messages": [*base, {"role": "developer", "content": "be brief"}], "metadata": {"id": 7}},
        {"messages": [*base, {"role": "user", "content": parts}], "metadata": {"rollout_id": "p"}},
        {
            "messages": [
                *base,
                {
                    "role": "assistant",
                    "content": "x",
                    "function_call": {"name": "f", "arguments": {}},
                },
            ]
        },
        {"messages": [*base, {"role": "assistant", "content": "hm", "reasoning_content": "think"}]},
        {"messages": [*base, {"role": "tool", "content": "out", "tool_call_id": 5}]},
        {
            "messages": [
                *base,
                {"role": "assistant", "tool_calls": [{"id": 3, "function": {"name": "f"}}]},
            ]
        },
        {
            "messages": [
                *base,
                {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]},
            ]
        },
        {"messages": base, "metadata": {"rollout_id": "big", "n": 123456789012345678901234567890}},
        '{"messages": [{"role": "user", "content": "nan"}], "metadata": {"reward": NaN}}',
        {
            "messages": base,
            "metadata": {"verify_status": "PASS", "status": "timeout"},
            "extra": [1],
        },
        {"messages": [{"role": "narrator", "content": "?"}]},
        {"messages": [{"role": ["user"], "content": "?"}]},
        {"messages": "hello"},
        "[1, 2]",
        "{oops",
        b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
        {
            "messages": [
                *base,
                {"role": "user", "content": "key sk-proj-Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1x"},
            ]
        },
        {"messages": []},
    ]


def test_real_message_lists_give_the_same_rows(tmp_path: Path) -> None:
    path = _write(tmp_path / "tau.jsonl", _tau_lines())
    fast, model = _parse(path, True), _parse(path, False)
    assert fast.trajectories == 12 and fast.quarantined == 0
    assert_same_rows(fast, model)


def test_odd_and_broken_lines_give_the_same_rows_and_quarantine(tmp_path: Path) -> None:
    path = _write(tmp_path / "odd.jsonl", _odd_lines())
    fast, model = _parse(path, True), _parse(path, False)
    assert_same_rows(fast, model)
    bad = fast.tables["quarantine"].to_pylist()
    assert [b["line"] for b in bad] == [6, 7, 8, 12, 13, 14, 15, 16, 17]
    assert all(b["source_uri"] == str(path) for b in bad)
    assert bad[0]["field"] == "messages.2.tool_call_id"
    assert "malformed JSON" in bad[7]["error"] and "invalid UTF-8" in bad[8]["error"]
    big = [
        r
        for r in fast.tables["trajectories"].to_pylist()
        if "123456789012345678901234567890" in (r["attrs"] or "")
    ]
    assert len(big) == 1  # a 30-digit integer is kept exactly, not as a float


def test_which_lines_skip_validation(tmp_path: Path) -> None:
    """Plain lines come as rows; lines with parts or values of the wrong type go to the models
    (which keep or reject them exactly as before)."""
    path = _write(tmp_path / "odd.jsonl", _odd_lines()[:9] + _tau_lines()[:2])
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        items = list(OpenAIMessagesAdapter().read_rows(source, stream))
    assert [type(i).__name__ for i in items] == [
        "ParsedRow", "ParsedRow", "ParsedTrajectory", "ParsedRow", "ParsedRow",
        "BadRecord", "BadRecord", "BadRecord", "ParsedRow", "ParsedRow", "ParsedRow",
    ]  # fmt: skip
    for line in _odd_lines()[:9]:
        if isinstance(line, dict) and plain_chat_record(record := _record(line)):
            CanonicalTrajectory.model_validate(record)  # what skips validation would pass it


def test_chunks_give_the_lines_and_rows_of_the_whole_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "tau.jsonl", _tau_lines() * 3 + _odd_lines())
    whole = _parse(path, True)
    source = SourceFile(str(path), os.path.getsize(path))
    chunks = [
        _parse(path, True, start=start, end=end, first_line=line)
        for start, end, line in _line_chunks(source, 20_000)
    ]
    assert len(chunks) > 3
    tables = {
        n: pa.concat_tables([c.tables[n] for c in chunks if n in c.tables]) for n in whole.tables
    }
    assert (
        tables["quarantine"].column("line").to_pylist()
        == whole.tables["quarantine"].column("line").to_pylist()
    )
    for name in KEYS:
        assert _sorted(tables[name], name).equals(_sorted(whole.tables[name], name))


def test_big_chat_files_are_split_evenly_for_the_workers(tmp_path: Path) -> None:
    path = _write(tmp_path / "tau.jsonl", _tau_lines() * 20)  # ≈ 1.4 MB
    source = SourceFile(str(path), os.path.getsize(path))
    plan = [(source, OpenAIMessagesAdapter())]
    for workers in (1, 2, 3):
        tasks = list(_tasks(plan, 400_000, workers))
        assert len(tasks) % workers == 0 and len(tasks) >= 4
        sizes = [t.length for t in tasks]
        assert max(sizes) - min(sizes) < 70_000  # within about a line of each other
        assert [t.start for t in tasks[1:]] == [t.end for t in tasks[:-1]]
        assert tasks[-1].end == source.size


def test_parallel_ingest_of_a_chat_file_in_chunks(tmp_path: Path) -> None:
    """Worker processes parse line-aligned chunks; every line lands once, with its line."""
    lines = [
        {**line, "metadata": {"rollout_id": f"r{i}"}} for i, line in enumerate(_tau_lines() * 10)
    ]
    path = _write(tmp_path / "many.jsonl", [*lines, "{oops"])
    lake = tl.open_lake(tmp_path / "lake", create=True)
    options = IngestOptions(workers=2, parallel_min_bytes=0, chunk_bytes=100_000)
    report = ingest(lake, [str(path)], options=options)
    assert (report.added, report.quarantined) == (120, 1)
    rows = lake.sql("SELECT source_line, attrs FROM trajectories ORDER BY source_line").to_dicts()
    assert [r["source_line"] for r in rows] == list(range(1, 121))
    assert [json.loads(r["attrs"])["rollout_id"] for r in rows] == [f"r{i}" for i in range(120)]
    assert lake.sql("SELECT line FROM quarantine").to_dicts() == [{"line": 121}]


@functools.cache
def _corpus_records() -> tuple[CanonicalTrajectory, ...]:
    """Every trajectory the adapters read from the shared corpus (read once; copy to change)."""
    records = []
    for source in expand_sources([str(SHARED_CORPUS)]):
        try:
            adapter = detect(source)
        except tl.TrajlakeError:
            continue
        with source.open() as stream:
            records += [
                i.record for i in adapter.read(source, stream) if isinstance(i, ParsedTrajectory)
            ]
    return records


def _as_chat_line(record: CanonicalTrajectory) -> dict[str, Any]:
    messages = []
    for m in record.messages:
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            out["tool_call_id"] = m.tool_call_id
        messages.append(out)
    return {
        "messages": messages,
        "tools": record.tools,
        "metadata": {"rollout_id": record.trajectory_id},
    }


@pytest.mark.skipif(not SHARED_CORPUS.exists(), reason="shared corpus not present")
def test_corpus_conversations_as_chat_lines_give_the_same_rows(tmp_path: Path) -> None:
    records = _corpus_records()
    assert len(records) > 100
    path = _write(tmp_path / "corpus-chat.jsonl", [_as_chat_line(r) for r in records])
    fast, model = _parse(path, True), _parse(path, False)
    assert fast.trajectories + fast.quarantined == len(records)
    assert_same_rows(fast, model)


@pytest.mark.skipif(not SHARED_CORPUS.exists(), reason="shared corpus not present")
def test_rows_of_corpus_records_match_the_model_path() -> None:
    """Row normalisation and redaction on real records of every adapter equal the models'."""
    records = [r.model_copy(deep=True) for r in _corpus_records()]
    for record in records:
        row = record.model_dump(exclude_none=True)
        assert row_texts(row) == trajectory_texts(record), record.trajectory_id
        found_row = redact_row(row, Redactor())
        found_model = redact_trajectory(record, Redactor())
        assert found_row == found_model
    model_rows = [record_rows(r.model_copy(deep=True)) for r in records]
    plain_rows = [dict_rows(r.model_dump(exclude_none=True)) for r in records]
    a = rows_to_tables([t for t, _ in model_rows], [m for _, ms in model_rows for m in ms])
    b = rows_to_tables([t for t, _ in plain_rows], [m for _, ms in plain_rows for m in ms])
    for name in KEYS:
        assert a[name].equals(b[name]), name


def test_parsed_row_is_stamped_like_a_record(tmp_path: Path) -> None:
    path = _write(tmp_path / "tau.jsonl", _tau_lines()[:1])
    stamp = Stamp("ingest-9", NOW, generation=3, run_id="run-a", stage="rl", fast_path=True)
    task = ParseTask(str(path), os.path.getsize(path), None, "openai-messages")
    (row,) = parse_task(task, stamp).tables["trajectories"].to_pylist()
    assert (row["generation"], row["run_id"], row["stage"]) == (3, "run-a", "rl")
    assert (row["source_format"], row["source_uri"], row["source_line"]) == (
        "openai-messages",
        str(path),
        1,
    )
    assert (row["ingest_id"], row["ingested_at"]) == ("ingest-9", NOW)
    assert isinstance(ParsedRow({}, 1, 0).record, dict)


@pytest.mark.parametrize("fmt", ["openai-messages", "canonical"])
def test_an_unpaired_surrogate_costs_only_its_line(tmp_path: Path, fmt: str) -> None:
    """`"\\ud800"` decodes to text UTF-8 cannot hold: that line is quarantined, not the file."""
    texts = ["x\ud800y", "ok \U0001f600"]  # json.dumps writes them as escapes
    if fmt == "canonical":
        lines = [
            {"trajectory_id": i, "messages": [{"role": "user", "content": t}]}
            for i, t in zip("ab", texts, strict=True)
        ]
    else:
        lines = [
            {"messages": [{"role": "user", "content": t}], "metadata": {"id": i}}
            for i, t in zip("ab", texts, strict=True)
        ]
    assert "\\ud800" in json.dumps(lines[0])
    path = _write(tmp_path / "s.jsonl", lines)
    lake = tl.open_lake(tmp_path / "lake", create=True)
    report = lake.ingest(path, format=fmt)
    assert (report.added, report.quarantined) == (1, 1)
    (bad,) = lake.sql("SELECT line, error FROM quarantine").to_dicts()
    assert bad["line"] == 1 and "unpaired UTF-16 surrogate" in bad["error"]
    (kept,) = lake.sql("SELECT content FROM messages").to_dicts()
    assert kept["content"] == "ok 😀"


_SURROGATE_CASES = {
    # one trajectory per line: the first message's content
    "responses": (
        DATA / "responses/resources_servers/example_multi_step/data/example_rollouts.jsonl",
        4,
        ("responses_create_params", "input", 0, "content"),
    ),
    # one session per file, an event per line: an assistant message's text
    "claude-code": (
        DATA / "claude_code/marot_spotter/short.jsonl",
        6,
        ("message", "content", 0, "text"),
    ),
}


@pytest.mark.parametrize("fmt", sorted(_SURROGATE_CASES))
def test_an_unpaired_surrogate_is_quarantined_in_every_line_format(
    tmp_path: Path, fmt: str
) -> None:
    """The check sits in the shared line reader: adapters of line records and of session
    lines alike quarantine the one line (file, line, reason) and keep the rest."""
    source, n, keys = _SURROGATE_CASES[fmt]
    lines = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
    holder = lines[n]
    for key in keys[:-1]:
        holder = holder[key]
    holder[keys[-1]] += "\ud800"
    path = _write(tmp_path / f"{fmt}.jsonl", lines)
    lake = tl.open_lake(tmp_path / "lake", create=True)
    report = lake.ingest(path, format=fmt)
    assert report.quarantined == 1 and report.added >= 1
    (bad,) = lake.sql("SELECT source_uri, line, error FROM quarantine").to_dicts()
    assert (bad["source_uri"], bad["line"]) == (str(path), n + 1)
    assert "unpaired UTF-16 surrogate" in bad["error"]
    assert report.problems[0].startswith(f"{path}:{n + 1}: ")


@pytest.mark.parametrize("fast", [True, False])
def test_model_names_are_settled_on_both_paths(tmp_path: Path, fast: bool) -> None:
    lines = [
        {"messages": [{"role": "user", "content": "q"}], "metadata": {"id": str(i), "model": m}}
        for i, m in enumerate(("gpt-4o", "openai:gpt-4o", "unknown"))
    ]
    path = _write(tmp_path / "m.jsonl", lines)
    rows = _parse(path, fast).tables["trajectories"].to_pylist()
    got = {
        (r["policy_model"], json.loads(r["attrs"] or "{}").get("raw_policy_model")) for r in rows
    }
    # a placeholder name is no model, and is kept as the source wrote it
    assert got == {
        ("openai/gpt-4o", "gpt-4o"),
        ("openai/gpt-4o", "openai:gpt-4o"),
        (None, "unknown"),
    }


def test_model_names_give_the_same_rows_on_both_paths(tmp_path: Path) -> None:
    lines = _tau_lines()
    for i, line in enumerate(lines):
        meta = line["metadata"] if isinstance(line["metadata"], dict) else None
        if meta is not None:
            meta["model"] = ("gpt-4o", "litellm/anthropic/claude-3-5-sonnet", "x")[i % 3]
    path = _write(tmp_path / "tau.jsonl", lines)
    assert_same_rows(_parse(path, True), _parse(path, False))
