"""OTLP/JSON trace files made by the real OpenTelemetry SDK, in each GenAI convention, ingested
into a real lake: roles, tool calls and results, models, token usage and `calls` rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from tests.otlp.traces import (
    CONVENTIONS,
    collector_lines,
    current_genai,
    export_json,
    openinference,
    record,
)

# Per convention: (harness, policy model, prompt tokens, completion tokens, tool name, result).
EXPECTED = {
    "current": ("weather-bot", "gpt-4o-mini-2024-07-18", 65, 22, "get_weather", "rainy, 12 C"),
    "older-attributes": ("demo-agent", "gpt-4o-2024-08-06", 80, 14, "lookup_order", "shipped"),
    "older-events": ("calc", "gpt-4.1", 40, 9, "calc", "42"),
    "openinference": ("searcher", "claude-sonnet-4", 41, 12, "search", "opentelemetry.io"),
}


def _rows(lake: tl.Lake, query: str, *params: Any) -> list[dict[str, Any]]:
    return lake.sql(query, params=list(params) or None).to_arrow().to_pylist()


@pytest.mark.parametrize("convention", sorted(CONVENTIONS))
def test_each_convention_ingests_into_a_trajectory(
    lake: tl.Lake, tmp_path: Path, convention: str
) -> None:
    path = tmp_path / f"{convention}.json"
    path.write_text(json.dumps(export_json(record(CONVENTIONS[convention]))))
    report = lake.ingest(path)  # detected by content
    assert report.formats == {"otlp": 1} and report.added == 1 and report.quarantined == 0
    harness, model, prompt, completion, tool, result = EXPECTED[convention]
    (t,) = _rows(lake, "SELECT * FROM trajectories")
    assert (t["harness"], t["status"]) == (harness, "completed")
    assert t["policy_model"].split("/")[-1] == model  # provider-qualified by ingest
    assert (t["prompt_tokens"], t["completion_tokens"]) == (prompt, completion)
    assert t["total_tokens"] == prompt + completion and t["source_format"] == "otlp"
    messages = _rows(lake, "SELECT * FROM messages ORDER BY idx")
    roles = [m["role"] for m in messages]
    # The second call repeats the first call's history: it is stored once.
    assert roles[-4:] == ["user", "assistant", "tool", "assistant"]
    assert roles.count("user") == 1 and {m["thread"] for m in messages} == {"main"}
    asked, answered = messages[-3], messages[-2]
    (call,) = (
        json.loads(asked["tool_calls"])
        if isinstance(asked["tool_calls"], str)
        else asked["tool_calls"]
    )
    assert call["name"] == tool and answered["content"] == result
    assert answered["tool_call_id"] == call["id"]
    assert (
        messages[-1]["model"].split("/")[-1] == model
        and messages[-1]["completion_tokens"] is not None
    )
    calls = _rows(lake, "SELECT * FROM calls ORDER BY seq")
    assert [c["seq"] for c in calls] == [0, 1]
    assert [c["history_prefix"] for c in calls] == [0, len(messages) - 2]
    assert sum(c["prompt_tokens"] for c in calls) == prompt
    assert all(
        c["latency_ms"] == 1000.0 and c["trajectory_id"] == t["trajectory_id"] for c in calls
    )
    assert lake.ingest(path).added == 0  # re-ingest: nothing new


def test_jsonl_requests_and_a_conversation_across_traces(lake: tl.Lake, tmp_path: Path) -> None:
    # Two traces of one conversation (gen_ai.conversation.id), their spans split over lines as
    # a batching exporter sends them; one OpenInference session in its own trace.
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in collector_lines()))
    report = lake.ingest(path)
    assert report.added == 2 and report.quarantined == 0
    rows = _rows(lake, "SELECT harness, prompt_tokens, attrs FROM trajectories ORDER BY harness")
    assert [r["harness"] for r in rows] == ["searcher", "weather-bot"]
    weather = json.loads(rows[1]["attrs"])["otlp"]
    assert len(weather["trace_ids"]) == 2 and weather["conversation_id"] == "conv-7"
    assert rows[1]["prompt_tokens"] == 2 * 65
    assert _rows(lake, "SELECT count(*) AS n FROM calls")[0]["n"] == 6


def test_bad_input_is_quarantined_with_line_and_field(lake: tl.Lake, tmp_path: Path) -> None:
    good = export_json(record(current_genai))
    broken = json.loads(json.dumps(good))
    span = broken["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    del span["traceId"]
    typed = export_json(record(openinference, seed=5))
    tokens = typed["resourceSpans"][0]["scopeSpans"][0]["spans"]
    llm = next(s for s in tokens if s["name"] == "ChatAnthropic")
    for attribute in llm["attributes"]:
        if attribute["key"] == "llm.token_count.prompt":
            attribute["value"] = {"stringValue": "eleven"}
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        json.dumps(good) + "\n{not json\n" + json.dumps(broken) + "\n" + json.dumps(typed) + "\n"
    )
    report = lake.ingest(path)
    # The broken copy is the same conversation as the good one: its readable spans join it.
    assert report.added == 2 and report.quarantined == 3
    bad = _rows(lake, "SELECT line, field, error FROM quarantine ORDER BY line")
    assert [b["line"] for b in bad] == [2, 3, 4]
    assert "malformed JSON" in bad[0]["error"]
    assert bad[1]["field"].endswith("spans[0].traceId") and "without a traceId" in bad[1]["error"]
    assert bad[2]["field"].endswith("attributes.llm.token_count.prompt")
    assert "expected an integer" in bad[2]["error"]


def test_secrets_are_redacted_alike_in_messages_and_calls(lake: tl.Lake, tmp_path: Path) -> None:
    # The question carries a key; both chat spans send it (the second in its history), and
    # the `calls` rows keep each span's new input: one placeholder everywhere, no key in clear.
    key = "AKIAQ3EGRT5ZKXW7PLM4"
    text = json.dumps(export_json(record(current_genai)))
    asked = "What is the weather in Paris?"
    path = tmp_path / "secret.json"
    path.write_text(text.replace(asked, f"{asked} My key is {key}."))
    report = lake.ingest(path)
    assert report.added == 1 and report.redactions >= 2
    placeholder = "<SECRET:aws_key:1>"
    (user,) = _rows(lake, "SELECT content FROM messages WHERE role = 'user'")
    assert user["content"] == f"{asked} My key is {placeholder}."
    calls = _rows(lake, "SELECT new_input, response FROM calls ORDER BY seq")
    dumped = json.dumps(calls, default=str)
    assert key not in dumped and placeholder in json.dumps(calls[0]["new_input"])
    (t,) = _rows(lake, "SELECT n_redactions FROM trajectories")
    assert t["n_redactions"] == report.redactions
