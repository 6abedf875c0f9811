"""Which Delta table protocols the lake's own commit writer (`_delta_commit`) may write to.

That writer puts plain `add` / `remove` actions and Parquet files with logical column names into a
table's log. A table feature that asks more of a writer makes such a commit wrong without any
error: rows a deletion vector removed come back when compaction rewrites the file, a CHECK
constraint goes unchecked, files lack the physical names column mapping reads. Another Delta
writer (Spark, delta-rs, Databricks) can turn such a feature on in a lake's table at any time,
so the table's protocol and properties are checked before every commit, and a table that needs
more than the writer does is refused, naming the table and the feature.

Features fall in three groups: those that ask nothing of this writer (`NEEDS_NOTHING`); those
harmless while the table does not use them (`invariants` with no invariant declared, column
mapping in mode `none`, ...), `appendOnly` and `changeDataFeed` refusing only commits that take
rows out; and every other feature, including those newer than this code, refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from trajlake.errors import UnsupportedTableFeature

if TYPE_CHECKING:
    from deltalake import DeltaTable

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7
"""The newest protocol versions there are: 3 / 7 list their features by name."""

# What the versions before named features (reader < 3, writer < 7) imply, by the version that
# introduced each.
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}
_LEGACY_READER = {2: ("columnMapping",)}

NEEDS_NOTHING = frozenset({"timestampNtz", "domainMetadata", "vacuumProtocolCheck"})
"""Features this writer honours by what it already does: timestamp columns are written as the
schema types them, domain metadata is preserved (no commit touches it), vacuum is delta-rs's."""


@dataclass(frozen=True)
class TableProtocol:
    """A table's protocol versions, features, properties and schema: what a writer must honour."""

    reader_version: int
    writer_version: int
    reader_features: frozenset[str]
    writer_features: frozenset[str]
    configuration: Mapping[str, str]
    schema: Mapping[str, Any]
    """The Delta schema as JSON (`{"type": "struct", "fields": [...]}`)."""

    @classmethod
    def of(cls, table: DeltaTable) -> TableProtocol:
        """The protocol of an open delta-rs table at its loaded version."""
        protocol, metadata = table.protocol(), table.metadata()
        return cls(
            int(protocol.min_reader_version),
            int(protocol.min_writer_version),
            frozenset(protocol.reader_features or ()),
            frozenset(protocol.writer_features or ()),
            dict(metadata.configuration),
            json.loads(table.schema().to_json()),
        )

    def after(self, actions: Iterable[Mapping[str, Any]]) -> TableProtocol:
        """This protocol once a commit's `protocol` and `metaData` actions apply (both replace
        what was there, as the Delta log defines)."""
        out = self
        for action in actions:
            if isinstance(action.get("protocol"), Mapping):
                p = action["protocol"]
                out = replace(
                    out,
                    reader_version=int(p.get("minReaderVersion", 1)),
                    writer_version=int(p.get("minWriterVersion", 2)),
                    reader_features=frozenset(p.get("readerFeatures") or ()),
                    writer_features=frozenset(p.get("writerFeatures") or ()),
                )
            if isinstance(action.get("metaData"), Mapping):
                m = action["metaData"]
                out = replace(
                    out,
                    configuration=dict(m.get("configuration") or {}),
                    schema=json.loads(m.get("schemaString") or "{}"),
                )
        return out

    def features(self) -> frozenset[str]:
        """The features the table has: those listed (reader 3 / writer 7) or implied."""
        if self.writer_version >= MAX_WRITER_VERSION:
            writer = set(self.writer_features)
        else:
            writer = {f for v, fs in _LEGACY_WRITER.items() if self.writer_version >= v for f in fs}
        if self.reader_version >= MAX_READER_VERSION:
            reader = set(self.reader_features)
        else:
            reader = {f for v, fs in _LEGACY_READER.items() if self.reader_version >= v for f in fs}
        return frozenset(writer | reader)


def check_protocol(table: str, protocol: TableProtocol, *, removes_data: bool) -> None:
    """Refuse a commit to `table` that its protocol asks more of than this writer does.

    `removes_data`: the commit takes rows out (a `remove` with `dataChange`), which append-only
    tables forbid and the change data feed would need change files for.

    Raises:
        UnsupportedTableFeature: naming the table, the feature and why.
    """
    if protocol.reader_version > MAX_READER_VERSION or protocol.writer_version > MAX_WRITER_VERSION:
        _refuse(
            table,
            f"Delta protocol reader {protocol.reader_version} / writer {protocol.writer_version}",
            f"it is newer than {MAX_READER_VERSION} / {MAX_WRITER_VERSION}, the newest this "
            "writer knows",
        )
    for feature in sorted(protocol.features()):
        if feature in NEEDS_NOTHING:
            continue
        why = _WHILE_UNUSED.get(feature, _unimplemented)(protocol, removes_data)
        if why is not None:
            _refuse(table, f"the Delta table feature {feature!r}", why)


