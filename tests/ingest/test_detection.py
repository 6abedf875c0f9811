"""Format detection by structure: streamed top-level keys, not only the first 64 KiB.

Real files from `tests/data` (licences beside them) are reshaped so that their telling keys
sit past the head, as in real runs whose long patch comes first.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.cli.text_output import skip_summary
from trajlake.ingest._keys import scan_keys
from trajlake.ingest._registry import HEAD_BYTES, _takes_keys, adapters, classify, detect
from trajlake.ingest._sources import SourceFile, expand_sources

DATA = Path(__file__).resolve().parents[1] / "data"
MINI = DATA / "mini_swe_agent/github_issue.traj.json"
"""An old-style mini-swe-agent message list (MIT, tests/data/mini_swe_agent/LICENSE.md)."""
SWE = DATA / "swe_agent/swe-agent__test-repo-i1.traj"
ROLLOUTS = DATA / "responses/resources_servers/example_multi_step/data/example_rollouts.jsonl"


class _Counting(io.RawIOBase):
    """An endless stream of one long JSON string that counts what is read from it."""

    def __init__(self, prefix: bytes, chunk: int = 4096) -> None:
        self.prefix, self.read_bytes, self.chunk = prefix, 0, chunk

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = (self.prefix or b'ab\\"c' * 1000)[: min(len(buffer), self.chunk)]
        self.prefix = self.prefix[len(data) :]
        buffer[: len(data)] = data
        self.read_bytes += len(data)
        return len(data)


def _mini_v1(tmp_path: Path, patch_bytes: int = 200_000) -> Path:
    """A mini-swe-agent v1 file from the real message list, a long patch first."""
    messages = json.loads(MINI.read_text())
    patch = "".join(f"+line {i}: {m['content'][:40]!r}\n" for i, m in enumerate(messages * 400))
    info = {"submission": patch[:patch_bytes], "exit_status": "Submitted", "mini_version": "1.9.0"}
    data = {"info": info, "messages": messages, "trajectory_format": "mini-swe-agent-1"}
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(data))
    return path


def _source(path: Path) -> SourceFile:
    (source,) = expand_sources([path])
    return source


# --- the streaming scanner --------------------------------------------------------------------


def test_scanner_skips_long_values_and_keeps_short_ones() -> None:
    doc = {"info": {"submission": 'x\n"y\\' * 50_000, "mini_version": "1.2"}, "n": -1.5e3}
    doc |= {"messages": [{"role": "system", "content": "hi"}, {"role": "user"}], "ok": True}
    data = json.dumps(doc).encode()
    keys = scan_keys(data[:HEAD_BYTES], io.BytesIO(data[HEAD_BYTES:]))
    assert keys.container == "object" and keys.complete and not keys.json_lines
    assert keys.shape.keys == ("info", "n", "messages", "ok")
    assert keys.shape.values == {"n": -1500.0, "ok": True}  # the long string is not kept
    assert keys.shape.children["info"].values == {"mini_version": "1.2"}
    assert keys.shape.children["messages"].keys == ("role", "content")
    assert keys.shape.kinds["messages"] == "array"
    assert keys.describe() == "{info, n, messages, ok}"


def test_scanner_reads_at_most_its_budget() -> None:
    stream = _Counting(b'{"patch": "')
    keys = scan_keys(b"", stream, budget=2 << 20)
    assert not keys.complete and keys.shape.keys == ("patch",)  # its value is not held
    assert stream.read_bytes <= 2 << 20


def test_scanner_handles_escapes_split_across_reads() -> None:
    text = 'a\\"b \\u00e9 \\\\'
    data = b'{"k": "' + text.encode() + b'", "after": 1}'
    for cut in range(1, len(data)):
        keys = scan_keys(data[:cut], io.BufferedReader(io.BytesIO(data[cut:]), 1))
        assert keys.shape.keys == ("k", "after") and keys.shape.values["k"] == 'a"b é \\'


def test_scanner_sees_json_lines_and_arrays() -> None:
    lines = ROLLOUTS.read_bytes()
    keys = scan_keys(lines[:HEAD_BYTES], io.BytesIO(lines[HEAD_BYTES:]))
    assert keys.json_lines and keys.shape.keys[0] == "responses_create_params"
    listed = scan_keys(MINI.read_bytes(), None)
    assert listed.container == "array" and listed.shape.keys == ("role", "content")


@pytest.mark.parametrize(
    ("data", "container"),
    [
        (b"# README\n", "none"),
        (b'{"a": "broken\n{"a": 1}\n', "none"),  # a raw line break cannot be in a string
        (b'\xef\xbb\xbf{"a": null}', "object"),
        (b"[" * 100_000, "array"),
        (b"", "none"),
        (b"{", "object"),
    ],
)
def test_scanner_on_odd_input(data: bytes, container: str) -> None:
    assert scan_keys(data, None).container == container


def test_truncated_document_keeps_the_keys_read() -> None:
    keys = scan_keys(b'{"a": 1, "messages": [{"role": "user", "content": "unfinished', None)
    assert not keys.complete and keys.shape.keys == ("a", "messages")
    assert keys.shape.children["messages"].keys == ("role", "content")


# --- adapters judged by the structure ---------------------------------------------------------


def test_mini_swe_agent_with_messages_past_the_head(lake: tl.Lake, tmp_path: Path) -> None:
    path = _mini_v1(tmp_path)
    source = _source(path)
    head = path.read_bytes()[:HEAD_BYTES]
    assert b'"messages"' not in head  # the head alone cannot tell
    mini = adapters()["mini-swe-agent"]
    assert mini.sniff(source, head) < 0.5
    assert detect(source).name == "mini-swe-agent"
    report = lake.ingest(path)
    assert report.added == 1 and report.formats == {"mini-swe-agent": 1}


def test_compressed_mini_swe_agent_past_the_head(lake: tl.Lake, tmp_path: Path) -> None:
    plain = _mini_v1(tmp_path)
    path = tmp_path / "run.traj.json.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    assert detect(_source(path)).name == "mini-swe-agent"


def test_other_format_tag_is_not_mini_swe_agent(tmp_path: Path) -> None:
    path = _mini_v1(tmp_path)
    path.write_text(path.read_text().replace("mini-swe-agent-1", "mini-swe-agent-9"))
    found = classify(_source(path))
    assert found.adapter is None and found.rejected is not None
    assert found.rejected.startswith("unrecognised structure")


def test_swe_agent_with_a_long_first_value(tmp_path: Path) -> None:
    data = json.loads(SWE.read_text())
    padded = {"environment": "x" * 200_000, **data}
    path = tmp_path / "padded.traj"
    path.write_text(json.dumps(padded))
    assert detect(_source(path)).name == "swe-agent"


def test_adapters_without_the_keys_argument_keep_working() -> None:
    assert _takes_keys(type(adapters()["mini-swe-agent"]))
    assert not _takes_keys(type(adapters()["canonical"]))
    assert detect(_source(ROLLOUTS)).name == "responses"


def test_a_sniff_that_cannot_parse_the_head_costs_only_its_vote(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)  # json.loads in some sniffs recurses
    found = classify(_source(path))
    assert found.adapter is None and found.skipped == "JSON without trajectory keys"


# --- what is skipped, and how the skip is reported --------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("README.md", b"# runs\n", "README/markdown/text"),
        ("NOTES", b"just some notes\n", "text in no known format"),
        ("fix.patch", b"--- a/x\n+++ b/x\n", "patches"),
        ("args.yaml", b"model: gpt\n", "config files"),
        ("metrics.json", b'{"accuracy": 0.5, "n": 10}', "JSON without trajectory keys"),
        ("preds.jsonl", b'{"id": "a"}\n{"id": "b"}\n', "JSON lines without trajectory keys"),
        ("empty.jsonl", b"", "empty files"),
        ("blob.bin", b"\x00\x01\x02" * 100, "binary files"),
    ],
)  # fmt: skip
def test_skip_kinds(tmp_path: Path, name: str, content: bytes, kind: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert classify(_source(path)).skipped == kind


@pytest.mark.parametrize(
    "document",
    [
        {"run": "r1", "history": [{"step": 1}]},
        {"conversation": [{"speaker": "a", "text": "b"}]},
        [{"role": "user", "content": "hi", "extra_vendor_key": 1}],
    ],
)
def test_trajectory_like_structures_are_rejected_not_skipped(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(document))
    found = classify(_source(path))
    assert found.adapter is None
    assert found.rejected is not None and "unrecognised structure" in found.rejected


def test_report_summarises_skips_by_kind(lake: tl.Lake, tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_bytes(ROLLOUTS.read_bytes())
    for i in range(4):
        (tmp_path / f"README{i}.md").write_text("# x\n")
    (tmp_path / "a.patch").write_text("--- a\n")
    report = lake.ingest(tmp_path)
    assert len(report.files_skipped) == 5  # still the list of URIs
    assert {k: len(v) for k, v in report.skipped_by_reason.items()} == {
        "README/markdown/text": 4,
        "patches": 1,
    }
    summary = report.to_dict()["skipped_by_reason"]["README/markdown/text"]
    assert summary["count"] == 4 and len(summary["examples"]) == 3
    line = skip_summary(report.skipped_by_reason)
    assert line == (
        "skipped 5 file(s) holding no trajectory: 4 README/markdown/text "
        "(e.g. README0.md, README1.md, …); 1 patches (e.g. a.patch)"
    )


def test_single_non_trajectory_input_is_still_an_error(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text("# x\n")
    with pytest.raises(tl.TrajlakeError, match="README/markdown/text"):
        lake.ingest(path)
