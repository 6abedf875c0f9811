"""Inspect AI adapter: real `.json` and `.eval` logs checked against their own JSON."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._models import normalize_model
from trajlake.ingest._sources import expand_sources, read_head
from trajlake.ingest.inspect_ai import InspectAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "inspect_ai"
STREAMING = DATA / "log_streaming.eval"  # 2 samples x 2 epochs, Llama 3.1 405B, scorer `match`
IMAGES = DATA / "log_images.json"  # an image input stored as an attachment (data URI)
TOOL_ERRORS = DATA / "log_tool_call_error.json"  # synthetic: 11 tool results, each an error type
DEDUP = DATA / "log_message_deduplication.eval"  # synthetic: 5 bash calls, message_pool
SECURITY = DATA / "2025-05-12T20-28-26-04-00_security-guide.json"  # model-graded (grader calls)
CORPUS = SHARED_CORPUS / "06_eval_frameworks" / "inspect_ai_logs"
BROWSER = CORPUS / "tests/analysis/test_logs/2025-05-12T20-27-36-04-00_browser.json"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not available")


def _read(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        return list(InspectAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _read(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def _samples(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(log header, samples) straight from the file, for expectations."""
    if path.suffix == ".eval":
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.startswith("samples/")]
            return json.loads(z.read("header.json")), [json.loads(z.read(n)) for n in names]
    log = json.loads(path.read_text())
    return log, log.get("samples") or []


def _by_sample(records: list[CanonicalTrajectory]) -> dict[tuple[Any, Any], CanonicalTrajectory]:
    return {(r.attrs["sample_id"], r.attrs["epoch"]): r for r in records if r.attrs}


def test_eval_zip_gives_one_trajectory_per_sample_and_epoch() -> None:
    header, samples = _samples(STREAMING)
    records = _records(STREAMING)
    assert len(records) == len(samples) == 4
    assert len({r.trajectory_id for r in records}) == 4
    by_sample = _by_sample(records)
    for sample in samples:
        record = by_sample[(sample["id"], sample["epoch"])]
        assert record.task_id == f"popularity/{sample['id']}"
        assert record.attempt == sample["epoch"]
        assert record.policy_model == normalize_model(header["eval"]["model"])
        assert record.run_id == header["eval"]["run_id"]
        assert record.harness == "inspect_ai"
        assert [m.role for m in record.messages] == [m["role"] for m in sample["messages"]]
        value = sample["scores"]["match"]["value"]  # "C" or "I"
        assert record.resolved is (value == "C")
        assert record.reward == (1.0 if value == "C" else 0.0)
        assert record.rewards == {"match": record.reward}
        assert record.outcome_source == "inspect:match"
        assert record.status == "completed" and record.exit_reason == "success"
        # One model call per sample: its usage sits on the assistant message and sums up.
        usage = next(iter(sample["model_usage"].values()))
        (assistant,) = [m for m in record.messages if m.role == "assistant"]
        assert assistant.prompt_tokens == usage["input_tokens"]
        assert assistant.completion_tokens == usage["output_tokens"]
        assert record.total_tokens == usage["total_tokens"]
        assert assistant.finish_reason == "stop"
        assert assistant.content == sample["output"]["choices"][0]["message"]["content"]