def _refuse(table: str, what: str, why: str) -> NoReturn:
    raise UnsupportedTableFeature(
        f"table {table!r} uses {what}: {why}. Nothing was committed. trajlake writes its tables' "
        "commits itself and keeps them plain Delta tables (no deletion vectors, row tracking, "
        "column mapping or constraints); undo the change another Delta writer made to the table, "
        "or copy its rows into a new lake"
    )


# Features harmless while unused ----------------------------------------------------------------


def _fields(schema: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(dotted name, field) of every field of a Delta schema, nested ones included."""
    for field in schema.get("fields") or ():
        name = f"{prefix}{field.get('name')}"
        yield name, field
        yield from _nested(field.get("type"), name + ".")


def _nested(kind: Any, prefix: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(kind, Mapping):
        return
    if kind.get("type") == "struct":
        yield from _fields(kind, prefix)
    for key in ("elementType", "keyType", "valueType"):
        yield from _nested(kind.get(key), prefix)


def _types(kind: Any) -> Iterator[str]:
    """The primitive type names of a field's own values (array elements and map keys and values
    included; a struct's fields are fields of their own, visited by `_fields`)."""
    if isinstance(kind, str):
        yield kind
    elif isinstance(kind, Mapping) and kind.get("type") != "struct":
        for key in ("elementType", "keyType", "valueType"):
            yield from _types(kind.get(key))


def _column_with(protocol: TableProtocol, test: Callable[[Mapping[str, Any]], bool]) -> str | None:
    return next((name for name, field in _fields(protocol.schema) if test(field)), None)


def _metadata_key(prefix: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda field: any(str(k).startswith(prefix) for k in field.get("metadata") or {})


def _enabled(protocol: TableProtocol, key: str) -> bool:
    return str(protocol.configuration.get(key, "false")).lower() == "true"


def _unimplemented(_protocol: TableProtocol, _removes_data: bool) -> str:
    return "trajlake's commit writer does not implement it"


def _append_only(protocol: TableProtocol, removes_data: bool) -> str | None:
    if removes_data and _enabled(protocol, "delta.appendOnly"):
        return "the table is append-only (delta.appendOnly) and this commit takes rows out"
    return None


def _change_data_feed(protocol: TableProtocol, removes_data: bool) -> str | None:
    if removes_data and _enabled(protocol, "delta.enableChangeDataFeed"):
        return (
            "the change data feed is on (delta.enableChangeDataFeed) and this commit takes rows "
            "out, which needs change files the writer does not write"
        )
    return None


def _invariants(protocol: TableProtocol, _removes_data: bool) -> str | None:
    column = _column_with(protocol, _metadata_key("delta.invariants"))
    return (
        f"column {column!r} declares an invariant, which the writer does not check"
        if column
        else None
    )


def _check_constraints(protocol: TableProtocol, _removes_data: bool) -> str | None:
    names = sorted(
        k[len("delta.constraints.") :]
        for k in protocol.configuration
        if k.startswith("delta.constraints.")
    )
    if not names:
        return None
    return f"the table has CHECK constraints ({', '.join(names)}), which the writer does not check"


def _generated_columns(protocol: TableProtocol, _removes_data: bool) -> str | None:
    column = _column_with(protocol, _metadata_key("delta.generationExpression"))
    return f"column {column!r} is generated, which the writer does not compute" if column else None


def _identity_columns(protocol: TableProtocol, _removes_data: bool) -> str | None:
    column = _column_with(protocol, _metadata_key("delta.identity."))
    return (
        f"column {column!r} is an identity column, which the writer does not fill"
        if column
        else None
    )


def _column_mapping(protocol: TableProtocol, _removes_data: bool) -> str | None:
    mode = str(protocol.configuration.get("delta.columnMapping.mode", "none")).lower()
    if mode != "none":
        return (
            f"column mapping is on (mode {mode!r}): data files need physical column names, the "
            "writer writes logical ones"
        )
    return None


def _variant_type(protocol: TableProtocol, _removes_data: bool) -> str | None:
    column = _column_with(protocol, lambda field: "variant" in _types(field.get("type")))
    return (
        f"column {column!r} has the variant type, which the writer does not write"
        if column
        else None
    )


_WHILE_UNUSED: dict[str, Callable[[TableProtocol, bool], str | None]] = {
    "appendOnly": _append_only,
    "changeDataFeed": _change_data_feed,
    "invariants": _invariants,
    "checkConstraints": _check_constraints,
    "generatedColumns": _generated_columns,
    "identityColumns": _identity_columns,
    "columnMapping": _column_mapping,
    "variantType": _variant_type,
    "variantType-preview": _variant_type,
}
"""Feature → why a commit cannot honour it now (None: the table does not use it)."""
