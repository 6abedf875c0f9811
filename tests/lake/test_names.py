"""Untrusted names and SQL: tag and table names never reach the file system or SQL unchecked;
lake queries are read-only and cannot read outside the lake."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

import trajlake as tl
from trajlake.errors import LakeCorrupt, NoSuchTable, ReadOnlyQuery, TrajlakeError
from trajlake.sample import sample_trajectory

BAD_TAG_NAMES = [
    "",
    ".",
    "..",
    "../x",
    "../../etc/passwd",
    "a/b",
    "a\\b",
    "/abs",
    "-starts-with-dash",
    ".hidden",
    "x; DROP TABLE trajectories",
    "it's",
    'say "hi"',
    "a b",
    "tab\there",
    "line\nbreak",
    "nul\x00byte",
    "x" * 129,
    "ünïcode",
]


@pytest.fixture
def small_lake(lake: tl.Lake) -> tl.Lake:
    """A lake with 2 trajectories, for tests that change it."""
    lake.write([sample_trajectory(i, turns=2) for i in range(2)])
    return lake


@pytest.fixture(scope="module")
def shared_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    """The same, shared by the tests that must leave a lake unchanged (and check that)."""
    lake = tl.open_lake(tmp_path_factory.mktemp("names") / "lake", create=True)
    lake.write([sample_trajectory(i, turns=2) for i in range(2)])
    return lake


@pytest.mark.parametrize("name", BAD_TAG_NAMES)
def test_bad_tag_names_are_refused(shared_lake: tl.Lake, name: str) -> None:
    tags_dir = Path(shared_lake.uri) / "_trajlake" / "tags"
    before = sorted(p.name for p in tags_dir.glob("*")) if tags_dir.exists() else []
    with pytest.raises(ValueError, match="tag name"):
        shared_lake.tag(name)
    assert shared_lake.tags() == []
    after = sorted(p.name for p in tags_dir.glob("*")) if tags_dir.exists() else []
    assert after == before
    # Resolving such a name is refused the same way, without touching the file system.
    with pytest.raises(ValueError, match="tag name"):
        shared_lake.snapshot(name.strip() or "x/")


@pytest.mark.parametrize("name", ["gen-3\n", "gen-3\r\n", "v1\n\n", "\ngen-3", "gen\n-3"])
def test_tag_names_with_line_breaks_are_refused(small_lake: tl.Lake, name: str) -> None:
    # `re.match(...$)` accepted "gen-3\n": the file `gen-3\n.json` could never be read back.
    with pytest.raises(ValueError, match="invalid tag name"):
        small_lake.tag(name)
    assert small_lake.tags() == []
    assert not (Path(small_lake.uri) / "_trajlake" / "tags").exists()
    with pytest.raises(ValueError, match="invalid tag name"):
        small_lake.snapshot_log.get_tag(name)


def test_good_tag_names_are_accepted(small_lake: tl.Lake) -> None:
    names = ["gen-3", "sft-v2-data", "v1.0", "A_b-9", "x" * 128]
    for name in names:
        small_lake.tag(name)
    assert sorted(t.name for t in small_lake.tags()) == sorted(names)
    for name in names:
        assert small_lake.snapshot(name).snapshot_id == 1


@pytest.mark.parametrize("name", ["latest", "42", "2024-01-01T00"])
def test_tag_names_that_shadow_other_references_are_refused(small_lake: tl.Lake, name: str) -> None:
    with pytest.raises(ValueError):
        small_lake.tag(name)


BAD_TABLE_NAMES = ["../x", "x; drop", "trajectories/../x", "", "Trajectories", "tool_calls", "/etc"]


@pytest.mark.parametrize("name", BAD_TABLE_NAMES)
def test_unknown_table_names_are_refused(shared_lake: tl.Lake, name: str) -> None:
    with pytest.raises(NoSuchTable):
        shared_lake.table_files(name)
    with pytest.raises(NoSuchTable):
        shared_lake.table_version(name)
    with pytest.raises(NoSuchTable):
        shared_lake.read_table(name)
    with pytest.raises(NoSuchTable):
        shared_lake.commit({name: pa.table({"x": [1]})})
    # Nothing was created next to the lake's tables.
    assert sorted(p.name for p in (Path(shared_lake.uri) / "tables").iterdir()) == sorted(
        shared_lake.table_names()
    )


def test_known_tables_read(shared_lake: tl.Lake) -> None:
    assert shared_lake.read_table("trajectories").num_rows == 2
    assert shared_lake.read_table("messages", columns=["role"]).column_names == ["role"]
    assert shared_lake.table_files("calls") == []
    assert all(f.endswith(".parquet") for f in shared_lake.table_files("messages"))


WRITING_SQL = [
    "INSERT INTO trajectories SELECT * FROM trajectories",
    "DELETE FROM trajectories",
    "UPDATE trajectories SET reward = 0",
    "CREATE TABLE x AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "DROP VIEW trajectories",
    "ALTER VIEW trajectories RENAME TO t2",
    "COPY trajectories TO '{root}/out.csv'",
    "COPY (SELECT 1) TO '{root}/out.parquet' (FORMAT parquet)",
    "EXPORT DATABASE '{root}/export'",
    "ATTACH '{root}/x.duckdb' AS x",
    "DETACH memory",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET allowed_directories = ['/']",
    "RESET enable_external_access",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "CHECKPOINT",
    "SELECT 1; DROP VIEW trajectories",
    "SELECT 1; SET enable_external_access = true",
]


@pytest.mark.parametrize("sql", WRITING_SQL)
def test_statements_that_write_are_refused(shared_lake: tl.Lake, sql: str) -> None:
    root = shared_lake.uri
    listing = sorted(str(p) for p in Path(root).rglob("*"))
    with pytest.raises(ReadOnlyQuery):
        shared_lake.sql(sql.format(root=root))
    with shared_lake.query() as session, pytest.raises(ReadOnlyQuery):
        session.relation(sql.format(root=root))
    assert sorted(str(p) for p in Path(root).rglob("*")) == listing
    assert shared_lake.sql("select count(*) from trajectories").rows() == [(2,)]


def test_explain_analyze_cannot_write(small_lake: tl.Lake) -> None:
    small_lake.tag("real")
    root = small_lake.uri
    forged = (
        "EXPLAIN ANALYZE COPY (SELECT 'forged' AS name, 0 AS snapshot_id, '' AS note, "
        f"'x' AS created_at) TO '{root}/_trajlake/tags/forged.json'"
    )
    with pytest.raises(ReadOnlyQuery):
        small_lake.sql(forged)
    assert not (Path(root) / "_trajlake" / "tags" / "forged.json").exists()
    assert [t.name for t in small_lake.tags()] == ["real"]


def test_plain_explain_is_allowed(shared_lake: tl.Lake) -> None:
    plan = shared_lake.sql("EXPLAIN SELECT count(*) FROM trajectories").to_dicts()
    assert plan and "explain_value" in plan[0]


def test_reads_outside_the_lake_fail(shared_lake: tl.Lake, tmp_path: Path) -> None:
    root = Path(shared_lake.uri)
    # A sibling whose name starts with the lake's: a prefix check without '/' would allow it.
    sibling = Path(f"{root}-secret")
    sibling.mkdir()
    (sibling / "secret.csv").write_text("password\nhunter2\n")
    (tmp_path / "outside.csv").write_text("a\n1\n")
    queries = [
        "SELECT * FROM read_parquet('/etc/passwd')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_blob('/etc/hostname')",
        "SELECT * FROM '/etc/passwd'",
        f"SELECT * FROM read_text('{root}/../../../../etc/passwd')",
        f"SELECT * FROM read_csv('{sibling}/secret.csv')",
        f"SELECT * FROM read_csv('{tmp_path}/outside.csv')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
        "SELECT * FROM read_parquet('s3://bucket/x.parquet')",
    ]
    for sql in queries:
        with pytest.raises(TrajlakeError):
            shared_lake.sql(sql)
    # Reading the lake's own files is what views do, and still works afterwards.
    assert shared_lake.sql("select count(*) from messages").rows() == [(12,)]


STRAY_FILES = {
    "_trajlake/tags/x.json": "tag",
    "_trajlake/log/00000000000000000002.json": "snapshot log entry",
    "tables/trajectories/_delta_log/00000000000000000000.json": "Delta log",
}


@pytest.mark.parametrize("where", sorted(STRAY_FILES))
def test_a_stray_file_in_the_metadata_is_named(small_lake: tl.Lake, where: str) -> None:
    """A file another program wrote into the lake's metadata (here: canonical JSONL) makes
    `validate` report it by path, and other commands fail with an error naming it."""
    root = Path(small_lake.uri)
    stray = root / where
    stray.parent.mkdir(exist_ok=True)
    stray.write_text("".join(json.dumps({"trajectory_id": f"t{i}"}) + "\n" for i in range(2)))
    lake = tl.open_lake(root)
    report = lake.validate()
    assert not report.ok
    assert any(str(stray) in problem for problem in report.problems), report.problems
    assert STRAY_FILES[where] in " ".join(report.problems)
    with pytest.raises(LakeCorrupt, match=re.escape(str(stray))):
        lake.tags() if "tags" in where else lake.sql("select count(*) from trajectories")