def test_ids_are_stable_and_location_independent(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "renamed.eval"
    copy.parent.mkdir()
    copy.write_bytes(STREAMING.read_bytes())
    assert [r.trajectory_id for r in _records(STREAMING)] == [
        r.trajectory_id for r in _records(copy)
    ]


def test_image_attachment_is_kept_by_reference_only() -> None:
    log, (sample,) = _samples(IMAGES)
    (record,) = _records(IMAGES)
    data_uri = next(v for v in sample["attachments"].values() if v.startswith("data:image/png"))
    digest = hashlib.sha256(base64.b64decode(data_uri.split(",", 1)[1])).hexdigest()
    user = record.messages[1]
    assert user.content == "What is this a picture of?"
    assert user.parts is not None
    assert [p.type for p in user.parts] == ["text", "image"]
    image = user.parts[1]
    assert (image.uri, image.mime_type, image.sha256) == (
        f"data-sha256:{digest}",
        "image/png",
        digest,
    )
    assert "base64" not in record.model_dump_json()
    # The system prompt was an attachment too: resolved to its text.
    assert record.messages[0].content == sample["attachments"]["a20f78037f9b8c8ff928ac9b422ce4c9"]
    assert record.resolved is False and record.outcome_source == "inspect:match"
    assert "eval_id" not in log["eval"]  # an older log: the id comes from run + eval task id


def test_tool_errors_become_is_error_with_their_type() -> None:
    _, (sample,) = _samples(TOOL_ERRORS)
    (record,) = _records(TOOL_ERRORS)
    tools = [m for m in record.messages if m.role == "tool"]
    assert len(tools) == len(sample["messages"]) == 11
    assert all(m.is_error for m in tools)
    assert [m.attrs["error"]["type"] for m in tools if m.attrs] == [
        m["error"]["type"] for m in sample["messages"]
    ]
    assert [(m.tool_call_id, m.name) for m in tools] == [
        (m["tool_call_id"], m["function"]) for m in sample["messages"]
    ]
    # No scores in this log: no outcome is invented.
    assert (record.resolved, record.reward, record.rewards, record.outcome_source) == (None,) * 4


def test_tool_calls_arguments_and_results_pair_up() -> None:
    _, (sample,) = _samples(DEDUP)
    (record,) = _records(DEDUP)
    assert [m.role for m in record.messages] == [m["role"] for m in sample["messages"]]
    calls = [c for m in record.messages for c in m.tool_calls or []]
    assert len(calls) == record.n_tool_calls == 5
    assert {(c.name, c.arguments, c.type) for c in calls} == {("bash", '{"cmd": "ls"}', "function")}
    results = {m.tool_call_id: m for m in record.messages if m.role == "tool"}
    assert sorted(results) == sorted(c.id for c in calls)
    assert all(not m.is_error and m.name == "bash" for m in results.values())
    # closeness_log scored 0.0: one scorer with a 0/1 value decides resolved.
    assert (record.resolved, record.reward, record.outcome_source) == (
        False,
        0.0,
        "inspect:closeness_log",
    )
    assert record.tools is not None and [t["name"] for t in record.tools] == ["bash", "python"]
    assert record.tools[1]["description"].startswith("Use the python function")  # attachment


def test_grader_calls_are_not_the_policy_s_usage() -> None:
    _, samples = _samples(SECURITY)
    records = _by_sample(_records(SECURITY))
    for sample in samples:
        record = records[(sample["id"], sample["epoch"])]
        calls = [e for e in sample["events"] if e["event"] == "model"]
        assert len(calls) == 2  # the policy's answer, then model_graded_fact's grader
        (assistant,) = [m for m in record.messages if m.role == "assistant"]
        assert assistant.prompt_tokens == calls[0]["output"]["usage"]["input_tokens"]
        assert assistant.completion_tokens == calls[0]["output"]["usage"]["output_tokens"]
        usage = sample["model_usage"]["openai/gpt-4o-mini"]
        assert record.prompt_tokens is not None
        assert record.prompt_tokens < usage["input_tokens"]  # model_usage counts the grader
        assert record.resolved is True and record.outcome_source == "inspect:model_graded_fact"


@needs_corpus
def test_browser_agent_usage_matches_model_usage() -> None:
    _, (sample,) = _samples(BROWSER)
    (record,) = _records(BROWSER)
    usage = sample["model_usage"]["openai/gpt-4o-mini"]
    assert record.prompt_tokens == usage["input_tokens"] == 15235
    assert record.completion_tokens == usage["output_tokens"] == 281
    assert sum(m.cached_tokens or 0 for m in record.messages) == usage["input_tokens_cache_read"]
    calls = [c for m in record.messages for c in m.tool_calls or []]
    source_calls = [c for m in sample["messages"] for c in m.get("tool_calls") or []]
    assert [(c.id, c.name, json.loads(c.arguments or "")) for c in calls] == [
        (c["id"], c["function"], c["arguments"]) for c in source_calls
    ]
    assert (
        record.resolved is True
        and record.final_output == sample["output"]["choices"][0]["message"]["content"]
    )


@needs_corpus
def test_every_corpus_log_reads_and_c_scores_are_resolved() -> None:
    files = [
        Path(s.uri) for s in expand_sources([str(CORPUS)]) if s.uri.endswith((".json", ".eval"))
    ]
    assert len(files) == 19
    total = resolved = letter_c = 0
    for path in files:
        _, samples = _samples(path)
        records = _records(path)
        assert len(records) == len(samples), path
        total += len(records)
        resolved += sum(1 for r in records if r.resolved)
        letter_c += sum(
            1 for s in samples for v in (s.get("scores") or {}).values() if v["value"] == "C"
        )
    assert total == 43
    assert resolved == letter_c


@needs_corpus
def test_sniff_claims_inspect_logs_and_nothing_else() -> None:
    adapter = InspectAdapter()
    for source in expand_sources([str(SHARED_CORPUS)]):
        score = adapter.sniff(source, read_head(source))
        if "/inspect_ai_logs/" in source.uri:
            assert score >= 0.9, source.uri
        else:
            assert score < 0.5, source.uri


def test_broken_samples_cost_only_themselves(tmp_path: Path) -> None:
    broken = tmp_path / "broken.eval"
    with zipfile.ZipFile(STREAMING) as src, zipfile.ZipFile(broken, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            dst.writestr(name, data[:100] if name == "samples/1_epoch_2.json" else data)
    items = _read(broken)
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert len(items) == 4 and len(bad) == 1
    assert bad[0].field == "samples/1_epoch_2.json" and "malformed JSON" in bad[0].error
    truncated = tmp_path / "truncated.eval"
    truncated.write_bytes(STREAMING.read_bytes()[:3000])
    (item,) = _read(truncated)
    assert isinstance(item, BadRecord) and "unreadable .eval" in item.error
    cut = tmp_path / "cut.json"
    cut.write_bytes(IMAGES.read_bytes()[:5000])
    (item,) = _read(cut)
    assert isinstance(item, BadRecord) and "malformed JSON" in item.error


class _Unseekable(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._inner.readinto(buffer)


def test_streams_that_cannot_seek_are_buffered() -> None:
    source = SourceFile(str(STREAMING), None)
    stream = io.BufferedReader(_Unseekable(STREAMING.read_bytes()))
    assert not stream.seekable()
    items = list(InspectAdapter().read(source, stream))
    assert [i.record.trajectory_id for i in items if isinstance(i, ParsedTrajectory)] == [
        r.trajectory_id for r in _records(STREAMING)
    ]


def test_ingest_detects_logs_and_is_idempotent(lake: tl.Lake) -> None:
    logs = sorted(p for p in DATA.iterdir() if p.suffix in (".json", ".eval"))
    samples = [s for path in logs for s in _samples(path)[1]]
    report = lake.ingest(DATA)
    assert report.formats == {"inspect": len(logs)}
    assert (report.added, report.quarantined) == (len(samples), 0)
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    assert roles == {
        role: sum(1 for s in samples for m in s["messages"] if m["role"] == role)
        for role in ("system", "user", "assistant", "tool")
    }
    calls = lake.sql("SELECT tool_name, count(*) FROM tool_calls GROUP BY tool_name").rows()
    assert calls == [("bash", 5)]
    letter_c = sum(
        1 for s in samples for v in (s.get("scores") or {}).values() if v["value"] == "C"
    )
    resolved = lake.sql("SELECT count(*) FROM trajectories WHERE resolved").rows()[0][0]
    assert resolved == letter_c == 6
    by_json = lake.sql(
        "SELECT count(*) FROM trajectories "
        "WHERE json_extract_string(attrs, '$.scores.match.value') = 'C'"
    ).rows()[0][0]
    assert by_json == 3  # log_streaming's three C epochs
    again = lake.ingest(DATA, format="inspect")
    assert (again.added, again.duplicates) == (0, len(samples))
