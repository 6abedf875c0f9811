"""Output helpers, transcript formatting and the rich progress bar, without a lake."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import sys

import pyarrow as pa
import pytest
from rich.console import Console

from trajlake._progress import Progress
from trajlake.cli.main import one_line
from trajlake.cli.options import parse_storage_options
from trajlake.cli.output import dumps, result_rows, to_jsonable
from trajlake.cli.progress import RichProgress, progress_for
from trajlake.cli.transcript import MAX_LINES, format_arguments


def test_to_jsonable() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    value = {"t": when, "b": b"\x00\xff", "x": math.nan, "n": [1, (2.5, None)], 3: "k"}
    assert to_jsonable(value) == {
        "t": "2026-01-02T03:04:05+00:00",
        "b": "AP8=",
        "x": None,
        "n": [1, [2.5, None]],
        "3": "k",
    }
    assert json.loads(dumps({"inf": math.inf})) == {"inf": None}


def test_result_rows_turn_maps_into_objects() -> None:
    table = pa.table(
        {
            "id": ["a", "b"],
            "rewards": pa.array([[("pass", 1.0)], None], type=pa.map_(pa.string(), pa.float64())),
        }
    )
    assert result_rows(table) == [
        {"id": "a", "rewards": {"pass": 1.0}},
        {"id": "b", "rewards": None},
    ]


def test_one_line_drops_context_and_carets() -> None:
    error = ValueError(
        "Parser Error: syntax error at or near 'FRM'\n\nLINE 1: SELECT FRM\n       ^"
    )
    assert one_line(error) == "Parser Error: syntax error at or near 'FRM' LINE 1: SELECT FRM"
    assert one_line(KeyError()) == "KeyError"


def test_parse_storage_options_env_then_flags() -> None:
    env = {"TRAJLAKE_STORAGE_OPTIONS": '{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "x"}'}
    options = parse_storage_options(["AWS_ENDPOINT_URL=http://localhost:9000", "EMPTY="], env)
    assert options == {
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://localhost:9000",
        "EMPTY": "",
    }


def test_format_arguments() -> None:
    assert format_arguments('{"command": "ls"}', full=False) == '{"command": "ls"}'
    assert format_arguments("not json", full=False) == "not json"
    long = json.dumps({"text": "\n".join(["x" * 30] * 5), "more": list(range(100))})
    clipped = format_arguments(long, full=False)
    assert len(clipped.splitlines()) == MAX_LINES + 1 and "more lines" in clipped.splitlines()[-1]
    assert json.loads(format_arguments(long, full=True)) == json.loads(long)


def test_rich_progress_draws_and_finishes() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    progress: Progress = RichProgress(console, "bytes")
    progress.start("ingest", 2_000_000.0)
    progress.advance(1_000_000.0)
    progress.finish()
    progress.finish()  # idempotent
    counter: Progress = RichProgress(console, "items")
    counter.start("export", None)
    counter.advance(3)
    counter.finish()
    assert "ingest" in buffer.getvalue() and "export" in buffer.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_for("bytes") is None
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert isinstance(progress_for("bytes"), RichProgress)
