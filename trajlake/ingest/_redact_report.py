"""The redaction report: what ingest would replace in some inputs, found without writing.

Inputs are read exactly as ingest reads them (same sources, format detection and adapters),
each trajectory and bad record is scanned with the redaction policy ingest would use, and every
finding is listed with its file, trajectory, field and a short context in which the secret is
masked. Nothing is written anywhere; no lake is needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajlake.ingest._adapter import BadRecord, ParsedTrajectory
from trajlake.ingest._contain import contain
from trajlake.ingest._pipeline import IngestReport, _choose_adapters
from trajlake.ingest._sources import SourceFile, expand_sources
from trajlake.redact import (
    PLACEHOLDER_RE,
    AllowList,
    Finding,
    Redactor,
    as_allow_list,
    family,
    json_slots,
    redact_uri,
    trajectory_texts,
)
from trajlake.schema import CanonicalTrajectory

__all__ = ["RedactionFinding", "RedactionReport", "mask", "redaction_report"]

_CONTEXT = 40
"""Characters of context shown on each side of a finding."""


def mask(value: str) -> str:
    """A secret shown as its first few characters and `…`: at most a quarter of it, up to 4."""
    return value[: min(4, len(value) // 4)] + "…"


@dataclass(frozen=True)
class RedactionFinding:
    """One value ingest would replace, and where."""

    file: str
    trajectory_id: str | None
    line: int | None
    field: str
    kind: str
    family: str
    placeholder: str
    masked: str
    context: str
    """The text around it as the lake would store it (other secrets as placeholders), with
    this secret shown as `[masked]`; line breaks as `⏎`."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass
