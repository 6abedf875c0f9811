"""The `label` command, invoked directly (it is registered on the root group separately)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

import trajlake as tl
from trajlake.cli.label_cmd import label
from trajlake.errors import FormatDetectionError


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(label, [str(a) for a in args])


def _lake(tmp_path: Path) -> str:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(
        {
            "trajectory_id": f"t{i}",
            "task_id": f"task-{i}",
            "run_id": "run-1",
            "messages": [
                {"role": "user", "content": f"go {i}"},
                {"role": "assistant", "content": "ok"},
            ],
        }
        for i in range(3)
    )
    return str(tmp_path / "lake")


def _results(tmp_path: Path) -> Path:
    path = tmp_path / "run-1" / "results" / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"resolved": ["task-0", "task-1"], "unresolved_ids": ["task-2"]}))
    return path


def test_json_output_and_relabel(tmp_path: Path) -> None:
    uri, results = _lake(tmp_path), _results(tmp_path)
    first = _invoke(results, "--lake", uri, "--output", "json")
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert (report["added"], report["labels_read"], report["resolved"]) == (3, 3, 2)
    assert report["trajectories_labelled"] == 3 and report["formats"] == {"swebench": 1}
    again = json.loads(_invoke(results, "--lake", uri, "-o", "json").stdout)
    assert (again["added"], again["duplicates"]) == (0, 3)
    resolved = tl.open_lake(uri).sql("SELECT count(*) FROM outcomes WHERE resolved").rows()
    assert resolved == [(2,)]


def test_text_summary_with_format_and_run_id(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    path = tmp_path / "verdicts.csv"
    path.write_text("task_id,resolved\ntask-0,true\nunknown-task,false\n")
    result = _invoke(path, "--lake", uri, "--format", "csv", "--run-id", "run-1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("2 labels from 1 file(s) (1 resolved): 2 added")
    assert "1 trajectories labelled, 1 labels matched none" in result.stdout


def test_errors(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    result = _invoke(notes, "--lake", uri)
    assert result.exit_code == 1 and isinstance(result.exception, FormatDetectionError)
    assert _invoke(notes, "--lake", uri, "--format", "bogus").exit_code == 2
    assert _invoke("--lake", uri).exit_code == 2  # PATH is required
