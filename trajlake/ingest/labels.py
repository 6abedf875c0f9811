"""Labels: verifier outcomes joined to trajectories after the fact, stored in the `labels` table.

Formats: SWE-bench `results.json` (report v1 `resolved` or v2 `resolved_ids`), the harness's
per-instance `report.json`, sb-cli reports, Terminal-Bench run and trial `results.json`, Harbor
trial `result.json` (`verifier_result.rewards`, else `verifier/reward.txt`/`reward.json`; matched
to the trial's ATIF trajectory by id, see `harbor`), and plain JSONL/CSV of `trajectory_id` or
`task_id` (+ `run_id`) with `resolved` and/or `reward`.

Matching: by trajectory id when the source gives one, else by task id + run id. The run id is
the `run_id` argument, else the run folder the file sits in (`<run>/results/results.json`,
`<run>/[trajs/]sb-cli-reports/*.json`, `<run>/logs/<id>/report.json`, Terminal-Bench run
folders), the same folder the SWE-agent and mini-swe-agent adapters record as the trajectory's
run (`<run>/trajs/<id>.traj`); JSONL/CSV rows may carry their own. A label with neither
trajectory id nor run id is attached to its task's trajectory when the lake holds exactly one.
The `outcomes` view then gives each trajectory's effective outcome.

Verdicts: instances in SWE-bench's `empty_patch_ids` and `error_ids` (and Terminal-Bench trials
without a verdict) count as not resolved, as on the leaderboards, with the reason in `details`;
instances in no verdict list (incomplete, not submitted) get no label. `label_id` hashes the
source, the target and the verdict: re-labelling with the same file adds nothing, and a changed
verdict is a new, newer label.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import ValidationError

from trajlake.errors import FormatDetectionError, LabelFormatError
from trajlake.ingest._labels_parts import (
    Row,
    detect_kind,
    parse_csv,
    parse_jsonl,
    parse_swebench,
    parse_swebench_report,
    parse_terminal_bench,
    path_dirs,
    run_folder,
)
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.ingest.harbor import is_trial_result
from trajlake.ingest.harbor import label_rows as harbor_label_rows
from trajlake.records import rows_for_table
from trajlake.redact import Redactor, redact_json, redact_uri
from trajlake.schema import Label

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

log = logging.getLogger(__name__)

LabelFormat = Literal[
    "auto", "swebench", "swebench-report", "sb-cli", "terminal-bench", "harbor", "jsonl", "csv"
]
LABEL_FORMATS: tuple[str, ...] = get_args(LabelFormat)[1:]
"""Label formats accepted by `format` (besides 'auto')."""

_KIND = {f: f for f in LABEL_FORMATS} | {"sb-cli": "swebench"}
_CANDIDATES = (".json", ".jsonl", ".csv", ".tsv")
_IN_CHUNK = 500


@dataclass
class LabelReport:
    """What a labelling did."""

    files: int = 0
    files_skipped: list[str] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)
    labels_read: int = 0
    resolved: int = 0
    added: int = 0
    duplicates: int = 0
    matched: int = 0
    unmatched: int = 0
    ambiguous: int = 0
    trajectories_labelled: int = 0
    snapshot_id: int | None = None
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "snapshot": self.snapshot_id,
            "added": self.added,
            "duplicates": self.duplicates,
            "labels_read": self.labels_read,
            "resolved": self.resolved,
            "matched": self.matched,
            "unmatched": self.unmatched,
            "ambiguous": self.ambiguous,
            "trajectories_labelled": self.trajectories_labelled,
            "files": self.files,
            "files_skipped": self.files_skipped,
            "formats": self.formats,
            "problems": self.problems[:20],
        }

    def summary(self) -> str:
        """One line for people."""
        line = (
            f"{self.labels_read} labels from {self.files} file(s) "
            f"({self.resolved} resolved): {self.added} added, {self.duplicates} already stored; "
            f"{self.trajectories_labelled} trajectories labelled, {self.unmatched} labels "
            f"matched none"
        )
        if self.ambiguous:
            line += f", {self.ambiguous} ambiguous (pass --run-id)"
        if self.problems:
            line += f", {len(self.problems)} problem(s)"
        return line + (f" (snapshot {self.snapshot_id})" if self.snapshot_id is not None else "")


@dataclass
class ReadLabels:
    """Label rows read from verifier files, not yet committed (`prepare_labels`), with the
    report counting what was read."""

    labels: list[Label] = field(default_factory=list)
    report: LabelReport = field(default_factory=LabelReport)


def label_id(label: Label) -> str:
    """Deterministic id: the source, the target (trajectory, or task + run + trial), the verdict."""
    trial = (label.details or {}).get("trial_name") or (label.details or {}).get("trial_id")
    key = [label.source, label.trajectory_id, label.task_id, label.run_id, trial]
    key += [label.resolved, label.reward, sorted((label.rewards or {}).items())]
    return hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:32]


def _text(source: SourceFile) -> str:
    with source.open() as stream:
        raw = stream.read()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise LabelFormatError(f"{source.uri}: not UTF-8 text ({e})") from e


def _source_name(fmt: str, kind: str, uri: str) -> str:
    if fmt != "auto":
        return fmt
    if kind == "swebench" and any(d.endswith("sb-cli-reports") for d in path_dirs(uri)[0]):
        return "sb-cli"
    return kind


def _parse(kind: str, text: str, uri: str, run_id: str | None, out: ReadLabels) -> Iterator[Row]:
    run = run_id if run_id is not None else run_folder(uri, kind)

    def problem(message: str) -> None:
        out.report.problems.append(f"{uri}: {message}")

    if kind in ("jsonl", "csv"):
        parse = parse_jsonl if kind == "jsonl" else parse_csv
        yield from parse(text, run_id, problem)
        return
    try:
        data = json.loads(text)
    except ValueError as e:
        raise LabelFormatError(f"not a JSON document ({e})") from e
    if kind == "swebench":
        yield from parse_swebench(data, run)
    elif kind == "swebench-report":
        dirs, _ = path_dirs(uri)
        yield from parse_swebench_report(data, run, dirs[-1] if dirs else None)
    elif kind == "harbor":
        if not is_trial_result(data):
            raise LabelFormatError("not a Harbor trial result (needs 'trial_name' and rewards)")
        yield from harbor_label_rows(uri, data, run_id)
    else:
        trial = data.get("task_id") if isinstance(data, dict) and "results" not in data else None
        if run_id is None and isinstance(trial, str):
            run = run_folder(uri, kind, trial_task=trial)
        yield from parse_terminal_bench(data, run)


def _read_file(
    source: SourceFile, fmt: str, run_id: str | None, single: bool, out: ReadLabels
) -> None:
    name = source.name
    if not single and (not name.endswith(_CANDIDATES) or name.endswith(".traj.json")):
        return  # trajectories, logs, configs beside the verifier output
    try:
        text = _text(source)
    except LabelFormatError:
        if single:
            raise
        out.report.files_skipped.append(source.uri)
        return
    detected = detect_kind(name, source.uri, text)
    kind = detected
    if fmt != "auto":  # a file named on its own is read as told; in folders, only that format
        kind = _KIND[fmt] if single or detected == _KIND[fmt] else None
    if kind is None:
        if single:
            raise FormatDetectionError(
                f"{source.uri}: cannot tell the label format; pass --format with one of: "
                + ", ".join(LABEL_FORMATS)
            )
        out.report.files_skipped.append(source.uri)
        return
    name_of_source = _source_name(fmt, kind, source.uri)
    out.report.files += 1
    out.report.formats[name_of_source] = out.report.formats.get(name_of_source, 0) + 1
    try:
        rows = list(_parse(kind, text, source.uri, run_id, out))
    except LabelFormatError as e:
        raise LabelFormatError(f"{source.uri}: {e}") from e
    for row in rows:
        uri = redact_uri(source.uri)  # a presigned or token URL names the file, not its keys
        row = {**row, "source": row.get("source") or name_of_source, "source_uri": uri}
        if row.get("details"):  # free text (a judge's reasons, extra CSV columns)
            row["details"] = redact_json(row["details"], Redactor())[0]
        try:
            label = Label.model_validate({"label_id": "", **row})
        except ValidationError as e:
            out.report.problems.append(f"{source.uri}: {e.errors()[0].get('msg')}")
            continue
        label.label_id = label_id(label)
        out.labels.append(label)


def prepare_labels(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    fmt: str = "auto",
    run_id: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ReadLabels:
    """Read verifier outputs into label rows without touching a lake (`commit_labels` stores
    them): an ingest reads its `--labels` first, so a bad label input stores nothing.

    Raises:
        FormatDetectionError: None of the inputs is a label file.
        ValueError: An unknown format.
    """
    if fmt != "auto" and fmt not in LABEL_FORMATS:
        raise ValueError(f"unknown label format {fmt!r}; choose auto or one of: {LABEL_FORMATS}")
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    sources = expand_sources([os.fspath(p) for p in items], storage_options)
    out = ReadLabels()
    for source in sources:
        _read_file(source, fmt, run_id, len(sources) == 1, out)
    if not out.report.files:
        raise FormatDetectionError(
            f"no label files among the {len(sources)} input file(s); pass --format with one of: "
            + ", ".join(LABEL_FORMATS)
        )
    unique: dict[str, Label] = {}
    for label in out.labels:
        unique.setdefault(label.label_id, label)  # a run file and its trial files agree
    out.labels = list(unique.values())
    out.report.labels_read = len(out.labels)
    out.report.resolved = sum(1 for label in out.labels if label.resolved)
    for message in out.report.problems:
        log.warning("label problem: %s", message)
    return out


def read_labels(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    format: LabelFormat = "auto",
    run_id: str | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Label]:
    """Label rows from verifier output files (paths, directories, globs, URLs).

    Args:
        paths: files or folders; in folders, verifier outputs are found by content.
        format: a label format (`LABEL_FORMATS`) or 'auto'.
        run_id: run the labels belong to (default: the run folder the file sits in).
        storage_options: fsspec options for remote inputs.

    Bad rows of JSONL/CSV files are skipped with a logged warning; a file named on its own
    that is not a label file raises FormatDetectionError.
    """
    return prepare_labels(paths, format, run_id, storage_options).labels


def _trajectories(lake: LakeStore, column: str, values: set[str]) -> list[tuple[str, str, str]]:
    """(trajectory_id, task_id, run_id) of the trajectories whose `column` is among `values`."""
    # Imported here: ingest workers import this package and should not load DuckDB.
    from trajlake.query import sql

    found: list[tuple[str, str, str]] = []
    ordered = sorted(values)
    for start in range(0, len(ordered), _IN_CHUNK):
        chunk = ordered[start : start + _IN_CHUNK]
        query = (
            "SELECT trajectory_id, task_id, run_id FROM trajectories "
            f"WHERE {column} IN (SELECT unnest(?::VARCHAR[]))"
        )
        found.extend(sql(lake, query, [chunk]).rows())
    return found


def _match(lake: LakeStore, labels: list[Label], report: LabelReport) -> None:
    """Count matches; attach run-less task labels to their task's only trajectory."""
    by_id = {row[0] for row in _trajectories(lake, "trajectory_id", _ids(labels, True))}
    by_task: dict[str | None, list[tuple[str, str]]] = {}
    for traj, task, run in _trajectories(lake, "task_id", _ids(labels, False)):
        by_task.setdefault(task, []).append((traj, run))
    labelled: set[str] = set()
    for label in labels:
        if label.trajectory_id:
            hits = [label.trajectory_id] if label.trajectory_id in by_id else []
        elif label.run_id is not None:
            hits = [t for t, run in by_task.get(label.task_id, []) if run == label.run_id]
        else:
            hits = [t for t, _ in by_task.get(label.task_id, [])]
            if len(hits) > 1:
                report.ambiguous += 1
                continue
            if hits:
                label.trajectory_id = hits[0]
        report.matched += bool(hits)
        report.unmatched += not hits
        labelled.update(hits)
    report.trajectories_labelled = len(labelled)


