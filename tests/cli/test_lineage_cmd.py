"""`trajlake lineage`: generation 0 → its snapshot and tag → a credit run → an SFT export → a
model → generation 1's rollouts."""

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
from trajlake.credit import run_credit
from trajlake.export.sft import export_sft
from trajlake.lineage import format_lineage, lineage
from trajlake.records import records_to_table
from trajlake.schema import ModelRecord
from trajlake.synth import SynthConfig, generate

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


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
    """s1: generation 0 (tag gen-0); s2: credit run "all" on s1; s3: an SFT export of that run
    (read at s2); s4: models vm-1 (on gen-0), vm-2 (on s2) and pol-1 (on the export); s5:
    generation 1, acted by pol-1 and selected with vm-1 (tag gen-1)."""
    root = tmp_path_factory.mktemp("lineage")
    uri = str(root / "lake")
    lake = tl.open_lake(uri, create=True)
    lake.write(_rollouts(1, 0))
    lake.tag("gen-0")
    run_credit(lake, estimator="outcome", mask="all", name="all")
    export_id = export_sft(lake, str(root / "sft"), format="trl", credit="all").export_id
    _register(
        lake,
        ModelRecord(
            model_id="vm-1", kind="value", training_snapshot=1, training_tag="gen-0", created_at=NOW
        ),
        ModelRecord(model_id="vm-2", kind="value", training_snapshot=2, parent_model_id="vm-1"),
        ModelRecord(
            model_id="pol-1", kind="policy", training_snapshot=2, config={"export_id": export_id}
        ),
    )
    second = _rollouts(2, 1, lineage={"value_model_id": "vm-1"})
    for row in second:
        row["policy_model"] = "pol-1"
    lake.write(second)
    lake.tag("gen-1")
    return uri


def _export_node(uri: str) -> str:
    (export_id,) = tl.open_lake(uri).sql("SELECT export_id FROM exports").rows()[0]
    return f"export:{export_id}"


