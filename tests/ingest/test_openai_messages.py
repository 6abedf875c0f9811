"""OpenAI-messages adapter: Orchard-layout and plain chat JSONL.

There is no Orchard file in the corpus: the lines below are synthetic (made up here, in the
layout the `microsoft/Orchard` dataset card documents: `tools` and `metadata` as JSON strings,
messages with null-filled `tool_call_id`/`tool_calls`). One test wraps a real message list,
a τ-bench trajectory (MIT, tests/data/tau_bench), in the same layout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._registry import detect
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.openai_messages import OpenAIMessagesAdapter
from trajlake.records import normalize
from trajlake.sample import sample_trajectories
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data"
TAU_EXCERPT = DATA / "tau_bench" / "gpt-4o-airline.json"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository (synthetic).",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "submit", "description": "Submit.", "parameters": {"type": "object"}},
    },
]
# verify_status as it may come: booleans or words, any case → resolved.
VERDICTS: list[tuple[Any, bool]] = [
    (True, True),
    (False, False),
    ("resolved", True),
    ("UNRESOLVED", False),
    ("Success", True),
    ("failure", False),
    ("pass", True),
    ("FAIL", False),
    ("true", True),
    ("False", False),
]


def _message(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    """A message as a Hugging Face export writes it: every column present, nulls included."""
    return {"role": role, "content": content, "tool_call_id": None, "tool_calls": None, **extra}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def swe_line(rollout: int, verdict: Any) -> dict[str, Any]:
    """One synthetic Orchard `swe` row."""
    messages = [
        _message("system", "You are a careful software engineer. (synthetic)"),
        _message("user", f"Fix the failing test in tests/test_math.py. (synthetic task {rollout})"),
        _message(
            "assistant",
            "Let me read the test first.",
            reasoning_content="The failure is in add(); read the test.",
            tool_calls=[_call(f"call_{rollout}_1", "bash", {"command": "cat tests/test_math.py"})],
        ),
        _message(
            "tool", "def test_add():\n    assert add(1, 2) == 3\n", tool_call_id=f"call_{rollout}_1"
        ),
        _message("assistant", None, tool_calls=[_call(f"call_{rollout}_2", "submit", {})]),
        _message("tool", "submitted", tool_call_id=f"call_{rollout}_2"),
    ]
    metadata = {
        "instance_id": "example__mathlib-101",
        "rollout_id": f"r-{rollout:03d}",
        "verify_status": verdict,
        "teacher": "synthetic-teacher",
        "repo": "example/mathlib",
    }
    return {"tools": json.dumps(TOOLS), "messages": messages, "metadata": json.dumps(metadata)}


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def gui_line() -> dict[str, Any]:
    """One synthetic Orchard `gui` row: one decision point with its screenshot."""
    return {
        "messages": [
            {"role": "system", "content": "You operate a web browser. (synthetic)"},
            {"role": "user", "content": "<image>\nTask: find the cheapest kettle. (synthetic)"},
            {"role": "assistant", "content": "Thought: search first.\nAction: click(120, 48)"},
        ],
        "images": [{"bytes": base64.b64encode(PNG).decode(), "path": None}],
        "reward": 0.9,
        "status": "success",
        "metadata": json.dumps({"task_id": "synthetic--Shop--3", "step": 2}),
    }


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines))
    return path


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(OpenAIMessagesAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _read(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def test_orchard_swe_rows(tmp_path: Path) -> None:
    path = _write(tmp_path / "swe.jsonl", [swe_line(i, v) for i, (v, _) in enumerate(VERDICTS)])
    records = _records(path)
    assert [r.resolved for r in records] == [expected for _, expected in VERDICTS]
    assert {r.outcome_source for r in records} == {"metadata.verify_status"}
    assert len({r.trajectory_id for r in records}) == len(VERDICTS)
    record = records[0]
    assert record.task_id == "example__mathlib-101"
    assert record.tools == TOOLS
    assert record.attrs is not None
    assert (record.attrs["rollout_id"], record.attrs["teacher"]) == ("r-000", "synthetic-teacher")
    assert [m.role for m in record.messages] == ["system", "user", *["assistant", "tool"] * 2]
    first, result = record.messages[2], record.messages[3]
    assert first.reasoning == "The failure is in add(); read the test."
    assert first.tool_calls is not None
    assert [(c.id, c.name, c.arguments, c.type) for c in first.tool_calls] == [
        ("call_0_1", "bash", '{"command": "cat tests/test_math.py"}', "function")
    ]
    # The result answers the call by id and is named after it.
    assert (result.tool_call_id, result.name) == ("call_0_1", "bash")
    assert record.n_tool_calls == 2 and record.n_turns == 2
    assert record.reward is None and record.prompt_tokens is None  # nothing invented


def test_ids_come_from_the_rollout_or_the_content(tmp_path: Path) -> None:
    line = swe_line(7, "resolved")
    a = _records(_write(tmp_path / "a.jsonl", [line]))[0]
    # Same row, metadata as an object and other whitespace: the same rollout.
    as_object = {**line, "metadata": json.loads(line["metadata"])}
    b = _records(_write(tmp_path / "b.jsonl", [as_object]))[0]
    assert a.trajectory_id == b.trajectory_id
    plain = {"messages": line["messages"]}
    c = _records(_write(tmp_path / "c.jsonl", [plain]))[0]
    d_path = tmp_path / "d.jsonl"
    d_path.write_text(json.dumps(plain, indent=None, separators=(",", ":")) + "\n")
    d = _records(d_path)[0]
    assert c.trajectory_id == d.trajectory_id != a.trajectory_id


def test_gui_row_screenshot_by_reference(tmp_path: Path) -> None:
    (record,) = _records(_write(tmp_path / "gui.jsonl", [gui_line()]))
    assert (record.task_id, record.reward, record.resolved) == ("synthetic--Shop--3", 0.9, None)
    assert record.outcome_source == "reward"
    assert (record.status, record.exit_reason) == ("completed", "success")
    user = record.messages[1]
    assert user.parts is not None
    digest = hashlib.sha256(PNG).hexdigest()
    assert [(p.type, p.uri, p.sha256) for p in user.parts] == [
        ("text", None, None),
        ("image", f"data-sha256:{digest}", digest),
    ]
    assert base64.b64encode(PNG).decode() not in record.model_dump_json()


def test_content_parts_reasoning_and_legacy_calls(tmp_path: Path) -> None:
    audio = base64.b64encode(b"RIFF....WAVEfmt ").decode()
    line = {
        "messages": [
            {"role": "developer", "content": "Answer briefly."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in the picture?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                    {"type": "text", "text": "And the sound?"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "A cat."}],
                "reasoning": "Look.",
            },
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "meow", "arguments": "{}"},
            },
            {"role": "function", "name": "meow", "content": "meow"},
        ]
    }
    (record,) = _records(_write(tmp_path / "parts.jsonl", [line]))
    system, user, answer, legacy, result = record.messages
    assert (system.role, system.attrs) == ("system", {"role": "developer"})
    assert user.content == "What is in the picture?\nAnd the sound?"
    assert user.parts is not None
    assert [(p.type, p.uri, p.mime_type) for p in user.parts] == [
        ("text", None, None),
        ("image", "https://example.com/cat.png", None),
        (
            "audio",
            f"data-sha256:{hashlib.sha256(base64.b64decode(audio)).hexdigest()}",
            "audio/wav",
        ),
        ("text", None, None),
    ]
    assert (answer.content, answer.parts, answer.reasoning) == ("A cat.", None, "Look.")
    assert legacy.tool_calls is not None and legacy.tool_calls[0].name == "meow"
    assert (result.role, result.name, result.attrs) == ("tool", "meow", {"role": "function"})


def test_real_message_list_in_orchard_layout(tmp_path: Path) -> None:
    element = json.loads(TAU_EXCERPT.read_text())[1]  # τ-bench task 1, trial 1 (MIT)
    line = {
        "tools": "[]",
        "messages": element["traj"],
        "metadata": json.dumps({"instance_id": "airline/1", "rollout_id": "t1", "reward": 1.0}),
    }
    (record,) = _records(_write(tmp_path / "tau.jsonl", [line]))
    traj = element["traj"]
    assert [m.role for m in record.messages] == [m["role"] for m in traj]
    assert [m.content for m in record.messages] == [m["content"] for m in traj]
    calls = [c for m in record.messages for c in m.tool_calls or []]
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for m in traj
        for c in m.get("tool_calls") or []
    ]
    assert [m.name for m in record.messages if m.role == "tool"] == [
        m["name"] for m in traj if m["role"] == "tool"
    ]
    assert (record.reward, record.resolved, record.outcome_source) == (1.0, None, "metadata.reward")
    assert record.tools == []


def test_bad_lines_are_quarantined(tmp_path: Path) -> None:
    good = swe_line(1, True)
    not_json_tools = {**swe_line(2, True), "tools": "[{'type': 'function'"}
    no_messages = {"metadata": "{}", "messages": "hello"}
    bad_role = {"messages": [{"role": "narrator", "content": "?"}], "metadata": "{}"}
    lines: list[Any] = [good, not_json_tools, no_messages, bad_role, "[1, 2]", "{oops", good]
    items = _read(_write(tmp_path / "mixed.jsonl", lines))
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert [i.line for i in bad] == [2, 3, 4, 5, 6]
    assert "'tools'" in bad[0].error and "'messages'" in bad[1].error
    assert bad[2].field == "messages.0.role"
    assert "JSON object" in bad[3].error and "malformed JSON" in bad[4].error
    assert sum(isinstance(i, ParsedTrajectory) for i in items) == 2


def test_sniff_leaves_canonical_lines_and_other_formats_alone(
    tmp_path: Path, sample_lake: tl.Lake
) -> None:
    adapter = OpenAIMessagesAdapter()

    def sniff(path: Path) -> float:
        source = SourceFile(str(path), os.path.getsize(path))
        return adapter.sniff(source, read_head(source))

    assert sniff(_write(tmp_path / "swe.jsonl", [swe_line(0, True)])) == 1.0
    assert (
        sniff(_write(tmp_path / "plain.jsonl", [{"messages": swe_line(0, True)["messages"]}]))
        == 0.9
    )
    canonical = _write(tmp_path / "canonical.jsonl", list(sample_trajectories(3)))
    assert sniff(canonical) == 0.0
    exported = tmp_path / "exported.jsonl"
    sample_lake.export_jsonl(str(exported))
    assert sniff(exported) == 0.0
    assert detect(SourceFile(str(exported), os.path.getsize(exported))).name == "canonical"
    others = [
        *expand_sources([str(DATA)]),
        *(expand_sources([str(SHARED_CORPUS)]) if SHARED_CORPUS.exists() else []),
    ]
    for other in others:
        assert adapter.sniff(other, read_head(other)) < 0.5, other.uri


def test_lines_longer_than_the_sniffed_head(tmp_path: Path) -> None:
    line = swe_line(0, True)
    line["messages"][3]["content"] = "x" * 70_000  # a long tool output, as in real SWE rows
    path = _write(tmp_path / "long.jsonl", [line])
    source = SourceFile(str(path), os.path.getsize(path))
    assert OpenAIMessagesAdapter().sniff(source, read_head(source)) == 0.6
    assert detect(source).name == "openai-messages"
    (record,) = _records(path)
    assert record.messages[3].content == "x" * 70_000


def test_ingest_and_query_attrs(lake: tl.Lake, tmp_path: Path) -> None:
    lines = [swe_line(i, v) for i, (v, _) in enumerate(VERDICTS)] + [gui_line()]
    path = _write(tmp_path / "orchard.jsonl", lines)
    report = lake.ingest(path)
    assert report.formats == {"openai-messages": 1}
    assert (report.added, report.quarantined) == (11, 0)
    rows = lake.sql(
        "SELECT json_extract_string(attrs, '$.rollout_id') AS rollout, resolved "
        "FROM trajectories WHERE task_id = 'example__mathlib-101' ORDER BY rollout"
    ).rows()
    assert rows == [(f"r-{i:03d}", expected) for i, (_, expected) in enumerate(VERDICTS)]
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    assert roles == {"system": 11, "user": 11, "assistant": 21, "tool": 20}
    calls = lake.sql("SELECT tool_name, count(*) FROM tool_calls GROUP BY 1 ORDER BY 1").rows()
    assert calls == [("bash", 10), ("submit", 10)]
    assert lake.ingest(path, format="openai-messages").added == 0


@pytest.mark.parametrize("verdict", ["maybe", None, 3])
def test_unknown_verdicts_give_no_outcome(tmp_path: Path, verdict: Any) -> None:
    (record,) = _records(_write(tmp_path / "x.jsonl", [swe_line(0, verdict)]))
    assert (record.resolved, record.outcome_source) == (None, None)
    assert record.attrs is not None and record.attrs.get("verify_status") == verdict
