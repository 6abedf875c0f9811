"""Generation lineage of a lake: the snapshots and tags where each generation's trajectories
arrived, the credit runs, SFT exports and models computed on them, and the later rollouts that
used a model.

Conventions: a harness records that a rollout was produced by a model by setting the trajectory's
`policy_model` to the model's `name` or `model_id`, or `attrs.lineage.policy_model_id` to its id;
and that it was selected (reranked, filtered) with a value model by `attrs.lineage.value_model_id`.
A model trained on an SFT export says so with `config.export_id` in its `models` row.

Nothing is stored: the graph is computed from the tables and the snapshot log each time it is
read, so it always matches the snapshot it is read at and needs no upkeep when harnesses, credit
or training add rows. It reads the log and tags through the store and the tables through SQL.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trajlake.errors import NoSuchSnapshot
from trajlake.query import sql

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef
    from trajlake.lake._log import Snapshot

log = logging.getLogger(__name__)

NodeKind = Literal["generation", "snapshot", "tag", "credit-run", "export", "model", "rollouts"]
LineageFormat = Literal["text", "json", "dot"]
GenKey = int | str | None
"""A generation number; in run mode (no trajectory has a generation) a run id."""


@dataclass(frozen=True)
class Node:
    """One node of the lineage graph; `id` is `<kind>:<key>`."""

    id: str
    kind: NodeKind
    label: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Edge:
    """A directed, labelled edge between two node ids."""

    source: str
    target: str
    label: str


@dataclass(frozen=True)
class Lineage:
    """The lineage graph of a lake read at one snapshot."""

    snapshot_id: int
    nodes: list[Node]
    edges: list[Edge]

    def node(self, node_id: str) -> Node:
        """The node with this id (ValueError when absent)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ValueError(f"no node {node_id!r} in this lineage")

    def children(self, node_id: str) -> list[tuple[Edge, Node]]:
        """Outgoing edges of a node with their targets, in insertion order."""
        return [(e, self.node(e.target)) for e in self.edges if e.source == node_id]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: snapshot_id, nodes and edges."""
        return {
            "snapshot_id": self.snapshot_id,
            "nodes": [asdict(n) for n in self.nodes],
            "edges": [asdict(e) for e in self.edges],
        }


class _Graph:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []

    def add(self, kind: NodeKind, key: object, label: str, /, **attrs: Any) -> str:
        node_id = f"{kind}:{key}"
        self.nodes.setdefault(node_id, Node(node_id, kind, label, attrs))
        return node_id

    def link(self, source: str, target: str, label: str) -> None:
        edge = Edge(source, target, label)
        if edge not in self.edges:
            self.edges.append(edge)


# --------------------------------------------------------------------------- reading the lake


def _gen_label(key: GenKey, run_mode: bool) -> str:
    if not run_mode:
        return f"generation {key}"
    return f"generation ? (run {key})" if key is not None else "generation ? (no run id)"


def _gen_id(key: GenKey, run_mode: bool) -> str:
    return f"generation:?:{key}" if run_mode else f"generation:{key}"


def _counts(lake: LakeStore, snapshot_id: int, run_mode: bool) -> dict[GenKey, int]:
    # Only one of two fixed column names is formatted into the query, never a value.
    column = "run_id" if run_mode else "generation"
    where = "" if run_mode else "WHERE generation IS NOT NULL"
    query = f"SELECT {column} AS g, count(*) AS n FROM trajectories {where} GROUP BY 1"
    return {g: int(n) for g, n in sql(lake, query, at=snapshot_id).rows()}


def _additions(
    lake: LakeStore, head: Snapshot, run_mode: bool
) -> dict[GenKey, list[tuple[int, int]]]:
    """Per generation, the snapshots (up to `head`) where its trajectory count grew, and by how
    much: one count query per distinct version of the trajectories table."""
    added: dict[GenKey, list[tuple[int, int]]] = defaultdict(list)
    before: dict[GenKey, int] = {}
    version: int | None = None
    for snap in lake.snapshots():
        if snap.snapshot_id > head.snapshot_id:
            break
        if snap.tables.get("trajectories") == version:
            continue
        version = snap.tables.get("trajectories")
        try:
            now = _counts(lake, snap.snapshot_id, run_mode)
        except NoSuchSnapshot:  # expired by maintenance: its additions show up later
            log.debug("snapshot %d is no longer readable; skipped", snap.snapshot_id)
            continue
        for key, n in now.items():
            if n > before.get(key, 0):
                added[key].append((snap.snapshot_id, n - before.get(key, 0)))
        before = now
    return dict(added)


def _add_generations(
    graph: _Graph, lake: LakeStore, head: Snapshot, run_mode: bool
) -> dict[int, list[str]]:
    """Generation nodes and their `added in` edges; returns generation ids per snapshot id."""
    totals = _counts(lake, head.snapshot_id, run_mode)
    additions = _additions(lake, head, run_mode)
    order = sorted(totals, key=lambda k: (additions.get(k, [(0, 0)])[0][0], str(k)))
    by_snapshot: dict[int, list[str]] = defaultdict(list)
    for key in order:
        first = additions.get(key, [(None, 0)])[0][0]
        gen = graph.add(
            "generation",
            f"?:{key}" if run_mode else key,
            _gen_label(key, run_mode),
            trajectories=totals[key],
            first_snapshot=first,
        )
        for snapshot_id, count in additions.get(key, []):
            by_snapshot[snapshot_id].append(gen)
            graph.nodes[gen].attrs.setdefault("added", {})[str(snapshot_id)] = count
    return dict(by_snapshot)


def _models(lake: LakeStore, at: int) -> list[dict[str, Any]]:
    return sql(
        lake,
        "SELECT model_id, name, kind, base_model, training_snapshot, training_tag, "
        "parent_model_id, json_extract_string(config, '$.export_id') AS export_id "
        "FROM models ORDER BY created_at NULLS FIRST, model_id",
        at=at,
    ).to_dicts()


def _credit_runs(lake: LakeStore, at: int) -> list[dict[str, Any]]:
    return sql(
        lake,
        "SELECT run_name, any_value(estimator) AS estimator, "
        "any_value(source_snapshot) AS source_snapshot, "
        "count(DISTINCT trajectory_id) AS trajectories FROM credits "
        "WHERE source_snapshot IS NOT NULL GROUP BY run_name ORDER BY run_name",
        at=at,
    ).to_dicts()


def _exports(lake: LakeStore, at: int) -> list[dict[str, Any]]:
    return sql(
        lake,
        "SELECT export_id, format, source_snapshot, source_tags, credit_run, mask, uri, counts "
        "FROM exports ORDER BY created_at NULLS FIRST, export_id",
        at=at,
    ).to_dicts()


_USES_SQL = """
WITH refs AS (
    SELECT trajectory_id, {key} AS g,
           json_extract_string(attrs, '$.lineage.value_model_id') AS value_ref,
           json_extract_string(attrs, '$.lineage.policy_model_id') AS policy_ref,
           policy_model
    FROM trajectories
),
uses AS (
    SELECT m.model_id, r.g, r.trajectory_id, 'lineage.value_model_id' AS via
    FROM refs r JOIN models m ON r.value_ref = m.model_id
    UNION ALL
    SELECT m.model_id, r.g, r.trajectory_id, 'lineage.policy_model_id'
    FROM refs r JOIN models m ON r.policy_ref = m.model_id
    UNION ALL
    SELECT m.model_id, r.g, r.trajectory_id, 'policy_model'
    FROM refs r JOIN models m ON r.policy_model IN (m.model_id, m.name)
)
SELECT model_id, g, list(DISTINCT via ORDER BY via) AS via,
       count(DISTINCT trajectory_id) AS n
