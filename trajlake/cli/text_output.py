"""Text rendering of command results for people: short summaries and rich tables on stdout.

The `Output` implementation for `--output text`; what it prints is for reading, not parsing (JSON
is the stable form). Lists are cut (`PROBLEMS_SHOWN`, `FINDINGS_SHOWN`, `CELL_WIDTH`) so a large
ingest or query still fits a terminal, with a pointer to where the rest is.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from trajlake.cli.output import Output, result_tuples, to_jsonable
from trajlake.cli.transcript import render_transcript

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
    from trajlake.loop import LoopReport
    from trajlake.tour import TourReport

PROBLEMS_SHOWN = 5
FINDINGS_SHOWN = 200
CELL_WIDTH = 60


def format_time(value: str | dt.datetime) -> str:
    """A timestamp to the second, in UTC."""
    when = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S")


def format_mb(n_bytes: int) -> str:
    """Bytes as MB with two decimals."""
    return f"{n_bytes / 1e6:.2f} MB"


def cell(value: Any) -> Text:
    """One table cell: NULL dimmed, long text cut, binary as its size."""
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Text(f"<{len(bytes(value))} bytes>", style="dim")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        text = value.isoformat()
    elif isinstance(value, (Mapping, list, tuple)):
        text = json.dumps(to_jsonable(value), ensure_ascii=False)
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    if len(text) > CELL_WIDTH:
        text = text[: CELL_WIDTH - 1] + "…"
    return Text(text)


def skip_summary(by_reason: Mapping[str, Sequence[str]], examples: int = 2) -> str:
    """One line for the files that hold no trajectory: counts by kind, a few examples each."""
    total = sum(len(uris) for uris in by_reason.values())
    parts = []
    for reason, uris in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        names = ", ".join(u.rstrip("/").rsplit("/", 1)[-1] for u in uris[:examples])
        more = ", …" if len(uris) > examples else ""
        parts.append(f"{len(uris)} {reason} (e.g. {names}{more})")
    return f"skipped {total} file(s) holding no trajectory: " + "; ".join(parts)


def added_summary(summary: Mapping[str, Any]) -> str:
    """'trajectories 40, messages 812' from a snapshot's summary (non-zero tables only)."""
    added = summary.get("added")
    if not isinstance(added, Mapping):
        return ""
    # Trajectories first: the count people look for; then the other tables as committed.
    order = sorted(added, key=lambda table: table != "trajectories")
    return ", ".join(f"{table} {added[table]}" for table in order if added[table])


