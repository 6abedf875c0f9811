"""Derive Arrow schemas from the pydantic record types, so field lists exist exactly once.

`schema.py` declares each record as a pydantic model; each field's Arrow type follows from its
annotation here, with two markers for what an annotation cannot say (`JsonColumn`, `BinaryColumn`).
`dump_json` is the one serialiser of JSON columns: compact and deterministic, and on the ingest hot
path, hence orjson with a fall-back to `json` wherever the two would write different text.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import orjson
import pyarrow as pa
from pydantic import BaseModel


@dataclass(frozen=True)
class JsonColumn:
    """Marks a field that is an object in records but a JSON string in Arrow/Parquet.

    JSON strings keep vendor fields of any shape queryable with DuckDB's `json_extract*`
    without making the table schema follow every harness's fields.
    """


@dataclass(frozen=True)
class BinaryColumn:
    """Marks a `bytes` field stored as Arrow binary (quarantined raw input)."""


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _metadata(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    if get_origin(annotation) is typing.Annotated:
        base, *meta = get_args(annotation)
        return base, tuple(meta)
    return annotation, ()


def _markers(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """The annotation without Optional/Annotated wrappers, and the Annotated metadata found."""
    annotation, meta = _metadata(annotation)
    annotation, _ = _strip_optional(annotation)
    annotation, more = _metadata(annotation)
    return annotation, meta + more


def arrow_type(annotation: Any) -> pa.DataType:
    """Map one annotation of a record field to its Arrow type."""
    annotation, meta = _markers(annotation)
    if any(isinstance(m, JsonColumn) for m in meta):
        return pa.string()
    if any(isinstance(m, BinaryColumn) for m in meta):
        return pa.binary()
    origin = get_origin(annotation)
    if origin is Literal:
        return pa.string()
    if origin is list:
        (item,) = get_args(annotation)
        return pa.list_(arrow_type(item))
    if origin is dict:
        key, value = get_args(annotation)
        return pa.map_(arrow_type(key), arrow_type(value))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return pa.struct(arrow_fields(annotation))
    scalar = {
        str: pa.string(),
        int: pa.int64(),
        float: pa.float64(),
        bool: pa.bool_(),
        bytes: pa.binary(),
        dt.datetime: pa.timestamp("us", tz="UTC"),
    }
    if annotation in scalar:
        return scalar[annotation]
    raise TypeError(f"no Arrow mapping for annotation {annotation!r}")


def _nullable(annotation: Any, default_is_none: bool) -> bool:
    base, _ = _metadata(annotation)
    _, optional = _strip_optional(base)
    return optional or default_is_none


def arrow_fields(model: type[BaseModel]) -> list[pa.Field]:
    """Arrow fields for every field of a pydantic model, in declaration order."""
    fields = []
    for name, info in model.model_fields.items():
        annotation = info.rebuild_annotation()
        nullable = _nullable(annotation, info.default is None)
        fields.append(pa.field(name, arrow_type(annotation), nullable=nullable))
    return fields


def arrow_schema(model: type[BaseModel]) -> pa.Schema:
    """The Arrow schema of a record type."""
    return pa.schema(arrow_fields(model))


def json_fields(model: type[BaseModel]) -> frozenset[str]:
    """Names of the top-level fields stored as JSON strings."""
    names = set()
    for name, info in model.model_fields.items():
        _, meta = _markers(info.rebuild_annotation())
        if any(isinstance(m, JsonColumn) for m in meta):
            names.add(name)
    return frozenset(names)


# What `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` builds on every call,
# built once: JSON columns are serialised per row on the ingest path.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


# A digit before `.`/`e`: possibly a float, where orjson's number format differs from
# `json`'s (`1e-05`); such values (and any orjson refuses) take the `json` encoder.
_FLOAT_LIKE = re.compile(rb"[0-9][.eE]")
# Types `json` refuses are refused here too (subclasses, dataclasses, datetimes).
_PASSTHROUGH = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def dump_json(value: Any) -> str | None:
    """Serialise a JSON-column value compactly and deterministically (key order is kept)."""
    if value is None:
        return None
    # orjson writes exactly what `_COMPACT` writes for strings, integers, lists and dicts
    # with string keys, several times faster (tool schemas and attrs of every trajectory).
    try:
        fast = orjson.dumps(value, option=_PASSTHROUGH)
    except TypeError:  # non-string keys, integers past 64 bits, lone surrogates, other types
        return _COMPACT.encode(value)
    if _FLOAT_LIKE.search(fast):
        return _COMPACT.encode(value)
    return fast.decode()
