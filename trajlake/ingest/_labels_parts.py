"""Verifier output formats for `trajlake.ingest.labels`: detection, parsing, run ids from paths.

Each parser turns one file's content into label rows (plain dicts of `Label` fields, without
`label_id`/`created_at`, which the caller adds). Rows name a trajectory id when the source has
one, else a task id and the run id the caller derives from the file's place in its folder.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

from trajlake.errors import LabelFormatError
from trajlake.ingest._adapter import BadRecord, iter_json_lines
from trajlake.ingest.harbor import is_trial_result

Row = dict[str, Any]

# SWE-bench report id lists in order of precedence: an id in two lists takes the first verdict.
# Harness errors count as not resolved (as on the SWE-bench leaderboard); details keep why.
_SWEBENCH_LISTS: tuple[tuple[str, bool, str], ...] = (
    ("resolved", True, "resolved"),
    ("resolved_ids", True, "resolved"),
    ("unresolved_ids", False, "unresolved"),
    ("empty_patch_ids", False, "empty_patch"),
    ("error_ids", False, "error"),
)
_ID_KEYS = ("trajectory_id", "task_id", "instance_id")
_VERDICT_KEYS = ("resolved", "reward", "rewards", "is_resolved")
_TRUE = {"true", "1", "yes", "y", "t", "resolved", "pass", "passed"}
_FALSE = {"false", "0", "no", "n", "f", "unresolved", "fail", "failed"}


def path_dirs(uri: str) -> tuple[list[str], str]:
    """The folder names above a file (URL scheme dropped) and its base name."""
    text = uri.replace("\\", "/")
    if "://" in text:
        text = text.split("://", 1)[1]
    parts = [p for p in text.split("/") if p]
    return parts[:-1], (parts[-1] if parts else "")


def _above_trajs(dirs: list[str]) -> str | None:
    """The last folder, stepping over a `trajs` folder (mini-swe-agent keeps reports under it)."""
    if dirs and dirs[-1] == "trajs":
        dirs = dirs[:-1]
    return dirs[-1] if dirs else None


def run_folder(uri: str, kind: str, trial_task: str | None = None) -> str | None:
    """The run a label file belongs to, from where it sits (None when the layout is unknown).

    `<run>/results/results.json` and `<run>/results.json` (SWE-bench experiments, SWE-agent
    batch runs), `<run>/[trajs/]sb-cli-reports/<report>.json`, `<run>/logs/<id>/report.json`,
    Terminal-Bench `<run>/results.json` and, given the trial's task, `<run>/<task>/<trial>/…`.
    """
    dirs, name = path_dirs(uri)
    if kind == "swebench":
        if dirs and dirs[-1].endswith("sb-cli-reports"):
            return _above_trajs(dirs[:-1])
        if dirs and dirs[-1] == "results":
            return _above_trajs(dirs[:-1])
        return _above_trajs(dirs) if name == "results.json" else None
    if kind == "swebench-report":
        return _above_trajs(dirs[:-2]) if len(dirs) >= 2 and dirs[-2] == "logs" else None
    if kind == "terminal-bench" and trial_task is not None:  # <run>/<task>/<trial>/results.json
        return dirs[-3] if len(dirs) >= 3 and dirs[-2] == trial_task else None
    if kind == "terminal-bench":
        return dirs[-1] if dirs else None
    return None


def detect_kind(name: str, uri: str, text: str) -> str | None:
    """The parser a label file needs: swebench, swebench-report, terminal-bench, harbor, jsonl,
    csv."""
    if name.endswith(".csv") or name.endswith(".tsv"):
        return "csv" if _csv_has_labels(text) else None
    if name.endswith(".jsonl"):
        return "jsonl" if _jsonl_has_labels(text) else None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return _json_kind(data)


def _json_kind(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    if is_trial_result(data):
        return "harbor"
    if isinstance(data.get("results"), list) and any(
        isinstance(r, dict) and "is_resolved" in r for r in data["results"]
    ):
        return "terminal-bench"
    if "is_resolved" in data and ("trial_name" in data or "task_id" in data):
        return "terminal-bench"
    if any(isinstance(data.get(key), list) for key, _, _ in _SWEBENCH_LISTS):
        return "swebench"
    if isinstance(data.get("resolved"), bool) and (
        "tests_status" in data or "patch_exists" in data
    ):
        return "swebench-report"
    values = list(data.values())
    if values and all(isinstance(v, dict) and isinstance(v.get("resolved"), bool) for v in values):
        return "swebench-report"
    return None


def _first_record(text: str) -> dict[str, Any] | None:
    for _, _, _, value in iter_json_lines(io.BytesIO(text.encode())):
        return value if isinstance(value, dict) else None
    return None


def _jsonl_has_labels(text: str) -> bool:
    first = _first_record(text[: 1 << 20].rsplit("\n", 1)[0] if "\n" in text else text)
    return first is not None and _has_label_columns(first)


def _dialect(text: str) -> str:
    return "excel-tab" if "\t" in text.split("\n", 1)[0] else "excel"


def _csv_has_labels(text: str) -> bool:
    reader = csv.DictReader(io.StringIO(text[: 1 << 16]), dialect=_dialect(text))
    return _has_label_columns(dict.fromkeys(reader.fieldnames or ()))


def _has_label_columns(keys: Any) -> bool:
    return any(k in keys for k in _ID_KEYS) and any(k in keys for k in _VERDICT_KEYS)


def _bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text in ("", "null", "none", "nan"):
        return None
    raise ValueError(f"resolved must be a boolean, got {value!r}")


def _float(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        return float(value)
    return float(value)


def parse_swebench(data: Any, run_id: str | None) -> Iterator[Row]:
    """SWE-bench `results.json` / harness report / sb-cli report: id lists per verdict."""
    if not isinstance(data, dict):
        raise LabelFormatError("expected a JSON object with id lists (resolved, unresolved_ids…)")
    seen: set[str] = set()
    for key, resolved, status in _SWEBENCH_LISTS:
        for task_id in data.get(key) or []:
            if not isinstance(task_id, str) or task_id in seen:
                continue  # instances in no verdict list (incomplete, not submitted) get none
            seen.add(task_id)
            details = {"status": status}
            yield {"task_id": task_id, "run_id": run_id, "resolved": resolved, "details": details}


def _tests_summary(tests: Any) -> dict[str, Any]:
    """Counts per test group, and the names of the tests that went wrong (usually few)."""
    summary: dict[str, Any] = {}
    for group, result in (tests or {}).items():
        if not isinstance(result, dict):
            continue
        success, failure = result.get("success") or [], result.get("failure") or []
        summary[group] = {"success": len(success), "failure": len(failure)}
        if failure and group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            summary[group]["failed"] = failure
    return summary


def parse_swebench_report(data: Any, run_id: str | None, instance: str | None) -> Iterator[Row]:
    """Per-instance harness `report.json`: `{<id>: {resolved, tests_status…}}` or flat."""
    if not isinstance(data, dict):
        raise LabelFormatError("expected a JSON object (SWE-bench per-instance report)")
    if isinstance(data.get("resolved"), bool):
        if not instance:
            raise LabelFormatError("a flat report.json needs its instance folder: <id>/report.json")
        data = {instance: data}
    for task_id, report in data.items():
        if not isinstance(report, dict) or not isinstance(report.get("resolved"), bool):
            raise LabelFormatError(f"instance {task_id!r}: no boolean 'resolved' in its report")
        flags = ("patch_is_None", "patch_exists", "patch_successfully_applied")
        details = {k: report[k] for k in flags if k in report}
        if "tests_status" in report:
            details["tests"] = _tests_summary(report["tests_status"])
        yield {
            "task_id": task_id, "run_id": run_id, "resolved": report["resolved"],
            "details": details,
        }  # fmt: skip


def parse_terminal_bench(data: Any, run_id: str | None) -> Iterator[Row]:
    """Terminal-Bench run `results.json` (`results[]`) or one trial's `results.json`."""
    if not isinstance(data, dict):
        raise LabelFormatError("expected a JSON object (Terminal-Bench results)")
    results = data.get("results")
    trials: list[Any] = results if isinstance(results, list) else [data]
    for trial in trials:
        if not isinstance(trial, dict) or not trial.get("task_id") or "is_resolved" not in trial:
            raise LabelFormatError("a Terminal-Bench trial needs 'task_id' and 'is_resolved'")
        verdict = trial["is_resolved"]
        details = {
            k: trial[k] for k in ("trial_name", "failure_mode", "parser_results") if k in trial
        }
        if trial.get("id"):
            details["trial_id"] = trial["id"]
        # No verdict means the trial failed before its tests ran; like harness errors in
        # SWE-bench it counts as not resolved, and `failure_mode` says why.
        yield {
            "task_id": trial["task_id"], "run_id": run_id,
            "resolved": bool(verdict) if verdict is not None else False,
            "details": {**details, **({} if verdict is not None else {"no_verdict": True})},
        }  # fmt: skip


