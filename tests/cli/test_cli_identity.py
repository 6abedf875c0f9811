"""`trajlake ingest` says what became of taken ids: updates, conflicts (with the way out)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

Run = Callable[..., Result]
TAU = Path(__file__).parents[1] / "data" / "tau_bench" / "gpt-4o-airline.json"  # MIT


def _run_file(path: Path, trial: int, messages: int | None = None) -> Path:
    """One harness run in the OpenAI-messages layout: rollout ids restart at 0 every run."""
    lines = []
    for element in json.loads(TAU.read_text()):
        if element["trial"] == trial:
            metadata = {"instance_id": f"airline/{element['task_id']}", "rollout_id": "0"}
            lines.append(json.dumps({"messages": element["traj"][:messages], "metadata": metadata}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_text_report_names_conflicts_and_updates(tmp_path: Path, run: Run) -> None:
    lake = str(tmp_path / "lake")
    run("ingest", _run_file(tmp_path / "a.jsonl", 0, messages=4), "--lake", lake, "--create")
    grown = run("ingest", _run_file(tmp_path / "a.jsonl", 0), "--lake", lake).stdout
    assert "0 added, 0 duplicates, 3 updated, 0 quarantined" in grown
    assert f"updated: {tmp_path / 'a.jsonl'}:1: openai-messages-" in grown

    second = _run_file(tmp_path / "b.jsonl", 1)
    out = run("ingest", second, "--lake", lake).stdout
    assert "0 added, 0 duplicates, 3 id conflicts, 0 quarantined" in out
    assert f"conflict: {second}:2: openai-messages-" in out and "~" in out
    assert "pass --run-id" in out


def test_json_report_and_strict(tmp_path: Path, run: Run) -> None:
    lake = str(tmp_path / "lake")
    run("ingest", _run_file(tmp_path / "a.jsonl", 0), "--lake", lake, "--create")
    second = _run_file(tmp_path / "b.jsonl", 1)
    failed = run("ingest", second, "--lake", lake, "--strict", code=1)
    assert f"{second}:1: trajectory id 'openai-messages-" in failed.stderr
    assert "--run-id" in failed.stderr
    report = json.loads(run("ingest", second, "--lake", lake, "-o", "json").stdout)
    assert (report["added"], report["duplicates"], report["updated"], report["conflicts"]) == (
        0,
        0,
        0,
        3,
    )
    kinds = {(e["kind"], e["source"]) for e in report["identity_examples"]}
    assert kinds == {("conflict", f"{second}:{n}") for n in (1, 2, 3)}
    separated = run(
        "ingest", second, "--lake", lake, "--run-id", "trial-1", "--strict", "-o", "json"
    )
    assert (json.loads(separated.stdout)["added"], json.loads(separated.stdout)["conflicts"]) == (
        3,
        0,
    )