class RedactionReport:
    """What redaction would do to some inputs: every finding and the totals."""

    personal: bool
    allow_list_entries: int = 0
    files: int = 0
    files_skipped: list[str] = field(default_factory=list)
    trajectories: int = 0
    bad_records: int = 0
    findings: list[RedactionFinding] = field(default_factory=list)

    @property
    def by_kind(self) -> dict[str, int]:
        """Findings per kind, most frequent first."""
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def by_family(self) -> dict[str, int]:
        """Findings per family (`personal`, credential families), most frequent first."""
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.family] = counts.get(f.family, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: totals first, then every finding."""
        return {
            "findings_total": len(self.findings),
            "by_kind": self.by_kind,
            "by_family": self.by_family,
            "files": self.files,
            "files_skipped": self.files_skipped,
            "trajectories": self.trajectories,
            "bad_records": self.bad_records,
            "personal": self.personal,
            "allow_list_entries": self.allow_list_entries,
            "findings": [f.to_dict() for f in self.findings],
        }


def _field_names(record: CanonicalTrajectory) -> Iterator[str]:
    """Names of the texts `trajectory_texts(record)` returns, in the same order."""
    for i, message in enumerate(record.messages):
        where = f"messages[{i}]"
        for name in ("content", "reasoning"):
            if getattr(message, name) is not None:
                yield f"{where}.{name}"
        for j, part in enumerate(message.parts or ()):
            if part.text is not None:
                yield f"{where}.parts[{j}].text"
        for j, call in enumerate(message.tool_calls or ()):
            if call.arguments is not None:
                yield f"{where}.tool_calls[{j}].arguments"
        if message.attrs:
            yield from (f"{where}.attrs" for _ in json_slots(message.attrs))
    for name in ("final_output", "exit_reason"):
        if getattr(record, name) is not None:
            yield name
    for name in ("attrs", "tools"):
        value = getattr(record, name)
        if value:
            yield from (name for _ in json_slots(value))


def _one_line(text: str) -> str:
    return text.replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎")


def _widen(text: str, cut: int, *, leading: bool) -> int:
    """`cut`, moved out of a placeholder it would split (the context shows it whole)."""
    for m in PLACEHOLDER_RE.finditer(text, max(0, cut - 40), cut + 40):
        if m.start() < cut < m.end():
            return m.start() if leading else m.end()
    return cut


def _contexts(text: str, found: Sequence[Finding]) -> list[str]:
    """For each finding of one text: its surroundings, redacted, the finding itself masked."""
    pieces: list[str] = []
    spans: list[tuple[int, int]] = []  # where each finding's placeholder lies in the output
    last = 0
    length = 0
    for f in found:
        pieces.append(text[last : f.start])
        length += f.start - last
        spans.append((length, length + len(f.placeholder)))
        pieces.append(f.placeholder)
        length += len(f.placeholder)
        last = f.end
    pieces.append(text[last:])
    redacted = "".join(pieces)
    out = []
    for f, (start, end) in zip(found, spans, strict=True):
        first = _widen(redacted, max(0, start - _CONTEXT), leading=True)
        last = _widen(redacted, min(len(redacted), end + _CONTEXT), leading=False)
        before, after = redacted[first:start], redacted[end:last]
        shown = f"[{mask(text[f.start : f.end])}]"
        lead = "…" if first > 0 else ""
        tail = "…" if last < len(redacted) else ""
        out.append(_one_line(f"{lead}{before}{shown}{after}{tail}"))
    return out


@dataclass(frozen=True)
class _Where:
    file: str
    trajectory_id: str | None
    line: int | None


def _scan(
    texts: Sequence[str], names: Sequence[str], redactor: Redactor, where: _Where
) -> list[RedactionFinding]:
    found = redactor.findings(texts)
    by_text: dict[int, list[Finding]] = {}
    for f in found:
        by_text.setdefault(f.text, []).append(f)
    out = []
    for i, text_found in by_text.items():
        for f, context in zip(text_found, _contexts(texts[i], text_found), strict=True):
            out.append(
                RedactionFinding(
                    where.file,
                    where.trajectory_id,
                    where.line,
                    names[i],
                    f.kind,
                    family(f.kind),
                    f.placeholder,
                    mask(texts[i][f.start : f.end]),
                    context,
                )
            )
    return out


def _uri_findings(uri: str) -> list[RedactionFinding]:
    """Credentials in a source URL, as `source_uri` would lose them."""
    redacted = redact_uri(uri)
    if redacted is uri:
        return []
    return [
        RedactionFinding(
            redacted, None, None, "source_uri", kind, family(kind), m.group(), "…", redacted
        )
        for m in PLACEHOLDER_RE.finditer(redacted)
        for kind in [m.group()[1:-1].split(":")[1]]
    ]


def _bad_texts(bad: BadRecord) -> tuple[list[str], list[str]]:
    """The texts of a bad record in the order `quarantine_row` redacts them (same numbers)."""
    texts, names = [], []
    if bad.raw is not None:
        texts.append(bad.raw.decode("utf-8", "surrogateescape"))
        names.append("quarantine.raw")
    texts.append(bad.error)
    names.append("quarantine.error")
    return texts, names


def _scan_source(
    source: SourceFile, adapter: Any, report: RedactionReport, allow: AllowList | None
) -> None:
    shown = redact_uri(source.uri)
    report.findings += _uri_findings(source.uri)
    with source.open() as stream:
        # contain(), as ingest: a file that cannot be read to its end becomes a bad record.
        for item in contain(adapter.read(source, stream)):
            redactor = Redactor(personal=report.personal, allow=allow)
            if isinstance(item, ParsedTrajectory):
                report.trajectories += 1
                record = item.record
                texts = trajectory_texts(record)
                names = list(_field_names(record))
                where = _Where(shown, record.trajectory_id or None, item.line)
            else:
                report.bad_records += 1
                texts, names = _bad_texts(item)
                where = _Where(shown, None, item.line)
            report.findings += _scan(texts, names, redactor, where)


def redaction_report(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    format: str = "auto",
    redact_personal: bool = False,
    allow_list: AllowList | str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RedactionReport:
    """What `ingest` would redact in `inputs`, without writing anything (no lake needed).

    Args:
        inputs: paths, directories, globs or fsspec URLs, as for `ingest`.
        format: a format name or 'auto' (detected from each file's content).
        redact_personal: also report personal data (e-mail addresses, phone numbers).
        allow_list: values ingest would keep: an `AllowList` or an allow-list file.
        storage_options: fsspec options for remote inputs.

    Returns:
        Every finding (file, trajectory id, line, field, kind, family, placeholder, masked
        value, context), with totals per kind and family. Bad records are scanned as the
        `quarantine` table would store them.
    """
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    allow = as_allow_list(allow_list)
    report = RedactionReport(
        personal=redact_personal,
        allow_list_entries=0 if allow is None else len(allow.exact) + len(allow.patterns),
    )
    chosen = IngestReport(ingest_id="")
    plan = _choose_adapters(expand_sources(items, storage_options), format, chosen)
    report.files_skipped = chosen.files_skipped
    for source, adapter in plan:
        report.files += 1
        _scan_source(source, adapter, report, allow)
    return report
