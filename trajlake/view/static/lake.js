/* Lake page: snapshots, tags, credit runs, exports and models, and the lineage graph drawn as a
 * layered left-to-right SVG (layer = longest path from a source, so every edge points right). */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, fmtNum, fmtTime, routeHref } = TL.dom;
  const { s } = TL.svg;
  const KIND_ORDER = ["generation", "snapshot", "tag", "credit-run", "model", "export", "rollouts"];

  function show(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "object") return JSON.stringify(v);
    if (typeof v === "number") return fmtNum(v);
    if (/^\d{4}-\d\d-\d\dT/.test(String(v))) return fmtTime(v);
    return String(v);
  }

  function table(title, rows, columns, cls) {
    const body = rows && rows.length
      ? h("table", { class: "data " + cls },
          h("thead", null, h("tr", null, columns.map((c) => h("th", null, c)))),
          h("tbody", null, rows.map((r) => h("tr", null, columns.map((c) => h("td", { class: c === "metrics" || c === "counts" ? "small" : null }, cellValue(c, r[c])))))))
      : h("p", { class: "muted" }, "none");
    return h("section", { class: "card lake-section" }, h("h3", null, title + " ", h("span", { class: "muted small" }, "(" + (rows || []).length + ")")), h("div", { class: "table-wrap" }, body));
  }

  function cellValue(column, v) {
    if (column === "tags" && Array.isArray(v)) return v.map((t) => h("a", { class: "badge tag", href: routeHref(["runs"], { at: t }) }, t));
    if ((column === "snapshot" || column === "tag") && v !== null && v !== undefined) return h("a", { href: routeHref(["runs"], { at: String(v) }), title: "read the lake here" }, String(v));
    return show(v);
  }

  /** Layer of each node: the longest path to it from a node with no incoming edge (cycles cut). */
  function layers(nodes, edges) {
    const incoming = new Map(nodes.map((n) => [n.id, []]));
    edges.forEach((e) => {
      if (incoming.has(e.target) && incoming.has(e.source)) incoming.get(e.target).push(e.source);
    });
    const layer = new Map();
    const visiting = new Set();
    function depth(id) {
      if (layer.has(id)) return layer.get(id);
      if (visiting.has(id)) return 0;
      visiting.add(id);
      const d = incoming.get(id).reduce((m, src) => Math.max(m, depth(src) + 1), 0);
      visiting.delete(id);
      layer.set(id, d);
      return d;
    }
    nodes.forEach((n) => depth(n.id));
    return layer;
  }

  function kindRank(kind) {
    const i = KIND_ORDER.indexOf(kind);
    return i < 0 ? KIND_ORDER.length : i;
  }

  function lineageSvg(graph) {
    const nodes = (graph && graph.nodes) || [];
    const edges = ((graph && graph.edges) || []).filter((e) => nodes.some((n) => n.id === e.source) && nodes.some((n) => n.id === e.target));
    if (!nodes.length) return h("p", { class: "muted" }, "no lineage recorded");
    const layer = layers(nodes, edges);
    const columns = [];
    nodes.forEach((n) => {
      const l = layer.get(n.id);
      (columns[l] = columns[l] || []).push(n);
    });
    const NW = 190, NH = 34, GX = 70, GY = 16;
    const pos = new Map();
    columns.forEach((col, l) => {
      // Order within a layer by the mean position of the parents, then kind, to keep edges short.
      col.sort((a, b) => parentMean(a) - parentMean(b) || kindRank(a.kind) - kindRank(b.kind) || String(a.label).localeCompare(String(b.label)));
      col.forEach((n, i) => pos.set(n.id, { x: 10 + l * (NW + GX), y: 10 + i * (NH + GY) }));
    });
    function parentMean(n) {
      const ps = edges.filter((e) => e.target === n.id && pos.has(e.source)).map((e) => pos.get(e.source).y);
      return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : 0;
    }
    const width = 20 + columns.length * (NW + GX) - GX;
    const height = 20 + Math.max(...columns.map((c) => c.length)) * (NH + GY) - GY;
    const svg = s("svg", { class: "lineage", width, height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "lineage graph" },
      s("defs", null, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow-head" }))));
    edges.forEach((e) => {
      const a = pos.get(e.source), b = pos.get(e.target);
      const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2;
      const mx = (x1 + x2) / 2;
      svg.appendChild(s("path", { class: "edge edge-" + e.kind, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)", "data-source": e.source, "data-target": e.target },
        s("title", { text: e.source + " → " + e.target + (e.kind ? " (" + e.kind + ")" : "") })));
    });
    nodes.forEach((n) => {
      const p = pos.get(n.id);
      const label = String(n.label || n.id);
      svg.appendChild(s("g", { class: "node kind-" + n.kind, "data-id": n.id, transform: `translate(${p.x},${p.y})` },
        s("rect", { width: NW, height: NH, rx: 5 }),
        s("text", { x: 8, y: 14, class: "node-kind", text: n.kind }),
        s("text", { x: 8, y: 28, class: "node-label", text: label.length > 30 ? label.slice(0, 29) + "…" : label }),
        s("title", { text: label + "\n" + JSON.stringify(n.attrs || {}, null, 1) })));
    });
    return h("div", { class: "lineage-wrap" }, svg);
  }

  async function render(el, route, ctx) {
    const data = await TL.api.get("lake", { at: route.params.at });
    if (!ctx.isCurrent()) return;
    const meta = ctx.meta;
    el.appendChild(h("h2", null, "Lake ", h("span", { class: "muted small" }, meta.lake)));
    el.appendChild(h("div", { class: "facts card" }, Object.entries(meta.counts || {}).map(([k, v]) =>
      h("div", { class: "fact" }, h("span", { class: "fact-label" }, k), h("span", { class: "fact-value" }, fmtNum(v))))));
    el.appendChild(h("section", { class: "card lake-section" }, h("h3", null, "Lineage"), lineageSvg(data.lineage)));
    el.appendChild(table("Tags", data.tags, ["tag", "snapshot", "created_at"], "tags-table"));
    el.appendChild(table("Credit runs", data.credit_runs, ["run_name", "estimator", "n_trajectories", "source_snapshot", "created_at"], "credit-runs-table"));
    el.appendChild(table("Models", data.models, ["model_id", "name", "kind", "base_model", "training_snapshot", "training_tag", "parent_model_id", "metrics", "created_at"], "models-table"));
    el.appendChild(table("Exports", data.exports, ["export_id", "format", "source_snapshot", "credit_run", "uri", "counts", "created_at"], "exports-table"));
    el.appendChild(table("Snapshots", data.snapshots, ["snapshot", "created_at", "operation", "message", "tags"], "snapshots-table"));
  }

  TL.lake = { render };
})(window.TL);