class TextOutput(Output):
    """Human-readable output on stdout."""

    def __init__(self, console: Console | None = None) -> None:
        # Everything printed is data (ids, SQL results, rollout text): rich must neither colour
        # it by guesswork nor read `[...]` in it as markup, hence no highlighting and `Text`.
        self.console = console or Console(highlight=False)

    def line(self, text: str | Text = "") -> None:
        """Print one line without markup interpretation."""
        self.console.print(text if isinstance(text, Text) else Text(text), soft_wrap=True)

    def lake_created(self, lake: Lake) -> None:
        self.line(f"created lake {lake.uri}")

    def ingest_report(self, report: IngestReport) -> None:
        formats = ", ".join(f"{name}: {n}" for name, n in sorted(report.formats.items()))
        self.line(
            f"read {report.files} file(s) ({formats or 'none'}), {format_mb(report.bytes_read)} "
            f"in {report.seconds:.2f} s ({report.mb_per_s:.1f} MB/s)"
        )
        identity = "".join(
            f", {n} {what}"
            for n, what in ((report.updated, "updated"), (report.conflicts, "id conflicts"))
            if n
        )
        self.line(
            f"snapshot {report.snapshot_id}: {report.added} added, {report.duplicates} "
            f"duplicates{identity}, {report.quarantined} quarantined"
        )
        self._identity_examples(report)
        for problem in report.problems[:PROBLEMS_SHOWN]:
            self.line(Text(f"  {problem}", style="yellow"))
        if report.quarantined > PROBLEMS_SHOWN:
            more = report.quarantined - PROBLEMS_SHOWN
            self.line(f"  … and {more} more (see the quarantine table)")
        if report.files_skipped:
            self.line(Text(skip_summary(report.skipped_by_reason), style="dim"))
        if report.redactions:
            self.line(f"redacted {report.redactions} secret(s) (placeholders such as <SECRET:…>)")
        if report.labels is not None:
            labels = report.labels
            self.line(
                f"labels: {labels['added']} added, {labels['duplicates']} already there, "
                f"{labels['matched']} matched, {labels['unmatched']} unmatched"
            )

    def _identity_examples(self, report: IngestReport) -> None:
        """Conflicts (with the way out) and updates, a few of each; duplicates stay quiet."""
        for kind, style, total in (
            ("conflict", "yellow", report.conflicts),
            ("updated", "dim", report.updated),
        ):
            shown = [e for e in report.identity_examples if e["kind"] == kind]
            for e in shown[:PROBLEMS_SHOWN]:
                stored = f" -> {e['stored_as']}" if e.get("stored_as") else ""
                where = e.get("source") or "input"
                text = f"  {kind}: {where}: {e['trajectory_id']}{stored}: {e['detail']}"
                self.line(Text(text, style=style))
            listed = min(len(shown), PROBLEMS_SHOWN)
            if total > listed:
                self.line(f"  … and {total - listed} more {kind}")
        if report.conflicts:
            self.line(
                "  ids of different runs collide: pass --run-id to give each run its own ids "
                "(--strict refuses conflicts)"
            )

    def redaction_report(self, report: RedactionReport) -> None:
        policy = "credentials and personal data" if report.personal else "credentials"
        if report.allow_list_entries:
            policy += f", {report.allow_list_entries} allow-list entries kept"
        self.line(
            f"read {report.files} file(s), {report.trajectories} trajectories, "
            f"{report.bad_records} bad record(s); redacting {policy}; nothing written"
        )
        for f in report.findings[:FINDINGS_SHOWN]:
            where = f"{f.file}:{f.line}" if f.line is not None else f.file
            self.line(f"{where} {f.trajectory_id or '-'} {f.field} {f.placeholder}")
            self.line(Text(f"    {f.context}", style="dim"))
        if len(report.findings) > FINDINGS_SHOWN:
            more = len(report.findings) - FINDINGS_SHOWN
            self.line(f"… and {more} more finding(s) (--output json lists all)")
        for skipped in report.files_skipped:
            self.line(Text(f"skipped (unknown format): {skipped}", style="dim"))
        table = Table("kind", "family", "findings", box=box.SIMPLE_HEAD, show_edge=False)
        families = {f.kind: f.family for f in report.findings}
        for kind, n in report.by_kind.items():
            table.add_row(kind, families[kind], str(n))
        self.console.print(table)
        self.line(f"{len(report.findings)} finding(s) in all")

    def query_result(self, result: QueryResult, *, limit: int) -> None:
        data = result.to_arrow()
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for name in data.column_names:
            table.add_column(name, overflow="fold")
        shown = data.slice(0, limit) if limit else data
        for row in result_tuples(shown):
            table.add_row(*(cell(v) for v in row))
        if data.num_columns:
            self.console.print(table)
        total = data.num_rows
        if shown.num_rows < total:
            self.line(f"{shown.num_rows} of {total} rows shown (raise --limit, or --output csv)")
        else:
            self.line(f"{total} row{'s' if total != 1 else ''}")

    def query_written(self, path: str, rows: int) -> None:
        self.line(f"wrote {rows} rows to {path}")

    def snapshots(self, snapshots: Sequence[Snapshot], tags: Mapping[int, list[str]]) -> None:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for name in ("snapshot", "time (UTC)", "operation", "added", "tags"):
            table.add_column(name, justify="right" if name == "snapshot" else "left")
        for s in snapshots:
            table.add_row(
                str(s.snapshot_id),
                format_time(s.timestamp),
                s.operation,
                added_summary(s.summary),
                Text(", ".join(tags.get(s.snapshot_id, [])), style="bold"),
            )
        self.console.print(table)

    def tag_created(self, tag: Tag) -> None:
        self.line(f"tagged snapshot {tag.snapshot_id} as {tag.name}")

    def tags(self, tags: Sequence[Tag]) -> None:
        if not tags:
            self.line("no tags")
            return
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for name in ("tag", "snapshot", "created (UTC)", "note"):
            table.add_column(name)
        for tag in tags:
            table.add_row(tag.name, str(tag.snapshot_id), format_time(tag.created_at), tag.note)
        self.console.print(table)

    def trajectory(self, record: CanonicalTrajectory, *, full: bool) -> None:
        render_transcript(self.console, record, full=full)

    def validation(self, report: ValidationReport) -> None:
        checked = (
            f"{report.snapshots_checked} snapshot(s) checked, {report.snapshots_expired} expired"
        )
        for table, n in sorted(report.orphan_versions.items()):
            self.line(f"table {table}: {n} uncommitted version(s) left by a crashed writer")
        if report.ok:
            self.line(Text(f"ok: {checked}", style="green"))
            return
        self.line(Text(f"{len(report.problems)} problem(s); {checked}:", style="red"))
        for problem in report.problems:
            self.line(f"  {problem}")

    def maintenance(self, report: MaintenanceReport) -> None:
        if report.dry_run:
            what = "dry run"
        elif report.snapshot_id is None:
            what = "no new snapshot: nothing moved"
        else:
            what = f"snapshot {report.snapshot_id}"
        self.line(f"maintenance ({what}) in {report.seconds:.2f} s")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for name in ("table", "files", "compacted", "checkpoint", "log removed", "vacuumed"):
            table.add_column(name, justify="left" if name == "table" else "right")
        for name, t in report.tables.items():
            table.add_row(
                name,
                f"{t.files_before} → {t.files_after}",
                "yes" if t.compacted else "",
                "" if t.checkpoint_version is None else str(t.checkpoint_version),
                str(t.log_files_removed),
                str(t.data_files_vacuumed),
            )
        self.console.print(table)

    def export(self, report: ExportReport) -> None:
        self.line(
            f"exported {report.trajectories} trajectories ({report.messages} messages, "
            f"{format_mb(report.bytes_written)}) from snapshot {report.snapshot_id} "
            f"to {report.path} in {report.seconds:.2f} s"
        )

    def tour_report(self, report: TourReport) -> None:
        ingest = report.ingest
        self.line(Text(f"lake {report.lake}", style="bold"))
        self.line(
            f"ingested the bundled sample rollouts: {ingest['added']} added, "
            f"{ingest['duplicates']} already there, {ingest['quarantined']} quarantined "
            f"(snapshot {ingest['snapshot']}, tagged {report.tag})"
        )
        for question, rows in report.answers.items():
            self.line()
            self.line(Text(question, style="bold"))
            table = Table(box=box.SIMPLE_HEAD, show_edge=False)
            for name in rows[0] if rows else []:
                table.add_column(name)
            for row in rows:
                table.add_row(*(cell(v) for v in row.values()))
            self.console.print(table)
        travel = ", ".join(f"{ref}: {n}" for ref, n in report.time_travel.items())
        self.line(f"time travel — trajectories at {travel}")
        compacted = [n for n, t in report.maintenance["tables"].items() if t["compacted"]]
        self.line(
            f"maintenance in {report.maintenance['seconds']:.2f} s "
            f"(compacted: {', '.join(compacted) or 'nothing to do'}); "
            f"validate: {'ok' if report.valid else 'PROBLEMS'}"
        )
        self.line(
            Text(
                f'next: trajlake sql "SELECT * FROM trajectories LIMIT 5" --lake {report.lake}',
                style="dim",
            )
        )

    def loop_report(self, report: LoopReport) -> None:
        """`demo`: what each step of the generation loop did, then the two comparison tables."""
        kind = "quick run" if report.quick else "default run"
        self.line(
            Text(f"lake {report.lake} (seed {report.seed}, {kind}, {report.seconds:.0f} s)", "bold")
        )
        for i, entry in enumerate(report.steps, start=1):
            first, *more = _loop_step(entry, report) or [""]
            self.line(f"{i:>2}. {entry['name']} ({entry['seconds']:.1f} s): {first}")
            for extra in more:
                self.line(f"      {extra}")
        self.line()
        self.line(Text("success per generation and method (SQL over outcomes)", style="bold"))
        self.console.print(_success_table(report))
        self.line("expected: the policy's exact expected success on those tasks")
        self.line()
        self.line(
            Text("behaviour cloning on gen-0 (exact expected success per task set)", style="bold")
        )
        self.console.print(_policy_table(report))
        self.line(f"plots: {', '.join(report.plots.values())}")
        self.line(f"report: {report.files.get('report', '')}")
        self.line(Text(f"next: trajlake lineage --lake {report.lake}", style="dim"))


