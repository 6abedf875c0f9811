"""Outputs cannot land inside the lake, and ATIF file names never collide.

Writing an export into the lake's own metadata used to make every command fail (an export
over a Delta commit, a JSONL file read as a tag or a snapshot): each writer that takes a path
now refuses one inside the lake before it writes anything. ATIF directory exports map ids to
file names injectively (`a/b` and `a_b` are two files, a 300-character id fits) and write a
manifest that maps every file back to its exact id.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake._names import file_stem_for_id, refuse_inside_lake
from trajlake.cli.main import cli
from trajlake.errors import OutputInsideLake
from trajlake.export.atif import MANIFEST
from trajlake.sample import sample_trajectory

INSIDE = [
    "tables/trajectories/_delta_log/00000000000000000000.json",
    "tables/trajectories/_delta_log/00000000000000000002.json",
    "tables/messages/part-x.parquet",
    "_trajlake/log/00000000000000000002.json",
    "_trajlake/tags/x.json",
    "_trajlake/lake.json",
    "x.jsonl",
    ".",
]


def _listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def lake(tmp_path: Path) -> tl.Lake:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write([sample_trajectory(i, turns=2) for i in range(3)])
    return lake


EXPORTS: dict[str, Callable[[tl.Lake, str], Any]] = {
    "jsonl": lambda lake, out: lake.export_jsonl(out),
    "atif": lambda lake, out: lake.export_atif(out),
    "atif-jsonl": lambda lake, out: lake.export_atif(os.path.join(out, "atif.jsonl")),
    "sft": lambda lake, out: lake.export_sft(out, format="openai"),
}


@pytest.mark.parametrize("inside", INSIDE)
@pytest.mark.parametrize("kind", sorted(EXPORTS))
def test_exports_into_the_lake_are_refused(lake: tl.Lake, kind: str, inside: str) -> None:
    root = Path(lake.uri)
    before = _listing(root)
    with pytest.raises(OutputInsideLake, match="is inside the lake"):
        EXPORTS[kind](lake, str(root / inside))
    assert _listing(root) == before
    reopened = tl.open_lake(root)
    assert reopened.validate().ok
    assert reopened.sql("select count(*) from trajectories").rows() == [(3,)]


def test_paths_that_only_look_outside_are_caught(lake: tl.Lake, tmp_path: Path) -> None:
    root = Path(lake.uri)
    link = tmp_path / "link"
    link.symlink_to(root / "tables")
    sneaky = [
        link / "trajectories" / "_delta_log" / "00000000000000000002.json",
        tmp_path / "elsewhere" / ".." / "lake" / "_trajlake" / "tags" / "y.json",
        f"file://{root}/_trajlake/log/00000000000000000002.json",
    ]
    for out in sneaky:
        with pytest.raises(OutputInsideLake):
            lake.export_jsonl(str(out))
    cwd = os.getcwd()
    try:
        os.chdir(root / "tables")
        with pytest.raises(OutputInsideLake):
            lake.export_jsonl("trajectories/_delta_log/00000000000000000002.json")
    finally:
        os.chdir(cwd)
    assert tl.open_lake(root).validate().ok


def test_outputs_beside_the_lake_and_in_its_output_folders_are_written(
    lake: tl.Lake, tmp_path: Path
) -> None:
    root = Path(lake.uri)
    sibling = Path(f"{root}-exports")  # shares the lake's prefix, not its folder
    assert lake.export_jsonl(str(sibling / "all.jsonl")).trajectories == 3
    assert lake.export_jsonl(str(root / "models" / "x.jsonl")).trajectories == 3
    assert lake.export_atif(str(root / "demo-report" / "atif")).trajectories == 3
    assert tl.open_lake(root).validate().ok
    # Other stores are never inside a local lake, and vice versa.
    refuse_inside_lake("s3://bucket/lake/_trajlake/x.json", str(root))
    with pytest.raises(OutputInsideLake):
        refuse_inside_lake("s3a://bucket/lake/tables/x", "s3://bucket/lake/")
    refuse_inside_lake("s3://bucket/lake-2/x", "s3://bucket/lake")


@pytest.mark.parametrize(
    "args",
    [
        ["export", "jsonl", "{lake}/tables/trajectories/_delta_log/00000000000000000002.json"],
        ["export", "atif", "{lake}/_trajlake/tags"],
        ["export", "sft", "{lake}/_trajlake/log", "--format", "trl"],
        ["sql", "select 1 as x", "--out", "{lake}/_trajlake/log/00000000000000000002.json"],
    ],
)
def test_cli_refuses_outputs_inside_the_lake(lake: tl.Lake, args: list[str]) -> None:
    root = Path(lake.uri)
    before = _listing(root)
    command = [a.format(lake=root) for a in args] + ["--lake", str(root)]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code != 0
    assert "is inside the lake" in result.output
    assert _listing(root) == before
    assert CliRunner().invoke(cli, ["validate", "--lake", str(root)]).exit_code == 0


COLLIDING_IDS = ["a/b", "a_b", "a\\b", "a b", "A", "a", "..", ".hidden", "con", "x" * 300, "é"]


def test_atif_file_names_are_injective_with_a_manifest(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(
        [{**sample_trajectory(i, turns=1), "trajectory_id": t} for i, t in enumerate(COLLIDING_IDS)]
    )
    out = tmp_path / "atif"
    report = lake.export_atif(str(out))
    files = sorted(p.name for p in out.glob("*.json"))
    assert report.trajectories == len(files) == len(COLLIDING_IDS)
    assert all(len(name.encode()) <= 200 for name in files)
    manifest = [json.loads(line) for line in (out / MANIFEST).read_text().splitlines()]
    assert sorted(m["file"] for m in manifest) == files
    assert sorted(m["trajectory_id"] for m in manifest) == sorted(COLLIDING_IDS)
    for entry in manifest:  # each file holds the trajectory its manifest line names
        assert json.loads((out / entry["file"]).read_text())["session_id"] == entry["trajectory_id"]
    # No two names differ only by case (one file on case-insensitive file systems).
    assert len({name.casefold() for name in files}) == len(files)
    # Safe short ids keep their own name; the directory ingests back as the same ids.
    assert "a_b.json" in files and "A.json" in files
    other = tl.open_lake(tmp_path / "other", create=True)
    imported = other.ingest(out)
    assert (imported.added, imported.quarantined) == (len(COLLIDING_IDS), 0)
    ids = other.sql("select trajectory_id from trajectories order by 1").rows()
    assert [r[0] for r in ids] == sorted(COLLIDING_IDS)


def test_file_stems() -> None:
    assert file_stem_for_id("django__django-11099") == "django__django-11099"
    assert file_stem_for_id("a/b") != file_stem_for_id("a_b") == "a_b"
    # A hashed stem carries '~', which no plain stem has: no id's plain stem can equal it.
    assert "~" in file_stem_for_id("a/b")
    assert file_stem_for_id("a_b", hashed=True) != file_stem_for_id("a_b")
    long = file_stem_for_id("y" * 10_000)
    assert len(long) <= 150 and long.startswith("y" * 100)
    assert file_stem_for_id("y" * 10_000) != file_stem_for_id("y" * 10_001)
    assert not file_stem_for_id("..").startswith(".")


def test_the_loop_refuses_a_report_folder_inside_its_lake(tmp_path: Path) -> None:
    from trajlake.loop import run_loop

    pytest.importorskip("torch")
    lake = tmp_path / "loop-lake"
    with pytest.raises(OutputInsideLake, match="report folder"):
        run_loop(lake, quick=True, out=lake / "tables" / "report")
    assert not lake.exists()  # refused before the lake was created