FROM uses GROUP BY model_id, g ORDER BY model_id, g NULLS LAST
"""


def _uses(lake: LakeStore, at: int, run_mode: bool) -> list[dict[str, Any]]:
    key = "run_id" if run_mode else "generation"
    return sql(lake, _USES_SQL.format(key=key), at=at).to_dicts()


# --------------------------------------------------------------------------- building the graph


def _snapshot_node(graph: _Graph, snap: Snapshot) -> str:
    added = {t: n for t, n in snap.summary.get("added", {}).items() if n}
    return graph.add(
        "snapshot",
        snap.snapshot_id,
        f"snapshot {snap.snapshot_id} ({snap.operation}, {snap.timestamp[:19]})",
        operation=snap.operation,
        timestamp=snap.timestamp,
        added=added,
    )


def _link_snapshots(
    graph: _Graph, lake: LakeStore, wanted: set[int], by_snapshot: dict[int, list[str]]
) -> None:
    """Snapshot nodes; each is linked from the generations added there or, failing that, from
    the newest generation it holds."""
    newest: str | None = None
    for snap in lake.snapshots():
        if snap.snapshot_id in by_snapshot:
            newest = by_snapshot[snap.snapshot_id][-1]
        if snap.snapshot_id not in wanted:
            continue
        node = _snapshot_node(graph, snap)
        for gen in by_snapshot.get(snap.snapshot_id, []):
            graph.link(gen, node, "added in")
        if snap.snapshot_id not in by_snapshot and newest is not None:
            graph.link(newest, node, "newest in")


def _parents(snapshot_id: int | None, tags_at: dict[int, list[str]], wanted: set[int]) -> list[str]:
    """The tag nodes naming a snapshot or, untagged, the snapshot's node (when it is one)."""
    if snapshot_id is None:
        return []
    if snapshot_id in tags_at:
        return tags_at[snapshot_id]
    return [f"snapshot:{snapshot_id}"] if snapshot_id in wanted else []