def _metrics(m: Mapping[str, Any]) -> str:
    n = m.get("n")

    def f(key: str) -> str:
        value = m.get(key)
        return "n/a" if value is None else f"{value:.3f}"

    return (
        f"Best@{n} {f('best_at_n')}, Random@{n} {f('random_at_n')}, Pass@{n} {f('pass_at_n')}, "
        f"gap closed {f('gap_closed')}, AUROC {f('auroc')}"
    )


def _loop_step(entry: Mapping[str, Any], report: LoopReport) -> list[str]:
    """What a loop step did, in one line or a few."""
    name = entry["name"]
    if name.startswith("generate"):
        return [f"{entry['rollouts']} rollouts of {entry['policy']} on {entry['tasks']} tasks"]
    if name.startswith("ingest"):
        return [
            f"{entry['ingested']} ingested without outcomes, {entry['labels_added']} labels "
            f"({entry['labels_resolved']} resolved), tag {entry['tag']} = snapshot "
            f"{entry['snapshot']}"
        ]
    if name == "credit":
        return [
            f"{r['run_name']}: {r['estimator']}, mask {r['mask']}, "
            f"{r['kept_turns']}/{r['turns']} turns kept"
            for r in report.credit_runs
        ]
    if name == "export SFT":
        return [f"tag {entry['tag']} = snapshot {entry['snapshot']}; trl format"] + [
            f"{e['variant']} (credit run {e['credit_run'] or 'none'}): "
            f"{e['trained_turns']}/{e['turns']} turns trained"
            for e in entry["exports"]
        ]
    if name == "behaviour cloning":
        return [f"{entry['policies']} tabular policies fitted to the exported weighted turns"]
    if name == "train value model":
        vm = report.value_model
        tags = ", ".join(vm["training_tags"])
        head = f"{vm['label']}: {vm['model_id']} on {tags}"
        return [head, "its test tasks: " + _metrics(vm["test_split"])]
    if name == "register gen-1 policy":
        p = report.gen1_policy
        return [f"{p['model_id']} (cloned with credit run {p['credit_run']})"]
    if name.startswith("evaluate"):
        return [_metrics(report.value_model.get("gen1", {}))]
    if name == "report":
        return [f"{entry['plots']} plots; success rates read back with SQL"]
    return []


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _success_table(report: LoopReport) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("generation and method")
    for name in ("tasks", "rollouts", "success", "expected"):
        table.add_column(name, justify="right")
    for g in report.generations:
        table.add_row(
            f"{g['tag']}: {g['policy_model']}, sampled", str(g["tasks"]),
            str(g["trajectories"]), _rate(g["success_rate"]), _rate(g.get("expected_success")),
        )  # fmt: skip
    b = report.best_of_n
    if b:
        n = b["n"]
        for method, value in (
            (f"best-of-{n} by the value model", b["selected"]),
            (f"random pick of {n} (expected)", b["random"]),
            (f"pass@{n} (oracle)", b["pass"]),
        ):
            table.add_row(f"gen-1: {method}", str(b["tasks"]), "", _rate(value), "")
    return table


def _policy_table(report: LoopReport) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("next policy cloned from")
    for name in ("turns", "gen-0 tasks", "held-out"):
        table.add_column(name, justify="right")
    for p in report.policies:
        table.add_row(
            p.name, str(p.examples) if p.export else "–",
            _rate(p.exact_success_train), _rate(p.exact_success_heldout),
        )  # fmt: skip
    return table
