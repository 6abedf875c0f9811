"""The record types, their Arrow schemas and the checked-in JSON Schema agree."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from trajlake.records import rows_for_table, table_to_rows
from trajlake.schema import (
    RECORD_TYPES,
    SCHEMA_VERSION,
    TABLES,
    CanonicalTrajectory,
    json_columns,
    render_schema_files,
    table_schema,
)

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


def test_checked_in_json_schema_is_current() -> None:
    expected = render_schema_files()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.json")}
    stale = sorted(n for n in expected if on_disk.get(n) != expected[n])
    extra = sorted(set(on_disk) - set(expected))
    assert not stale and not extra, (
        f"schemas/ is stale ({stale}, extra {extra}); regenerate with: python -c "
        "\"from trajlake.schema import write_schema_files; write_schema_files('schemas')\""
    )


def test_every_table_has_a_schema_with_version() -> None:
    assert set(TABLES) == {
        "trajectories",
        "messages",
        "calls",
        "labels",
        "credits",
        "scores",
        "models",
        "quarantine",
        "exports",
    }
    for table in TABLES:
        schema = table_schema(table)
        assert schema.metadata[b"trajlake.schema_version"] == str(SCHEMA_VERSION).encode()
        assert schema.names == list(RECORD_TYPES[table].model_fields)


def test_arrow_types_of_key_fields() -> None:
    messages = table_schema("messages")
    tool_call = messages.field("tool_calls").type.value_type
    assert [f.name for f in tool_call] == ["id", "name", "arguments", "type"]
    assert messages.field("token_ids").type == pa.list_(pa.int64())
    assert messages.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert not messages.field("idx").nullable
    trajectories = table_schema("trajectories")
    assert trajectories.field("rewards").type == pa.map_(pa.string(), pa.float64())
    assert trajectories.field("resolved").nullable
    assert trajectories.field("attrs").type == pa.string()  # JSON text, queryable in SQL
    assert json_columns("trajectories") == {"tools", "attrs"}
    assert table_schema("quarantine").field("raw").type == pa.binary()


def test_rows_round_trip_through_arrow() -> None:
    row = {
        "trajectory_id": "t1",
        "rewards": {"pass@1": 1.0, "lint": 0.5},
        "tools": [{"type": "function", "function": {"name": "bash"}}],
        "attrs": {"rollout_id": "r-9", "nested": {"a": [1, 2]}},
        "resolved": None,
    }
    data = rows_for_table("trajectories", [row])
    back = table_to_rows("trajectories", data)[0]
    assert back["rewards"] == row["rewards"]
    assert back["tools"] == row["tools"]
    assert back["attrs"] == row["attrs"]
    assert back["resolved"] is None
    assert back["schema_version"] == SCHEMA_VERSION


def test_canonical_line_may_omit_implied_ids() -> None:
    record = CanonicalTrajectory.model_validate(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    )
    assert [m.idx for m in record.messages] == [0, 1]
    canonical = json.loads(render_schema_files()["canonical.json"])
    assert "trajectory_id" not in canonical["required"]


def test_unknown_fields_and_bad_roles_are_rejected() -> None:
    with pytest.raises(ValidationError, match="role"):
        CanonicalTrajectory.model_validate({"trajectory_id": "x", "messages": [{"role": "robot"}]})
    with pytest.raises(ValidationError, match="colour"):
        CanonicalTrajectory.model_validate({"trajectory_id": "x", "colour": "red"})
