"""Identity through ingest, on real files: a session ingested while it grew, runs that reuse
rollout ids, the same file twice, the same id twice in one file.

Sessions: Claude Code (tests/data/claude_code, MIT) and Codex (the corpus; skipped without it).
Runs: τ-bench airline trajectories (tests/data/tau_bench, MIT) in the OpenAI-messages layout
with `metadata` ids, the way a harness that numbers its rollouts from 0 in every run writes
them (trial 0 is one run, trial 1 the next).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.errors import TrajectoryIdConflict

DATA = Path(__file__).parents[1] / "data"
CLAUDE = DATA / "claude_code" / "marot_spotter" / "tool_heavy.jsonl"
TAU = DATA / "tau_bench" / "gpt-4o-airline.json"
CODEX = (
    Path(__file__).resolve().parents[3]
    / "shared/corpus/05_coding_cli_sessions/codex_rollout_jsonl/madshn_localpush/src-tauri/tests"
    / "fixtures/codex/2026-02-23/raw/sessions"
    / "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl"
)


LONG_SESSION = (
    Path(__file__).resolve().parents[3]
    / "shared/corpus/05_coding_cli_sessions/claude_code_jsonl/marot_spotter/test/fixtures"
    / "transcripts/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
)


def _count(lake: tl.Lake, sql: str, at: Any = None) -> int:
    return int(lake.sql(sql, at=at).rows()[0][0])


def _cut(source: Path, folder: Path, lines: int | None) -> Path:
    """The first `lines` lines of a session file, under its own name (as a live file)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / source.name
    text = source.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(text[:lines]), encoding="utf-8")
    return out


def _grown_session(lake: tl.Lake, source: Path, tmp_path: Path, lines: int) -> None:
    short = lake.ingest(_cut(source, tmp_path / "then", lines))
    assert (short.added, short.updated) == (1, 0)
    before = lake.snapshot().snapshot_id
    short_messages = _count(lake, "SELECT count(*) FROM messages")

    whole = lake.ingest(_cut(source, tmp_path / "now", None))
    assert (whole.added, whole.updated, whole.duplicates, whole.conflicts) == (0, 1, 0, 0)
    (example,) = whole.identity_examples
    assert example["kind"] == "updated" and example["source"].endswith(source.name)
    assert _count(lake, "SELECT count(*) FROM trajectories") == 1
    current = _count(lake, "SELECT count(*) FROM messages")
    assert current > short_messages
    assert _count(lake, "SELECT n_messages FROM trajectories") == current
    assert _count(lake, "SELECT count(*) FROM messages", at=before) == short_messages
    assert _count(lake, "SELECT n_messages FROM trajectories", at=before) == short_messages

    # The short file read again is an older version: a duplicate, nothing written.
    stale = lake.ingest(_cut(source, tmp_path / "then", lines))
    assert (stale.added, stale.updated, stale.duplicates) == (0, 0, 1)
    assert stale.snapshot_id == whole.snapshot_id
    assert "older version" in stale.identity_examples[0]["detail"]
    assert lake.validate().ok


def test_claude_code_session_that_grew_is_updated(lake: tl.Lake, tmp_path: Path) -> None:
    _grown_session(lake, CLAUDE, tmp_path, 20)


@pytest.mark.skipif(not LONG_SESSION.exists(), reason="corpus not available")
def test_long_claude_code_session_that_grew_is_updated(lake: tl.Lake, tmp_path: Path) -> None:
    _grown_session(lake, LONG_SESSION, tmp_path, 1201)  # 2,385 lines, 2.7 MB


@pytest.mark.skipif(not CODEX.exists(), reason="corpus not available")
def test_codex_rollout_that_grew_is_updated(lake: tl.Lake, tmp_path: Path) -> None:
    _grown_session(lake, CODEX, tmp_path, 300)


def _run_file(path: Path, trial: int, *, messages: int | None = None) -> Path:
    """One run of the harness: its rollouts numbered from 0 for each task."""
    lines = []
    for element in json.loads(TAU.read_text()):
        if element["trial"] != trial:
            continue
        metadata = {"instance_id": f"airline/{element['task_id']}", "rollout_id": "0"}
        metadata["reward"] = element["reward"]
        line = {"messages": element["traj"][:messages], "metadata": json.dumps(metadata)}
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_runs_reusing_rollout_ids_are_conflicts_kept_and_reported(
    lake: tl.Lake, tmp_path: Path
) -> None:
    first = lake.ingest(_run_file(tmp_path / "run-a.jsonl", 0))
    assert first.added == 3
    second_file = _run_file(tmp_path / "run-b.jsonl", 1)
    second = lake.ingest(second_file)
    assert (second.added, second.conflicts, second.duplicates) == (0, 3, 0)
    sources = sorted(e["source"] for e in second.identity_examples)
    assert sources == [f"{second_file}:{n}" for n in (1, 2, 3)]
    example = second.identity_examples[0]
    assert example["stored_as"].startswith(example["trajectory_id"] + "~")
    assert "--run-id" in example["detail"]
    rows = lake.sql("SELECT trajectory_id, attrs FROM trajectories").to_dicts()
    assert len(rows) == 6
    copies = {r["trajectory_id"]: json.loads(r["attrs"]) for r in rows if "~" in r["trajectory_id"]}
    assert {a["id_conflict_of"] for a in copies.values()} == {
        r["trajectory_id"] for r in rows if "~" not in r["trajectory_id"]
    }
    # Deterministic: the second run read again adds nothing.
    again = lake.ingest(second_file)
    assert (again.added, again.conflicts, again.duplicates) == (0, 0, 3)
    assert again.snapshot_id == second.snapshot_id