def _add_credit_runs(
    graph: _Graph, runs: list[dict[str, Any]], tags_at: dict[int, list[str]], wanted: set[int]
) -> None:
    for run in runs:
        label = f"credit run {run['run_name']} ({run['estimator']}, {run['trajectories']} traj.)"
        node = graph.add("credit-run", run["run_name"], label, **run)
        for parent in _parents(run["source_snapshot"], tags_at, wanted):
            graph.link(parent, node, "credit run")


def _add_exports(
    graph: _Graph, exports: list[dict[str, Any]], tags_at: dict[int, list[str]], wanted: set[int]
) -> None:
    """Export nodes under their credit run or, exported without one, their source snapshot."""
    for e in exports:
        counts = json.loads(e["counts"]) if e["counts"] else {}
        samples = sum(int(c.get("samples") or 0) for c in counts.values())
        label = f"export {e['export_id']} ({e['format']}, {samples} samples)"
        attrs = {k: e[k] for k in ("format", "source_snapshot", "source_tags", "credit_run")}
        node = graph.add(
            "export", e["export_id"], label, **attrs, mask=e["mask"], uri=e["uri"], counts=counts
        )
        run = f"credit-run:{e['credit_run']}"
        if e["credit_run"] is not None and run in graph.nodes:
            graph.link(run, node, "exported")
        else:
            for parent in _parents(e["source_snapshot"], tags_at, wanted):
                graph.link(parent, node, "exported")


def _add_models(
    graph: _Graph, models: list[dict[str, Any]], tag_ids: dict[str, str], snap_ids: set[int]
) -> None:
    for m in models:
        name = f" {m['name']!r}" if m["name"] and m["name"] != m["model_id"] else ""
        node = graph.add(
            "model",
            m["model_id"],
            f"model {m['model_id']}{name} ({m['kind']})",
            **{k: m[k] for k in ("name", "kind", "base_model", "training_snapshot")},
            training_tag=m["training_tag"],
            export_id=m["export_id"],
        )
        if m["training_tag"] in tag_ids:
            graph.link(tag_ids[m["training_tag"]], node, "trained")
        elif m["training_snapshot"] in snap_ids:
            graph.link(f"snapshot:{m['training_snapshot']}", node, "trained")
        if f"export:{m['export_id']}" in graph.nodes:
            graph.link(f"export:{m['export_id']}", node, "trained")
    for m in models:
        parent = m["parent_model_id"]
        if parent and f"model:{parent}" in graph.nodes:
            graph.link(f"model:{parent}", f"model:{m['model_id']}", "continued as")


def _add_uses(graph: _Graph, uses: list[dict[str, Any]], run_mode: bool) -> None:
    for use in uses:
        key = use["g"]
        if not run_mode and key is None:
            label = f"{use['n']} rollouts without a generation"
        else:
            label = f"{use['n']} rollouts of {_gen_label(key, run_mode)}"
        node = graph.add(
            "rollouts", f"{use['model_id']}:{key}", label, trajectories=use["n"], via=use["via"]
        )
        graph.link(f"model:{use['model_id']}", node, "used by (" + ", ".join(use["via"]) + ")")
        gen = _gen_id(key, run_mode)
        if gen in graph.nodes:
            graph.link(node, gen, "part of")


