"""`trajlake ingest --redact-report / --redact-personal / --allow-list` and the proxy's options."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

import trajlake as tl

Run = Callable[..., Result]  # the `run` fixture of tests/cli/conftest.py

OPENAI = "sk-proj-" + "Xq9T2mLw8ZkR4vB7nC1pY6hF3dJ0sA5eG" * 2
PASSWORD = "Xk29!mqPz7#v"
EMAIL = "dana.kim@startup.ai"


def _input(tmp_path: Path) -> Path:
    path = tmp_path / "rollouts.jsonl"
    good = {
        "trajectory_id": "t-1",
        "messages": [
            {"role": "user", "content": f"key {OPENAI}, mail {EMAIL}"},
            {"role": "tool", "content": f"DB_PASSWORD={PASSWORD}"},
        ],
    }
    path.write_text(json.dumps(good) + '\n{"trajectory_id": "t-2", "messages": [\n')
    return path


def test_redact_report_prints_findings_and_writes_nothing(run: Run, tmp_path: Path) -> None:
    source = _input(tmp_path)
    lake = tmp_path / "lake"
    result = run("ingest", source, "--lake", lake, "--redact-report")
    assert not lake.exists()
    out = result.stdout
    assert OPENAI not in out and PASSWORD not in out
    assert f"{source}:1 t-1 messages[0].content <SECRET:openai_key:1>" in out
    assert f"key [sk-p…], mail {EMAIL}" in out  # personal data is kept by default
    assert "DB_PASSWORD=[Xk2…]" in out
    assert "2 finding(s) in all" in out

    result = run(
        "ingest", source, "--lake", lake, "--redact-report", "--redact-personal", "--output", "json"
    )
    report = json.loads(result.stdout)
    assert report["by_kind"] == {"email": 1, "openai_key": 1, "password": 1}
    assert (report["trajectories"], report["bad_records"], report["personal"]) == (1, 1, True)
    assert not lake.exists()


def test_ingest_redact_personal_and_allow_list(run: Run, tmp_path: Path) -> None:
    source = _input(tmp_path)
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# kept on purpose\n{PASSWORD}\n")
    lake = tmp_path / "lake"
    run("ingest", source, "--lake", lake, "--create", "--redact-personal", "--allow-list", allow)
    contents = [
        r[0]
        for r in tl.open_lake(str(lake)).sql("SELECT content FROM messages ORDER BY idx").rows()
    ]
    assert contents == [
        "key <SECRET:openai_key:1>, mail <SECRET:email:1>",
        f"DB_PASSWORD={PASSWORD}",
    ]


def test_bad_allow_list_is_an_error_naming_file_and_line(run: Run, tmp_path: Path) -> None:
    source = _input(tmp_path)
    allow = tmp_path / "allow.txt"
    allow.write_text("ok\nre:[unclosed\n")
    lake = tmp_path / "lake"
    result = run("ingest", source, "--lake", lake, "--create", "--allow-list", allow, code=1)
    assert f"{allow}:2: bad regex '[unclosed'" in result.stderr
    result = run("ingest", source, "--lake", lake, "--redact-report", "--allow-list", allow, code=1)
    assert f"{allow}:2: bad regex" in result.stderr
    # The proxy reads the list before it opens the lake or binds a port.
    result = run(
        "proxy", "--lake", lake, "--upstream", "http://127.0.0.1:9", "--allow-list", allow, code=1
    )
    assert f"{allow}:2: bad regex" in result.stderr
    assert not lake.exists()
