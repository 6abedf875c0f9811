"""`trajlake otlp-receiver` as a real process, fed by the real OTLP/HTTP exporter on loopback:
what is acknowledged is in the lake, exactly once, even across a kill -9."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from tests.otlp.traces import current_genai, export_json, older_events, openinference, record

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult


@contextmanager
def receiver(lake: Path, spool: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    command = [sys.executable, "-m", "trajlake", "otlp-receiver", "--lake", str(lake)]
    command += ["--port", "0", "--spool", str(spool), *args]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "otlp receiver on http://127.0.0.1:" in line, line
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        yield process, port
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(30)
        if process.stderr is not None:
            process.stderr.close()


def _post_json(port: int, request: dict[str, Any]) -> None:
    body = json.dumps(request).encode()
    headers = {"Content-Type": "application/json"}
    post = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body, headers=headers)
    with urllib.request.urlopen(post, timeout=10) as answer:
        assert json.loads(answer.read()) == {"partialSuccess": {}}


def _with_a_bad_span(seed: int) -> dict[str, Any]:
    """An OpenInference trace whose two LLM spans count their prompt tokens in words: those
    attributes are quarantined (two rows), the trajectory is kept."""
    request = export_json(record(openinference, seed=seed))
    for span in request["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for attribute in span["attributes"]:
            if attribute["key"] == "llm.token_count.prompt":
                attribute["value"] = {"stringValue": "eleven"}
    return request


def _count(lake_path: Path, table: str) -> int:
    if not lake_path.exists():
        return 0
    rows = tl.open_lake(str(lake_path)).sql(f"SELECT count(*) AS n FROM {table}").to_arrow()
    return int(rows.to_pylist()[0]["n"])


def _wait_for(lake_path: Path, table: str, n: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while _count(lake_path, table) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _count(lake_path, table) == n


def test_protobuf_exporter_and_gzip_json_reach_the_lake(tmp_path: Path) -> None:
    lake_path, spool = tmp_path / "lake", tmp_path / "spool"
    with receiver(lake_path, spool, "--commit-seconds", "0.1") as (_, port):
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        assert exporter.export(record(current_genai, seed=11)) is SpanExportResult.SUCCESS
        body = gzip.compress(json.dumps(export_json(record(older_events, seed=12))).encode())
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/traces",
            data=body,
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read()) == {"partialSuccess": {}}
        _wait_for(lake_path, "trajectories", 2)
        exporter.shutdown()
    lake = tl.open_lake(str(lake_path))
    rows = lake.sql("SELECT harness, prompt_tokens FROM trajectories ORDER BY harness").to_arrow()
    assert rows.to_pylist() == [
        {"harness": "calc", "prompt_tokens": 40},
        {"harness": "weather-bot", "prompt_tokens": 65},
    ]
    assert _count(lake_path, "calls") == 4


def test_a_killed_receiver_loses_no_acknowledged_trace(tmp_path: Path) -> None:
    lake_path, spool = tmp_path / "lake", tmp_path / "spool"
    hold = ("--commit-seconds", "3600", "--idle", "3600")  # nothing is committed before the kill
    with receiver(lake_path, spool, *hold) as (process, port):
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        for seed in (21, 22, 23):
            spans = record(lambda t, s=seed: current_genai(t, f"conv-{s}"), seed=seed)
            assert exporter.export(spans[:2]) is SpanExportResult.SUCCESS  # a trace in two posts
            assert exporter.export(spans[2:]) is SpanExportResult.SUCCESS
        exporter.shutdown()
        _post_json(port, _with_a_bad_span(24))
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    assert _count(lake_path, "trajectories") == 0
    with receiver(lake_path, spool, "--commit-seconds", "0.1"):
        _wait_for(lake_path, "trajectories", 4)
    with receiver(lake_path, spool, "--commit-seconds", "0.1"):
        time.sleep(1.0)  # a second restart replays nothing again
    assert _count(lake_path, "trajectories") == 4
    assert _count(lake_path, "calls") == 8
    assert _count(lake_path, "quarantine") == 2
    lake = tl.open_lake(str(lake_path))
    ids = lake.sql("SELECT call_id FROM calls").to_arrow().column("call_id").to_pylist()
    assert len(set(ids)) == 8


def _spool_lines(spool: Path) -> list[bytes]:
    return [
        line for f in sorted(spool.glob("calls-*.jsonl")) for line in f.read_bytes().splitlines()
    ]


def test_a_batch_committed_but_not_marked_is_replayed_as_a_no_op(tmp_path: Path) -> None:
    # A receiver killed after the lake commit of a batch and before the spool's `committed`
    # mark leaves its spool file as it was without those marks: that is the state made here
    # (the marks cut from the file a receiver killed just after them left), with another
    # trace acknowledged meanwhile. Replay must commit the batch again exactly as it was:
    # a batch of other traces would store its quarantine rows a second time.
    lake_path, spool = tmp_path / "lake", tmp_path / "spool"
    with receiver(lake_path, spool, "--commit-seconds", "0.1", "--idle", "3600") as (proc, port):
        _post_json(port, _with_a_bad_span(31))
        _wait_for(lake_path, "quarantine", 2)
        deadline = time.monotonic() + 30
        while not any(b'"kind":"committed"' in line for line in _spool_lines(spool)):
            assert time.monotonic() < deadline, "the batch was never marked committed"
            time.sleep(0.1)
        rootless = [s for s in record(current_genai, seed=32) if s.parent is not None]
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        assert exporter.export(rootless) is SpanExportResult.SUCCESS  # waits for its root
        exporter.shutdown()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    (left,) = spool.glob("calls-*.jsonl")
    kept = [line for line in left.read_bytes().splitlines() if b'"kind":"committed"' not in line]
    left.write_bytes(b"".join(line + b"\n" for line in kept))
    assert (_count(lake_path, "trajectories"), _count(lake_path, "quarantine")) == (1, 2)
    with receiver(lake_path, spool, "--commit-seconds", "0.1"):
        _wait_for(lake_path, "trajectories", 2)
    assert _count(lake_path, "quarantine") == 2
    assert _count(lake_path, "calls") == 4