def lineage(lake: LakeStore, *, at: SnapshotRef = None) -> Lineage:
    """The lineage graph of the lake read at one snapshot (default: the latest).

    Nodes: generations (in run mode, when no trajectory has a generation, one per run id,
    labelled "generation ?"), snapshots, tags, credit runs, SFT exports, models and the rollouts
    that used a model (see the module docstring for the conventions). Edges: generation →
    snapshot ("added in", or "newest in" for a later snapshot that holds it), snapshot → tag
    ("tagged"), tag (or the untagged snapshot) → credit run ("credit run"), credit run (or,
    without one, the source tag or snapshot) → export ("exported"), snapshot or tag → model and
    export → model ("trained"), model → rollouts ("used by (...)") → generation ("part of"),
    and parent model → model ("continued as"). Only snapshots that matter are nodes: where data
    arrived, tagged, trained, credited or exported from.
    """
    head = lake.snapshot(at)
    h = head.snapshot_id
    graph = _Graph()
    gens, total = sql(lake, "SELECT count(generation), count(*) FROM trajectories", at=h).rows()[0]
    # Rollouts recorded without a generation still get a graph: their run ids stand in for it.
    run_mode = gens == 0 and total > 0
    by_snapshot = _add_generations(graph, lake, head, run_mode)
    tags = [t for t in lake.tags() if t.snapshot_id <= h]
    models, runs, exports = _models(lake, h), _credit_runs(lake, h), _exports(lake, h)
    run_names = {r["run_name"] for r in runs}
    wanted = {*by_snapshot, *(t.snapshot_id for t in tags)}
    wanted |= {m["training_snapshot"] for m in models if m["training_snapshot"] is not None}
    wanted |= {r["source_snapshot"] for r in runs}
    wanted |= {e["source_snapshot"] for e in exports if e["credit_run"] not in run_names}
    wanted &= {s.snapshot_id for s in lake.snapshots() if s.snapshot_id <= h}
    _link_snapshots(graph, lake, wanted, by_snapshot)
    tag_ids: dict[str, str] = {}
    tags_at: dict[int, list[str]] = defaultdict(list)
    for tag in tags:
        tag_ids[tag.name] = graph.add("tag", tag.name, f"tag {tag.name}", note=tag.note)
        tags_at[tag.snapshot_id].append(tag_ids[tag.name])
        graph.link(f"snapshot:{tag.snapshot_id}", tag_ids[tag.name], "tagged")
    _add_credit_runs(graph, runs, tags_at, wanted)
    _add_exports(graph, exports, tags_at, wanted)
    _add_models(graph, models, tag_ids, wanted)
    _add_uses(graph, _uses(lake, h, run_mode), run_mode)
    return Lineage(h, list(graph.nodes.values()), graph.edges)


# --------------------------------------------------------------------------- rendering


def _text_lines(graph: Lineage, node: Node, depth: int, seen: set[str]) -> Iterator[str]:
    seen.add(node.id)
    for edge, child in graph.children(node.id):
        indent = "  " * (depth + 1)
        if child.kind == "generation" or child.id in seen:
            # generations get their own tree; a node reached twice is printed once
            yield f"{indent}{edge.label}: {child.label} (see its tree)"
            continue
        yield f"{indent}{edge.label}: {child.label}"
        yield from _text_lines(graph, child, depth + 1, seen)


def _format_text(graph: Lineage) -> str:
    lines = [f"lineage at snapshot {graph.snapshot_id}"]
    seen: set[str] = set()
    gens = [n for n in graph.nodes if n.kind == "generation"]
    for gen in gens:
        lines.append(f"{gen.label}: {gen.attrs['trajectories']} trajectories")
        lines.extend(_text_lines(graph, gen, 0, seen))
    targets = {e.target for e in graph.edges}
    others = [n for n in graph.nodes if n.id not in seen and n.id not in targets]
    if others:
        lines.append("not linked to a generation:")
        for node in others:
            lines.append(f"  {node.label}")
            lines.extend(_text_lines(graph, node, 1, seen))
    if not gens and not others:
        lines.append("(no trajectories, models or tags yet)")
    return "\n".join(lines) + "\n"


_SHAPES: dict[str, str] = {
    "generation": "box",
    "snapshot": "ellipse",
    "tag": "note",
    "credit-run": "hexagon",
    "export": "cylinder",
    "model": "box3d",
    "rollouts": "folder",
}


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _format_dot(graph: Lineage) -> str:
    lines = ["digraph lineage {", "  rankdir=LR;", "  node [fontsize=10];"]
    for node in graph.nodes:
        lines.append(
            f"  {_dot_quote(node.id)} [label={_dot_quote(node.label)}, shape={_SHAPES[node.kind]}];"
        )
    for edge in graph.edges:
        lines.append(
            f"  {_dot_quote(edge.source)} -> {_dot_quote(edge.target)} "
            f"[label={_dot_quote(edge.label)}];"
        )
    return "\n".join([*lines, "}"]) + "\n"


def format_lineage(graph: Lineage, output: LineageFormat = "text") -> str:
    """Render a lineage graph.

    Args:
        graph: What `lineage` returned.
        output: ``text``, an indented tree per generation (nodes not reachable from one are
            listed last); ``json``, nodes and edges; ``dot``, a Graphviz digraph.
    """
    if output == "text":
        return _format_text(graph)
    if output == "json":
        return json.dumps(graph.to_dict(), indent=2, ensure_ascii=False) + "\n"
    if output == "dot":
        return _format_dot(graph)
    raise ValueError(f"output must be 'text', 'json' or 'dot', got {output!r}")