def _ids(labels: list[Label], by_trajectory: bool) -> set[str]:
    if by_trajectory:
        return {label.trajectory_id for label in labels if label.trajectory_id}
    return {label.task_id for label in labels if label.task_id and not label.trajectory_id}


def attach_labels(
    lake: LakeStore,
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    format: LabelFormat = "auto",
    run_id: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> LabelReport:
    """Read verifier outputs and commit them to the lake's `labels` table in one snapshot.

    Labels that match no trajectory yet are stored too (a later ingest of their run makes
    them apply); the report counts them. Re-labelling with the same files adds nothing.
    """
    return commit_labels(lake, prepare_labels(paths, format, run_id, storage_options))


def commit_labels(lake: LakeStore, read: ReadLabels) -> LabelReport:
    """Match labels read by `prepare_labels` against the lake and commit them in one snapshot
    (see `attach_labels`)."""
    report = read.report
    if not read.labels:
        report.snapshot_id = lake.snapshot().snapshot_id
        return report
    _match(lake, read.labels, report)
    now = dt.datetime.now(dt.UTC)
    rows = [{**label.model_dump(), "created_at": now} for label in read.labels]
    summary = {"label_files": report.files, "labels": len(rows)}
    result = lake.commit(
        {"labels": rows_for_table("labels", rows)}, operation="label", summary=summary
    )
    report.added = result.added.get("labels", 0)
    report.duplicates = result.duplicates.get("labels", 0)
    report.snapshot_id = result.snapshot_id
    return report