def table_row(record: dict[str, Any], run_id: str | None) -> Row:
    """One JSONL/CSV record: an id column, `resolved` and/or `reward`; other columns → details."""
    trajectory_id = record.get("trajectory_id") or None
    task_id = record.get("task_id") or record.get("instance_id") or None
    if not trajectory_id and not task_id:
        raise ValueError("needs a trajectory_id or task_id (instance_id) value")
    resolved = _bool(record.get("resolved", record.get("is_resolved")))
    reward = _float(record.get("reward"))
    rewards = record.get("rewards")
    if isinstance(rewards, str) and rewards.strip():
        rewards = json.loads(rewards)
    if resolved is None and reward is None and not rewards:
        raise ValueError("needs a resolved or reward value")
    known = {*_ID_KEYS, *_VERDICT_KEYS, "run_id", "source"}
    details = {k: v for k, v in record.items() if k not in known and v not in (None, "")}
    return {
        "trajectory_id": trajectory_id,
        "task_id": task_id,
        # The record's own run id wins over the one given for the whole file.
        "run_id": record.get("run_id") or run_id,
        "resolved": resolved,
        "reward": reward,
        "rewards": {str(k): float(v) for k, v in rewards.items()} if rewards else None,
        "source": record.get("source") or None,
        "details": details or None,
    }


def parse_jsonl(text: str, run_id: str | None, problem: Callable[[str], None]) -> Iterator[Row]:
    """JSONL label lines; a bad line is reported through `problem` and skipped."""
    for line, _, _, value in iter_json_lines(io.BytesIO(text.encode())):
        if isinstance(value, BadRecord):
            problem(f"line {line}: {value.error}")
            continue
        if not isinstance(value, dict):
            problem(f"line {line}: expected a JSON object")
            continue
        try:
            yield table_row(value, run_id)
        except (ValueError, TypeError, AttributeError) as e:
            problem(f"line {line}: {e}")


def parse_csv(text: str, run_id: str | None, problem: Callable[[str], None]) -> Iterator[Row]:
    """CSV label rows with a header; a bad row is reported through `problem` and skipped."""
    reader = csv.DictReader(io.StringIO(text), dialect=_dialect(text))
    for number, record in enumerate(reader, start=2):
        try:
            yield table_row(dict(record), run_id)
        except (ValueError, TypeError, AttributeError) as e:
            problem(f"line {number}: {e}")
