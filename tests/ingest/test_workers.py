"""Parsing workers: what they load, and that a file parsed by workers gives the rows an
in-process parse gives."""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

import trajlake as tl
from trajlake.ingest import IngestOptions, ingest
from trajlake.ingest._worker import start_worker


def _convert_and_report() -> tuple[list[int], bool, str]:
    """In a worker: convert a Python list (what makes pyarrow look for pandas) and report."""
    values = pa.array([1, 2, 3]).to_pylist()
    try:
        import pandas  # noqa: F401

        refused = ""
    except ImportError as e:
        refused = str(e)
    return values, "pandas" in sys.modules, refused


def test_worker_converts_lists_without_loading_pandas() -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=start_worker) as pool:
        values, loaded, refused = pool.submit(_convert_and_report).result(timeout=120)
    assert values == [1, 2, 3]
    assert not loaded
    assert "ingest workers" in refused


def _chat_lines(n: int) -> str:
    lines = []
    for i in range(n):
        messages = [
            {"role": "user", "content": f"task {i}: fix the bug; DB_PASSWORD=hunter2x{i}Q9"},
            {"role": "assistant", "content": "looking", "tool_calls": [
                {"id": f"c{i}", "type": "function",
                 "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "a.py b.py"},
            {"role": "assistant", "content": "done"},
        ]  # fmt: skip
        lines.append(tl_json(messages, i))
    return "\n".join(lines) + "\n"


def tl_json(messages: list[dict[str, object]], i: int) -> str:
    import json

    return json.dumps({"messages": messages, "metadata": {"instance_id": f"t-{i}"}})


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_parse_matches_in_process(tmp_path: Path, workers: int) -> None:
    """Workers (spawned, pandas refused) store exactly what one process stores."""
    path = tmp_path / "rollouts.jsonl"
    path.write_text(_chat_lines(600))
    options = IngestOptions(workers=workers, parallel_min_bytes=0, chunk_bytes=32 * 1024)
    lake = tl.open_lake(tmp_path / f"lake{workers}", create=True)
    report = ingest(lake, [str(path)], options=options)
    assert report.added == 600 and report.quarantined == 0 and report.redactions == 600
    rows = lake.sql(
        "SELECT trajectory_id, content_hash, source_line FROM trajectories ORDER BY source_line"
    ).to_dicts()
    assert [r["source_line"] for r in rows] == list(range(1, 601))
    reference = tl.open_lake(tmp_path / "reference", create=True)
    ingest(reference, [str(path)], options=IngestOptions(workers=1))
    expected = reference.sql(
        "SELECT trajectory_id, content_hash, source_line FROM trajectories ORDER BY source_line"
    ).to_dicts()
    assert rows == expected
