"""`redaction_report`: what ingest would redact, found without writing anything; its counts,
placeholders and contexts match what an ingest of the same files stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.ingest import AllowList, redaction_report
from trajlake.ingest._redact_report import mask
from trajlake.redact import family

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py

OPENAI = "sk-proj-" + "Xq9T2mLw8ZkR4vB7nC1pY6hF3dJ0sA5eG" * 2
AWS_ID = "AKIA" + "QX7RZ2MWK4NB5TYE"
AWS_SECRET = "wJa9rXUtnF" + "EMI7K7MDEN" + "GbPxRfiCYz" + "Qz81LmT4pV"
PASSWORD = "Xk29!mqPz7#v"
EMAIL = "dana.kim@startup.ai"


def _write(tmp_path: Path) -> Path:
    lines = [
        {
            "trajectory_id": "t-1",
            "messages": [
                {"role": "user", "content": f"use {OPENAI} and write to {EMAIL}"},
                {
                    "role": "tool",
                    "content": f"aws_access_key_id = {AWS_ID}\n"
                    f"aws_secret_access_key = {AWS_SECRET}",
                },
                {"role": "assistant", "content": f"again {OPENAI}"},
            ],
        },
        {"trajectory_id": "t-2", "messages": [{"role": "user", "content": "nothing here"}]},
    ]
    path = tmp_path / "in" / "rollouts.jsonl"
    path.parent.mkdir()
    text = "\n".join(json.dumps(line) for line in lines)
    path.write_text(
        text + '\n{"trajectory_id": "t-3", "messages": [{"content": "PASSWORD=' + PASSWORD + "\n"
    )
    return path


def _families(by_kind: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, n in by_kind.items():
        out[family(kind)] = out.get(family(kind), 0) + n
    return out


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*"))


def test_report_lists_findings_and_writes_nothing(tmp_path: Path) -> None:
    source = _write(tmp_path)
    before = _files(tmp_path)
    report = redaction_report(source)
    assert _files(tmp_path) == before
    assert (report.files, report.trajectories, report.bad_records) == (1, 2, 1)
    assert report.by_kind == {"openai_key": 2, "aws_key": 1, "aws_secret": 1, "password": 1}
    assert report.by_family == _families(report.by_kind)
    first = report.findings[0]
    assert (first.file, first.trajectory_id, first.line, first.field) == (
        str(source),
        "t-1",
        1,
        "messages[0].content",
    )
    assert (first.kind, first.placeholder, first.masked) == (
        "openai_key",
        "<SECRET:openai_key:1>",
        "sk-p…",
    )
    assert first.context == f"use [sk-p…] and write to {EMAIL}"
    aws = [f for f in report.findings if f.kind.startswith("aws")]
    assert aws[1].context == "…<SECRET:aws_key:1>⏎aws_secret_access_key = [wJa9…]"
    again = report.findings[3]
    assert (again.field, again.placeholder) == ("messages[2].content", "<SECRET:openai_key:1>")
    bad = report.findings[-1]
    assert (bad.trajectory_id, bad.line, bad.field, bad.masked) == (
        None,
        3,
        "quarantine.raw",
        "Xk2…",
    )
    dumped = json.dumps(report.to_dict())
    for secret in (OPENAI, AWS_ID, AWS_SECRET, PASSWORD):
        assert secret not in dumped
    assert json.loads(dumped)["findings_total"] == 5


def test_report_honours_personal_and_allow_list(tmp_path: Path) -> None:
    source = _write(tmp_path)
    personal = redaction_report(source, redact_personal=True)
    assert personal.by_kind["email"] == 1 and personal.by_family["personal"] == 1
    (email,) = [f for f in personal.findings if f.kind == "email"]
    assert email.context == "use <SECRET:openai_key:1> and write to [dana…]"
    allow = tmp_path / "allow.txt"
    allow.write_text(f"re:sk-proj-.*\n{PASSWORD}\n")
    allowed = redaction_report(source, allow_list=allow)
    assert allowed.by_kind == {"aws_key": 1, "aws_secret": 1}
    assert allowed.allow_list_entries == 2
    assert (
        redaction_report(source, allow_list=AllowList.parse(AWS_ID)).by_kind.get("aws_key") is None
    )


def test_report_placeholders_are_those_ingest_stores(lake: tl.Lake, tmp_path: Path) -> None:
    source = _write(tmp_path)
    report = redaction_report(source, redact_personal=True)
    ingested = lake.ingest(source, redact_personal=True)
    assert ingested.redactions == sum(1 for f in report.findings if f.trajectory_id)
    messages = lake.sql("SELECT trajectory_id, idx, content FROM messages").to_arrow().to_pylist()
    for f in report.findings:
        if f.trajectory_id is None:
            (raw,) = lake.sql("SELECT raw FROM quarantine").rows()[0]
            assert f.placeholder in raw.decode()
            continue
        idx = int(f.field.split("[")[1].split("]")[0])
        (content,) = [
            m["content"]
            for m in messages
            if (m["trajectory_id"], m["idx"]) == (f.trajectory_id, idx)
        ]
        assert f.placeholder in content


def test_mask_shows_at_most_a_quarter() -> None:
    assert mask(OPENAI) == "sk-p…"
    assert mask("Xk29!mqP") == "Xk…"
    assert mask("abc") == "…"


@pytest.mark.skipif(not SHARED_CORPUS.exists(), reason="shared corpus not available")
def test_report_on_real_trajectories_matches_ingest(lake: tl.Lake) -> None:
    """On real coding-CLI sessions the report finds exactly what ingest replaces."""
    corpus = SHARED_CORPUS / "05_coding_cli_sessions"
    report = redaction_report(corpus, redact_personal=True)
    assert report.trajectories > 10
    ingested = lake.ingest(corpus, redact_personal=True)
    assert ingested.trajectories_read == report.trajectories
    assert ingested.redactions == sum(1 for f in report.findings if f.trajectory_id) > 0
    # Real author addresses are personal data: kept unless asked for.
    assert {f.family for f in report.findings} == {"personal"}
    assert redaction_report(corpus).findings == []
