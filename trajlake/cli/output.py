"""One Output interface per command result: `text` renders for people, `json` for programs.

Every command builds an Output from `--output` and hands it its result; no command formats
anything itself. JSON goes to stdout only, so it can be piped; logs and progress use stderr.
This module holds the interface and the JSON/CSV forms; `text_output` builds on it, and
`options.make_output` chooses between them, so the interface never imports an implementation.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import datetime as dt
import decimal
import json
import math
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import click
import pyarrow as pa
from pydantic import BaseModel

if TYPE_CHECKING:
    from trajlake import (
        CanonicalTrajectory,
        Lake,
        MaintenanceReport,
        QueryResult,
        Snapshot,
        Tag,
        ValidationReport,
    )
    from trajlake.export.jsonl import ExportReport
    from trajlake.ingest import IngestReport, RedactionReport
    from trajlake.tour import TourReport


def to_jsonable(value: Any) -> Any:
    """Plain JSON values: datetimes as ISO text, bytes as base64, non-finite floats as null."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, BaseModel):
        return to_jsonable(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return str(value)


def dumps(value: Any) -> str:
    """Stable, strict JSON text of any result."""
    return json.dumps(to_jsonable(value), indent=2, ensure_ascii=False, allow_nan=False)


def result_columns(table: pa.Table) -> list[list[Any]]:
    """Each column's values; map columns become dicts (Arrow gives key/value pairs)."""
    columns = []
    for column in table.columns:
        values = column.to_pylist()
        if pa.types.is_map(column.type):
            values = [dict(v) if v is not None else None for v in values]
        columns.append(values)
    return columns


def result_tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows of a query result as tuples, in column order (map columns as dicts)."""
    return list(zip(*result_columns(table), strict=True))


def result_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Row dicts of a query result (a repeated column name keeps its last value)."""
    names = table.column_names
    return [dict(zip(names, row, strict=True)) for row in result_tuples(table)]


def tags_by_snapshot(tags: Sequence[Tag]) -> dict[int, list[str]]:
    """Tag names per snapshot id."""
    named: dict[int, list[str]] = {}
    for tag in tags:
        named.setdefault(tag.snapshot_id, []).append(tag.name)
    return named


def snapshot_dict(snapshot: Snapshot, tags: Sequence[str]) -> dict[str, Any]:
    """JSON form of a log entry, with the tags that name it."""
    return {**dataclasses.asdict(snapshot), "tags": list(tags)}


class SummarisedReport(Protocol):
    """A command's report: a JSON form and a text summary (export sft / groups, publish)."""

    def to_dict(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


def emit_report(report: SummarisedReport, output: str) -> None:
    """Print `report` as `--output` asks: one JSON document, or its text summary."""
    if output == "json":
        click.echo(dumps(report.to_dict()))
    else:
        click.echo(report.summary())


class Output(ABC):
    """Renders each command's result; `make_output` picks the implementation."""

    @abstractmethod
    def lake_created(self, lake: Lake) -> None:
        """`init`: the new lake."""

    @abstractmethod
    def ingest_report(self, report: IngestReport) -> None:
        """`ingest`: what was stored."""

    @abstractmethod
    def query_result(self, result: QueryResult, *, limit: int) -> None:
        """`sql`: the rows (text shows at most `limit`)."""

    @abstractmethod
    def query_written(self, path: str, rows: int) -> None:
        """`sql --out`: where the rows went."""

    @abstractmethod
    def snapshots(self, snapshots: Sequence[Snapshot], tags: Mapping[int, list[str]]) -> None:
        """`log`: snapshots, newest first, with their tags."""

    @abstractmethod
    def tag_created(self, tag: Tag) -> None:
        """`tag`: the new tag."""

    @abstractmethod
    def tags(self, tags: Sequence[Tag]) -> None:
        """`tags`: every tag."""

    @abstractmethod
    def trajectory(self, record: CanonicalTrajectory, *, full: bool) -> None:
        """`show`: one trajectory."""

    @abstractmethod
    def validation(self, report: ValidationReport) -> None:
        """`validate`: what was checked and what is wrong."""

    @abstractmethod
    def maintenance(self, report: MaintenanceReport) -> None:
        """`maintain`: what maintenance did (or would do)."""

    @abstractmethod
    def export(self, report: ExportReport) -> None:
        """`export jsonl`: what was written."""

    @abstractmethod
    def tour_report(self, report: TourReport) -> None:
        """`demo`: what the tour did and found."""

    @abstractmethod
    def redaction_report(self, report: RedactionReport) -> None:
        """`ingest --redact-report`: what would be redacted, by kind, with masked context."""


class JsonOutput(Output):
    """Machine-readable JSON on stdout, one document per command."""

    def emit(self, value: Any) -> None:
        """Print one JSON document."""
        click.echo(dumps(value))

    def lake_created(self, lake: Lake) -> None:
        self.emit({"lake": lake.uri, "snapshot": lake.snapshot().snapshot_id})

    def ingest_report(self, report: IngestReport) -> None:
        self.emit(report.to_dict())

    def query_result(self, result: QueryResult, *, limit: int) -> None:
        self.emit(result_rows(result.to_arrow()))

    def query_written(self, path: str, rows: int) -> None:
        self.emit({"path": path, "rows": rows})

    def snapshots(self, snapshots: Sequence[Snapshot], tags: Mapping[int, list[str]]) -> None:
        self.emit([snapshot_dict(s, tags.get(s.snapshot_id, [])) for s in snapshots])

    def tag_created(self, tag: Tag) -> None:
        self.emit(tag)

    def tags(self, tags: Sequence[Tag]) -> None:
        self.emit(list(tags))

    def trajectory(self, record: CanonicalTrajectory, *, full: bool) -> None:
        self.emit(record.model_dump(mode="json", exclude_none=True))

    def validation(self, report: ValidationReport) -> None:
        self.emit(report.to_dict())

    def maintenance(self, report: MaintenanceReport) -> None:
        self.emit(report.to_dict())

    def export(self, report: ExportReport) -> None:
        self.emit(report.to_dict())

    def tour_report(self, report: TourReport) -> None:
        self.emit(dataclasses.asdict(report))

    def redaction_report(self, report: RedactionReport) -> None:
        self.emit(report.to_dict())


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(to_jsonable(value), ensure_ascii=False)
    return to_jsonable(value)


class CsvOutput(JsonOutput):
    """CSV for query results (header + rows on stdout); JSON for everything else."""

    def query_result(self, result: QueryResult, *, limit: int) -> None:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        for row in result_tuples(result.to_arrow()):
            writer.writerow([_csv_cell(v) for v in row])
