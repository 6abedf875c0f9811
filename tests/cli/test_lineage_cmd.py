"""`trajlake lineage`: generation 0 → its snapshot and tag → a model → generation 1's rollouts."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.lineage_cmd import lineage_cmd
from trajlake.lineage import format_lineage, lineage
from trajlake.records import records_to_table, rows_for_table
from trajlake.schema import ModelRecord
from trajlake.synth import SynthConfig, generate

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)


def _rollouts(seed: int, generation: int | None, **attrs: Any) -> list[dict[str, Any]]:
    rows = generate(SynthConfig(seed=seed, n_tasks=3, rollouts_per_task=2)).trajectories
    for row in rows:
        row["generation"] = generation
        row["attrs"] = {**(row.get("attrs") or {}), **attrs}
    return rows


def _register(lake: tl.Lake, *models: ModelRecord) -> None:
    lake.commit({"models": records_to_table("models", list(models))}, operation="register")


@pytest.fixture(scope="module")
def lake_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """s1: generation 0 (tag gen-0); s2: a credit run on s1; s3: two models; s4: generation 1
    selected with model vm-1 (tag gen-1)."""
    uri = str(tmp_path_factory.mktemp("lineage") / "lake")
    lake = tl.open_lake(uri, create=True)
    lake.write(_rollouts(1, 0))
    lake.tag("gen-0")
    credit = {"run_name": "rise", "trajectory_id": "x", "turn": 0, "estimator": "outcome"}
    lake.commit({"credits": rows_for_table("credits", [{**credit, "source_snapshot": 1}])})
    _register(
        lake,
        ModelRecord(
            model_id="vm-1", kind="value", training_snapshot=1, training_tag="gen-0", created_at=NOW
        ),
        ModelRecord(model_id="vm-2", kind="value", training_snapshot=2, parent_model_id="vm-1"),
    )
    lake.write(_rollouts(2, 1, lineage={"value_model_id": "vm-1"}))
    lake.tag("gen-1")
    return uri


def _invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(lineage_cmd, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


CHAIN = [
    ("generation:0", "snapshot:1", "added in"),
    ("snapshot:1", "tag:gen-0", "tagged"),
    ("tag:gen-0", "model:vm-1", "trained"),
    ("model:vm-1", "rollouts:vm-1:1", "used by (lineage.value_model_id)"),
    ("rollouts:vm-1:1", "generation:1", "part of"),
]


def test_json_has_the_chain(lake_uri: str) -> None:
    doc = json.loads(_invoke("--lake", lake_uri, "--output", "json"))
    assert doc["snapshot_id"] == 4
    edges = {(e["source"], e["target"], e["label"]) for e in doc["edges"]}
    assert set(CHAIN) <= edges
    nodes = {n["id"]: n for n in doc["nodes"]}
    assert nodes["generation:0"]["attrs"] == {
        "trajectories": 6,
        "first_snapshot": 1,
        "added": {"1": 6},
    }
    assert nodes["generation:1"]["attrs"]["first_snapshot"] == 4
    assert nodes["rollouts:vm-1:1"]["attrs"] == {
        "trajectories": 6,
        "via": ["lineage.value_model_id"],
    }
    # the credit run and the untagged training snapshot hang off generation 0's snapshots
    assert ("snapshot:1", "credit-run:rise", "credit run") in edges
    assert ("generation:0", "snapshot:2", "newest in") in edges
    assert ("snapshot:2", "model:vm-2", "trained") in edges
    assert ("model:vm-1", "model:vm-2", "continued as") in edges
    assert "snapshot:3" not in nodes  # registering models adds no data worth a node
    assert ("generation:1", "snapshot:4", "added in") in edges
    assert ("snapshot:4", "tag:gen-1", "tagged") in edges


def test_text_is_a_tree_per_generation(lake_uri: str) -> None:
    lines = _invoke("--lake", lake_uri).splitlines()
    assert lines[0] == "lineage at snapshot 4"
    start = lines.index("generation 0: 6 trajectories")
    chain = [
        "  added in: snapshot 1 (",
        "    tagged: tag gen-0",
        "      trained: model vm-1 (value)",
        "        used by (lineage.value_model_id): 6 rollouts of generation 1",
        "          part of: generation 1 (see its tree)",
    ]
    position = start
    for expected in chain:
        found = [i for i, line in enumerate(lines) if i > position and line.startswith(expected)]
        assert found, (expected, lines)
        position = found[0]
    gen1 = lines.index("generation 1: 6 trajectories")
    assert gen1 > position
    assert lines[gen1 + 1].startswith("  added in: snapshot 4 (")
    assert lines[gen1 + 2] == "    tagged: tag gen-1"


def test_dot_is_a_digraph_with_the_chain(lake_uri: str) -> None:
    text = _invoke("--lake", lake_uri, "-o", "dot")
    assert text.startswith("digraph lineage {") and text.rstrip().endswith("}")
    edges = set(re.findall(r'"([^"]+)" -> "([^"]+)" \[label="([^"]+)"\];', text))
    assert set(CHAIN) <= edges
    assert '"model:vm-1" [label="model vm-1 (value)", shape=box3d];' in text


def test_at_an_older_snapshot(lake_uri: str) -> None:
    doc = json.loads(_invoke("--lake", lake_uri, "--at", "gen-0", "-o", "json"))
    assert doc["snapshot_id"] == 1
    assert {n["id"] for n in doc["nodes"]} == {"generation:0", "snapshot:1", "tag:gen-0"}


def test_run_mode_and_policy_model_names(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    first = _rollouts(1, None)
    lake.write(first)
    _register(lake, ModelRecord(model_id="pol-2", name="policy-v2", kind="policy"))
    second = _rollouts(2, None)
    for row in second:
        row["policy_model"], row["run_id"] = "policy-v2", "run-b"
    lake.write(second)
    graph = lineage(lake)
    run_a = f"generation:?:{first[0]['run_id']}"
    assert graph.node(run_a).label == f"generation ? (run {first[0]['run_id']})"
    assert graph.node("generation:?:run-b").attrs["first_snapshot"] == 3
    assert [(e.label, n.id) for e, n in graph.children("model:pol-2")] == [
        ("used by (policy_model)", "rollouts:pol-2:run-b")
    ]
    assert [n.id for _, n in graph.children("rollouts:pol-2:run-b")] == ["generation:?:run-b"]
    assert "not linked to a generation:" in format_lineage(graph)


def test_empty_lake_and_bad_arguments(tmp_path: Path) -> None:
    uri = str(tmp_path / "empty")
    tl.open_lake(uri, create=True)
    assert _invoke("--lake", uri).splitlines() == [
        "lineage at snapshot 0",
        "(no trajectories, models or tags yet)",
    ]
    assert json.loads(_invoke("--lake", uri, "-o", "json")) == {
        "snapshot_id": 0,
        "nodes": [],
        "edges": [],
    }
    assert "Invalid value" in _invoke("--lake", uri, "-o", "yaml", code=2)
    graph = lineage(tl.open_lake(uri))
    with pytest.raises(ValueError, match="output"):
        format_lineage(graph, "yaml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no node"):
        graph.node("model:nope")
