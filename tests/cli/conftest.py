"""CLI fixtures: a runner that invokes `trajlake`, canonical JSONL inputs and an ingested lake."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from trajlake.cli.main import cli
from trajlake.sample import sample_trajectories

N = 8
"""Trajectories in the standard input file (plus one malformed line)."""

Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRAJLAKE_LAKE", "TRAJLAKE_STORAGE_OPTIONS", "TRAJLAKE_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run() -> Run:
    """Invoke the CLI; assert the exit code (`code=`), return the result."""

    def invoke(*args: object, code: int = 0, env: dict[str, str] | None = None) -> Result:
        result = CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)
        assert result.exit_code == code, (
            f"exit {result.exit_code} != {code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
        return result

    return invoke


def write_jsonl(path: Path, count: int, *, start: int = 0, malformed: bool = True) -> Path:
    """Sample trajectories as canonical JSONL; with `malformed`, a broken line after the third."""
    with path.open("w", encoding="utf-8") as f:
        for i, record in enumerate(sample_trajectories(count, start=start)):
            f.write(json.dumps(record) + "\n")
            if malformed and i == 2:
                f.write('{"trajectory_id": "broken", "messages": [\n')
    return path


@pytest.fixture
def make_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """`make_jsonl(name, count, start=0, malformed=True)`: write an input file in tmp_path."""

    def make(name: str, count: int, *, start: int = 0, malformed: bool = True) -> Path:
        return write_jsonl(tmp_path / name, count, start=start, malformed=malformed)

    return make


@pytest.fixture
def n() -> int:
    """Good trajectories in `jsonl`."""
    return N


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    """N sample trajectories and one malformed line."""
    return write_jsonl(tmp_path / "rollouts.jsonl", N)


@pytest.fixture
def lake_uri(tmp_path: Path, run: Run, jsonl: Path) -> str:
    """A lake holding the N trajectories of `jsonl` (snapshot 1), created through the CLI."""
    uri = str(tmp_path / "lake")
    run("init", "--lake", uri)
    run("ingest", jsonl, "--lake", uri)
    return uri