def _invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(lineage_cmd, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def _chain(export: str) -> list[tuple[str, str, str]]:
    """generation 0 → tag gen-0 → credit run → export → policy model → generation 1."""
    return [
        ("generation:0", "snapshot:1", "added in"),
        ("snapshot:1", "tag:gen-0", "tagged"),
        ("tag:gen-0", "credit-run:all", "credit run"),
        ("credit-run:all", export, "exported"),
        (export, "model:pol-1", "trained"),
        ("model:pol-1", "rollouts:pol-1:1", "used by (policy_model)"),
        ("rollouts:pol-1:1", "generation:1", "part of"),
    ]


VALUE_CHAIN = [
    ("tag:gen-0", "model:vm-1", "trained"),
    ("model:vm-1", "rollouts:vm-1:1", "used by (lineage.value_model_id)"),
    ("rollouts:vm-1:1", "generation:1", "part of"),
]


def test_json_has_the_chain(lake_uri: str) -> None:
    export = _export_node(lake_uri)
    doc = json.loads(_invoke("--lake", lake_uri, "--output", "json"))
    assert doc["snapshot_id"] == 5
    edges = {(e["source"], e["target"], e["label"]) for e in doc["edges"]}
    assert {*_chain(export), *VALUE_CHAIN} <= edges
    nodes = {n["id"]: n for n in doc["nodes"]}
    assert nodes["generation:0"]["attrs"] == {
        "trajectories": 6,
        "first_snapshot": 1,
        "added": {"1": 6},
    }
    assert nodes["generation:1"]["attrs"]["first_snapshot"] == 5
    assert nodes["rollouts:vm-1:1"]["attrs"] == {
        "trajectories": 6,
        "via": ["lineage.value_model_id"],
    }
    assert nodes["credit-run:all"]["attrs"]["source_snapshot"] == 1
    attrs = nodes[export]["attrs"]
    assert {k: attrs[k] for k in ("format", "source_snapshot", "credit_run", "mask")} == {
        "format": "trl",
        "source_snapshot": 2,  # exported at the head, which held the run
        "credit_run": "all",
        "mask": "all",
    }
    assert attrs["counts"]["train"]["trajectories"] == 6
    assert nodes[export]["label"] == f"{export.replace(':', ' ')} (trl, 6 samples)"
    # a tagged snapshot's credit runs hang under the tag, not beside it
    assert ("snapshot:1", "credit-run:all", "credit run") not in edges
    assert ("generation:0", "snapshot:2", "newest in") in edges
    assert ("snapshot:2", "model:vm-2", "trained") in edges
    assert ("snapshot:2", "model:pol-1", "trained") in edges
    assert ("model:vm-1", "model:vm-2", "continued as") in edges
    # exporting and registering models add no data worth a node
    assert "snapshot:3" not in nodes and "snapshot:4" not in nodes
    assert ("generation:1", "snapshot:5", "added in") in edges
    assert ("snapshot:5", "tag:gen-1", "tagged") in edges


def test_text_is_a_tree_per_generation(lake_uri: str) -> None:
    export_label = _export_node(lake_uri).replace(":", " ")
    lines = _invoke("--lake", lake_uri).splitlines()
    assert lines[0] == "lineage at snapshot 5"
    start = lines.index("generation 0: 6 trajectories")
    chain = [
        "  added in: snapshot 1 (",
        "    tagged: tag gen-0",
        "      credit run: credit run all (outcome, 6 traj.)",
        f"        exported: {export_label} (trl, 6 samples)",
        "          trained: model pol-1 (policy)",
        "            used by (policy_model): 6 rollouts of generation 1",
        "              part of: generation 1 (see its tree)",
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
    assert lines[gen1 + 1].startswith("  added in: snapshot 5 (")
    assert lines[gen1 + 2] == "    tagged: tag gen-1"


def test_dot_is_a_digraph_with_the_chain(lake_uri: str) -> None:
    export = _export_node(lake_uri)
    text = _invoke("--lake", lake_uri, "-o", "dot")
    assert text.startswith("digraph lineage {") and text.rstrip().endswith("}")
    edges = set(re.findall(r'"([^"]+)" -> "([^"]+)" \[label="([^"]+)"\];', text))
    assert {*_chain(export), *VALUE_CHAIN} <= edges
    assert '"model:vm-1" [label="model vm-1 (value)", shape=box3d];' in text
    assert f'"{export}" [label=' in text and "shape=cylinder];" in text


def test_at_older_snapshots(lake_uri: str) -> None:
    doc = json.loads(_invoke("--lake", lake_uri, "--at", "gen-0", "-o", "json"))
    assert doc["snapshot_id"] == 1
    assert {n["id"] for n in doc["nodes"]} == {"generation:0", "snapshot:1", "tag:gen-0"}
    # before the export: the credit run, and nothing exported yet
    graph = lineage(tl.open_lake(lake_uri), at=2)
    assert {n.kind for n in graph.nodes} == {"generation", "snapshot", "tag", "credit-run"}
    kinds = {n.kind for n in lineage(tl.open_lake(lake_uri), at=3).nodes}
    assert "export" in kinds and "model" not in kinds


def test_exports_table_holds_the_manifest_counts(lake_uri: str) -> None:
    row = tl.open_lake(lake_uri).sql("SELECT * FROM exports").to_dicts()[0]
    manifest = json.loads(Path(row["uri"], "manifest.json").read_text())
    assert json.loads(row["manifest"]) == manifest
    assert json.loads(row["counts"]) == {
        split: {k: v for k, v in counts.items() if k != "files"}
        for split, counts in manifest["splits"].items()
    }
    assert json.loads(row["counts"])["train"]["samples"] == 6


def test_export_without_credit_hangs_under_its_tag(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(_rollouts(1, 0))
    lake.tag("gen-0")
    export_id = export_sft(lake, str(tmp_path / "sft"), format="openai", at="gen-0").export_id
    graph = lineage(lake)
    assert [(e.label, n.id) for e, n in graph.children("tag:gen-0")] == [
        ("exported", f"export:{export_id}")
    ]
    assert graph.node(f"export:{export_id}").attrs["mask"] == "all"
    # an untagged source snapshot holds it instead
    lake.write(_rollouts(2, 1))
    export_id = export_sft(lake, str(tmp_path / "sft2"), format="openai").export_id
    parents = [e.source for e in lineage(lake).edges if e.target == f"export:{export_id}"]
    assert parents == ["snapshot:3"]


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
