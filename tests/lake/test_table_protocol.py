"""The lake's own commit writer checks each table's Delta protocol before it commits: tables that
another Delta writer (here delta-rs itself) gave a feature the writer does not implement are
refused with the table and the feature named, before anything is written; plain lakes append,
update and compact as before."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

import trajlake as tl
from trajlake.errors import UnsupportedTableFeature
from trajlake.lake._delta_commit import commit_actions
from trajlake.lake._delta_protocol import TableProtocol, check_protocol
from trajlake.sample import sample_trajectories, sample_trajectory
from trajlake.schema import TABLES, table_schema


def _table(lake: tl.Lake, name: str) -> DeltaTable:
    return DeltaTable(str(Path(lake.uri) / "tables" / name))


def _shortened(record: dict[str, Any], n: int) -> dict[str, Any]:
    out = copy.deepcopy(record)
    out["messages"] = out["messages"][:n]
    return out


def _refused(feature: str, table: str = "messages") -> Any:
    return pytest.raises(
        UnsupportedTableFeature,
        match=rf"table '{table}' uses the Delta table feature '{feature}': .*Nothing was committed",
    )


def test_a_plain_lake_appends_updates_and_compacts(lake: tl.Lake) -> None:
    record = sample_trajectory(0)
    lake.write([_shortened(record, 3)])
    assert lake.write([record]).updated["trajectories"] == 1  # rows taken out and rewritten
    for i in range(3):
        lake.write(list(sample_trajectories(2, start=10 + 2 * i)))
    report = lake.maintain()
    assert report.tables["messages"].compacted
    assert lake.sql("SELECT count(*) FROM trajectories").rows() == [(7,)]
    for name in TABLES:  # created by delta-rs as protocol (1, 2): nothing the writer lacks
        protocol = TableProtocol.of(_table(lake, name))
        assert (protocol.reader_version, protocol.writer_version) == (1, 2)
        check_protocol(name, protocol, removes_data=True)


def test_deletion_vectors_added_by_another_writer_are_refused_before_writing(
    lake: tl.Lake,
) -> None:
    lake.write(list(sample_trajectories(2)))
    before = (len(lake.snapshots()), _table(lake, "trajectories").version())
    _table(lake, "messages").alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    for _ in range(2):  # refused again, the same way: nothing was left half-done
        with _refused("deletionVectors"):
            lake.write(list(sample_trajectories(2, start=2)))
    assert (len(lake.snapshots()), _table(lake, "trajectories").version()) == before
    assert lake.sql("SELECT count(*) FROM trajectories").rows() == [(2,)]


def test_a_table_created_by_deltalake_with_deletion_vectors_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    write_deltalake(
        str(root / "tables" / "trajectories"),
        table_schema("trajectories").empty_table(),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    lake = tl.open_lake(root, create=True)  # the lake adopts the existing table
    with _refused("deletionVectors", table="trajectories"):
        lake.write(list(sample_trajectories(1)))


@pytest.mark.parametrize(
    ("feature", "change", "why"),
    [
        (
            "rowTracking",
            lambda t: t.alter.add_feature(
                TableFeatures.RowTracking, allow_protocol_versions_increase=True
            ),
            "does not implement it",
        ),
        (
            "checkConstraints",
            lambda t: t.alter.add_constraint({"positive_idx": "idx >= 0"}),
            r"CHECK constraints \(positive_idx\)",
        ),
    ],
)
def test_other_features_the_writer_lacks_are_named(
    lake: tl.Lake, feature: str, change: Any, why: str
) -> None:
    lake.write(list(sample_trajectories(1)))
    change(_table(lake, "messages"))
    with pytest.raises(UnsupportedTableFeature, match=rf"'{feature}': .*{why}"):
        lake.write(list(sample_trajectories(1, start=1)))


def test_an_append_only_table_takes_appends_but_refuses_updates(lake: tl.Lake) -> None:
    record = sample_trajectory(0)
    lake.write([_shortened(record, 3)])
    _table(lake, "messages").alter.set_table_properties({"delta.appendOnly": "true"})
    assert lake.write(list(sample_trajectories(2, start=4))).added["trajectories"] == 2
    with pytest.raises(UnsupportedTableFeature, match=r"'appendOnly': .*takes rows out"):
        lake.write([record])  # an update rewrites the files holding the short version


def test_a_protocol_change_slipped_in_before_the_commit_is_caught(lake: tl.Lake) -> None:
    """The version the writer meant to take was committed by another writer, who upgraded the
    protocol: the stale protocol passed, the commit found in its place does not."""
    lake.write(list(sample_trajectories(1)))
    handle = _table(lake, "messages")
    stale, version = TableProtocol.of(handle), handle.version()
    handle.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    with _refused("deletionVectors"):
        commit_actions(
            lake.location,
            "messages",
            version + 1,
            [],
            operation="WRITE",
            commit_id="test",
            blind_append=True,
            protocol=stale,
        )
    assert _table(lake, "messages").version() == version + 1  # nothing committed after it


def _protocol(reader: int = 1, writer: int = 2, **kw: Any) -> TableProtocol:
    fields = kw.pop("fields", [{"name": "a", "type": "long", "nullable": True, "metadata": {}}])
    base: dict[str, Any] = {
        "reader_features": frozenset(),
        "writer_features": frozenset(),
        "configuration": {},
        "schema": {"type": "struct", "fields": fields},
    }
    return TableProtocol(reader, writer, **{**base, **kw})


def test_legacy_versions_imply_their_features() -> None:
    assert _protocol(1, 2).features() == {"appendOnly", "invariants"}
    assert _protocol(2, 6).features() == {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    }
    check_protocol("t", _protocol(2, 6), removes_data=True)  # all implied, none in use
    mapped = _protocol(2, 5, configuration={"delta.columnMapping.mode": "name"})
    with pytest.raises(UnsupportedTableFeature, match=r"'columnMapping': column mapping is on"):
        check_protocol("t", mapped, removes_data=False)
    feed = _protocol(1, 4, configuration={"delta.enableChangeDataFeed": "true"})
    check_protocol("t", feed, removes_data=False)  # inserts need no change files
    with pytest.raises(UnsupportedTableFeature, match=r"'changeDataFeed': .*change files"):
        check_protocol("t", feed, removes_data=True)


def test_named_features_and_columns_that_use_them() -> None:
    needs_nothing = frozenset({"timestampNtz", "domainMetadata", "vacuumProtocolCheck"})
    check_protocol("t", _protocol(3, 7, reader_features=needs_nothing), removes_data=True)
    with pytest.raises(UnsupportedTableFeature, match=r"'inCommitTimestamp': .*not implement"):
        check_protocol(
            "t", _protocol(1, 7, writer_features={"inCommitTimestamp"}), removes_data=False
        )
    with pytest.raises(UnsupportedTableFeature, match=r"reader 4 / writer 7: it is newer"):
        check_protocol("t", _protocol(4, 7), removes_data=False)
    variant = {"type": "struct", "fields": [{"name": "v", "type": "variant", "metadata": {}}]}
    nested = [{"name": "s", "type": variant, "nullable": True, "metadata": {}}]
    with pytest.raises(UnsupportedTableFeature, match=r"column 's\.v' has the variant type"):
        check_protocol(
            "t", _protocol(3, 7, fields=nested, writer_features={"variantType"}), removes_data=False
        )
    check_protocol("t", _protocol(3, 7, writer_features={"variantType"}), removes_data=False)
    checked = [{"name": "a", "type": "long", "metadata": {"delta.invariants": "{}"}}]
    with pytest.raises(UnsupportedTableFeature, match=r"column 'a' declares an invariant"):
        check_protocol("t", _protocol(1, 2, fields=checked), removes_data=False)


def test_a_foreign_commit_applies_its_protocol_and_metadata() -> None:
    upgraded = _protocol(1, 2).after(
        [
            {"commitInfo": {}},
            {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                          "readerFeatures": ["deletionVectors"],
                          "writerFeatures": ["deletionVectors"]}},
            {"metaData": {"configuration": {"delta.enableDeletionVectors": "true"},
                          "schemaString": "{}"}},
        ]
    )  # fmt: skip
    assert upgraded.features() == {"deletionVectors"}
    assert upgraded.configuration == {"delta.enableDeletionVectors": "true"}