def test_strict_refuses_a_conflict_naming_file_line_and_id(lake: tl.Lake, tmp_path: Path) -> None:
    lake.ingest(_run_file(tmp_path / "run-a.jsonl", 0))
    head = lake.snapshot().snapshot_id
    second_file = _run_file(tmp_path / "run-b.jsonl", 1)
    with pytest.raises(TrajectoryIdConflict, match=rf"{second_file}:1: trajectory id") as err:
        lake.ingest(second_file, strict=True)
    assert "--run-id" in str(err.value)
    assert lake.snapshot().snapshot_id == head


def test_run_id_separates_runs_that_reuse_ids(lake: tl.Lake, tmp_path: Path) -> None:
    a = lake.ingest(_run_file(tmp_path / "run-a.jsonl", 0), run_id="trial-0")
    b = lake.ingest(_run_file(tmp_path / "run-b.jsonl", 1), run_id="trial-1", strict=True)
    assert (a.added, b.added, b.conflicts) == (3, 3, 0)
    rows = lake.sql("SELECT trajectory_id, run_id FROM trajectories ORDER BY run_id").to_dicts()
    assert all(r["trajectory_id"].endswith("@" + r["run_id"]) for r in rows)
    again = lake.ingest(tmp_path / "run-b.jsonl", run_id="trial-1")
    assert (again.added, again.duplicates) == (0, 3)


def test_edited_copy_of_a_session_is_a_conflict(lake: tl.Lake, tmp_path: Path) -> None:
    lake.ingest(CLAUDE)
    lines = CLAUDE.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"type":"user"' in line.replace(" ", ""))
    record = json.loads(lines[at])
    content = record["message"]["content"]
    if isinstance(content, str):
        record["message"]["content"] = content + " (edited)"
    else:
        record["message"]["content"] = [{"type": "text", "text": "edited"}, *content]
    lines[at] = json.dumps(record) + "\n"
    edited = tmp_path / "other" / CLAUDE.name
    edited.parent.mkdir()
    edited.write_text("".join(lines), encoding="utf-8")
    report = lake.ingest(edited)
    assert (report.added, report.conflicts, report.updated) == (0, 1, 0)
    assert _count(lake, "SELECT count(*) FROM trajectories") == 2


def test_same_file_twice_is_duplicates_only(lake: tl.Lake, tmp_path: Path) -> None:
    path = _run_file(tmp_path / "run-a.jsonl", 0)
    first = lake.ingest(path)
    again = lake.ingest(path)
    assert (again.added, again.duplicates, again.updated, again.conflicts) == (0, 3, 0, 0)
    assert again.snapshot_id == first.snapshot_id
    assert {e["kind"] for e in again.identity_examples} == {"duplicate"}
    copy = tmp_path / "copy" / path.name  # the same run in another folder: the same ids
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    both = lake.ingest([path, copy])
    assert (both.added, both.duplicates, both.conflicts) == (0, 6, 0)


@pytest.mark.parametrize("batch_size", [1000, 1])
def test_same_id_twice_in_one_file(lake: tl.Lake, tmp_path: Path, batch_size: int) -> None:
    short = _run_file(tmp_path / "short.jsonl", 0, messages=5).read_text().splitlines()
    whole = _run_file(tmp_path / "whole.jsonl", 0).read_text().splitlines()
    other = _run_file(tmp_path / "other.jsonl", 1).read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    # Task 1: a partial copy then the whole one; task 21: twice the same; task 41: two runs.
    mixed.write_text("\n".join([short[0], whole[0], whole[1], whole[1], whole[2], other[2]]) + "\n")
    report = lake.ingest(mixed, batch_size=batch_size)
    assert report.trajectories_read == 6
    assert report.added + report.updated + report.conflicts + report.duplicates == 6
    assert report.conflicts == 1 and report.duplicates == 2
    assert _count(lake, "SELECT count(*) FROM trajectories") == 4
    lengths = (
        lake.sql(
            "SELECT n_messages FROM trajectories WHERE trajectory_id NOT LIKE '%~%' ORDER BY 1"
        )
        .to_arrow()
        .column(0)
        .to_pylist()
    )
    tau = json.loads(TAU.read_text())
    assert sorted(lengths) == sorted(len(e["traj"]) for e in tau if e["trial"] == 0)
    (copy_len,) = (
        lake.sql("SELECT n_messages FROM trajectories WHERE trajectory_id LIKE '%~%'")
        .to_arrow()
        .column(0)
        .to_pylist()
    )
    assert copy_len == next(len(e["traj"]) for e in tau if (e["task_id"], e["trial"]) == (41, 1))
    assert _count(lake, "SELECT count(*) FROM messages") == sum(lengths) + copy_len
