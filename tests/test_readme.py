"""The README's commands: every `trajlake …` line in its bash blocks and its CLI table names a real
command with real options, and the 60-second tour runs as written on a fresh lake."""

from __future__ import annotations

import glob
import gzip
import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from trajlake.cli.main import cli
from trajlake.sample import sample_trajectories

README = Path(__file__).resolve().parents[1] / "README.md"


def _bash_blocks() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.DOTALL)
    return [block.splitlines() for block in blocks]


def _invocations(line: str) -> list[list[str]]:
    """`trajlake …` invocations on one shell line (comments dropped, `&&` chains split)."""
    code = line.split(" #", 1)[0].strip()
    if code.startswith("#"):
        return []
    out = []
    for part in code.split("&&"):
        words = shlex.split(part.strip())
        if words and words[0] == "trajlake":
            out.append(words[1:])
    return out


def _table_invocations() -> list[list[str]]:
    """Command-table rows: `trajlake NAME [--opt …]` in the first column (placeholders kept)."""
    rows = re.findall(r"^\| `(trajlake [^`]+)`", README.read_text(), flags=re.MULTILINE)
    out = []
    for row in rows:
        for part in row.split(" / "):
            text = re.sub(r"\[|\]|\\\|[a-z|]+|\.\.\.", " ", part.removeprefix("trajlake "))
            out.append([w for w in shlex.split(text.replace("|", " ")) if w != "trajlake"])
    return out


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    command: click.Command = cli
    rest = list(words)
    ctx = click.Context(cli)  # commands are loaded on first use: ask the group, not its dict
    while isinstance(command, click.Group) and rest:
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            break
        command, rest = sub, rest[1:]
    return command, rest


def _option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(getattr(param, "opts", []))
        names.update(getattr(param, "secondary_opts", []))
    return names


ALL = [words for block in _bash_blocks() for line in block for words in _invocations(line)]
ALL += _table_invocations()


def test_the_readme_shows_commands() -> None:
    assert len(ALL) > 30


@pytest.mark.parametrize("words", ALL, ids=[" ".join(w)[:60] for w in ALL])
def test_readme_command_and_options_exist(words: list[str]) -> None:
    command, rest = _resolve(words)
    assert command is not cli, f"unknown command: trajlake {' '.join(words)}"
    assert not isinstance(command, click.Group), f"incomplete command: {words}"
    options = _option_names(command)
    used = {w.split("=", 1)[0] for w in rest if w.startswith("-") and w != "-"}
    assert used <= options, f"trajlake {' '.join(words)}: unknown {sorted(used - options)}"


def _expand(word: str) -> list[str]:
    """A path glob as the shell expands it (`count(*)` in SQL is not a path)."""
    return sorted(glob.glob(word)) if "*" in word else [word]


def test_the_60_second_tour_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tour = next(b for b in _bash_blocks() if any("trajlake init" in line for line in b))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rollouts").mkdir()
    with gzip.open(tmp_path / "rollouts" / "sample.jsonl.gz", "wt") as f:
        for record in sample_trajectories(40, seed=7):  # the README shows sample-7-0000003
            f.write(json.dumps(record, default=str) + "\n")
    env = {}
    runner = CliRunner()
    ran = 0
    for line in tour:
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
            continue
        for words in _invocations(line):
            args = [m for w in words for m in (_expand(w) if "/" in w else [w])]
            result = runner.invoke(cli, args, env=env, catch_exceptions=False)
            assert result.exit_code == 0, f"trajlake {' '.join(words)}:\n{result.output}"
            ran += 1
    assert ran >= 10
    assert (tmp_path / "out.jsonl.gz").stat().st_size > 0
