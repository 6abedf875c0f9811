/* Runs page: the trajectories table with quick filters, a SQL predicate (server only), grouping with
 * success rates, sortable columns and server-side paging. Every control writes the hash route, so a
 * view is a link. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, fmtNum, fmtCost, fmtTime, outcomeBadge, errorBox, go, routeHref, withAt } = TL.dom;

  const FILTERS = [
    ["harness", "harness"],
    ["policy_model", "model"],
    ["generation", "generation"],
    ["run_id", "run"],
    ["tag", "tag"],
  ];
  const GROUP_BY = ["harness", "policy_model", "generation", "run_id", "task_id", "tag"];
  const PAGE_SIZES = [25, 50, 100, 200, 500];
  const COLUMNS = [
    ["trajectory_id", "trajectory"],
    ["task_id", "task"],
    ["harness", "harness"],
    ["policy_model", "model"],
    ["generation", "gen"],
    ["run_id", "run"],
    ["status", "status"],
    ["resolved", "outcome"],
    ["reward", "reward"],
    ["n_turns", "turns"],
    ["n_tool_calls", "tool calls"],
    ["total_tokens", "tokens"],
    ["cost_usd", "cost"],
    ["started_at", "started"],
  ];
  // Parameters that select rows (the groups endpoint takes the same ones).
  const SELECTION = ["where", "harness", "policy_model", "generation", "run_id", "tag", "resolved", "task_id", "q"];

  function pick(params, keys) {
    const out = {};
    keys.forEach((k) => {
      if (params[k] !== undefined && params[k] !== "") out[k] = params[k];
    });
    return out;
  }

  function currentParams(route) {
    return Object.assign({}, route.params);
  }

  /** Navigates to the runs route with `changes` applied; a new selection starts at the first page. */
  function update(route, changes, keepOffset) {
    const params = Object.assign(currentParams(route), changes);
    if (!keepOffset) delete params.offset;
    delete params.at;
    go(["runs"], params);
  }

  function bundleHasTags(meta) {
    const runs = (window.TRAJLAKE_BUNDLE && window.TRAJLAKE_BUNDLE.runs) || [];
    return runs.some((r) => Array.isArray(r.tags));
  }

  function facetSelect(meta, route, key, label) {
    const values = (meta.facets && meta.facets[key]) || [];
    const current = route.params[key] || "";
    const select = h("select", { name: key, "aria-label": label, onchange: (e) => update(route, { [key]: e.target.value }) },
      h("option", { value: "" }, "any " + label),
      values.map((f) => h("option", { value: String(f.value) }, String(f.value) + " (" + fmtNum(f.n) + ")")));
    if (current && !values.some((f) => String(f.value) === current)) select.appendChild(h("option", { value: current }, current));
    select.value = current;
    return h("label", { class: "field" }, label, select);
  }

  function resolvedSelect(route) {
    const select = h("select", { name: "resolved", "aria-label": "outcome", onchange: (e) => update(route, { resolved: e.target.value }) },
      [["", "any outcome"], ["true", "resolved"], ["false", "failed"], ["unknown", "unknown"]].map(([v, t]) => h("option", { value: v }, t)));
    select.value = route.params.resolved || "";
    return h("label", { class: "field" }, "outcome", select);
  }

  function searchInput(route) {
    const input = h("input", { type: "search", name: "q", placeholder: "id or task contains…", value: route.params.q || "" });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") update(route, { q: input.value.trim() });
    });
    return h("label", { class: "field" }, "search", input);
  }

  function sqlBox(route, errorSlot) {
    const area = h("textarea", { name: "where", rows: 1, spellcheck: "false", placeholder: "SQL predicate over trajectories t, e.g. t.n_turns > 10 and t.harness = 'swe-agent'" });
    area.value = route.params.where || "";
    const apply = () => update(route, { where: area.value.trim() });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey) {
        e.preventDefault();
        apply();
      }
    });
    return h("div", { class: "sql-box" },
      h("label", { class: "field grow" }, "where", area),
      h("button", { type: "button", class: "apply-where", onclick: apply }, "Apply"),
      route.params.where ? h("button", { type: "button", onclick: () => update(route, { where: "" }) }, "Clear") : null,
      errorSlot);
  }

  function controls(meta, route, errorSlot) {
    const showTags = TL.api.mode === "server" || bundleHasTags(meta);
    const groupSelect = h("select", { name: "by", "aria-label": "group by", onchange: (e) => update(route, { by: e.target.value }, true) },
      h("option", { value: "" }, "no grouping"),
      GROUP_BY.filter((k) => showTags || k !== "tag").map((k) => h("option", { value: k }, k)));
    groupSelect.value = route.params.by || "";
    const filters = FILTERS.filter(([k]) => showTags || k !== "tag").map(([k, label]) => facetSelect(meta, route, k, label));
    const bar = h("div", { class: "filters" }, filters, resolvedSelect(route), searchInput(route),
      h("label", { class: "field" }, "group by", groupSelect),
      route.params.task_id
        ? h("span", { class: "chip" }, "task " + route.params.task_id, h("button", { type: "button", class: "chip-x", "aria-label": "remove task filter", onclick: () => update(route, { task_id: "" }) }, "×"))
        : null);
    return h("section", { class: "controls" }, bar, TL.api.mode === "server" ? sqlBox(route, errorSlot) : errorSlot);
  }

  function groupFilter(by, key) {
    return { [by]: key === null || key === undefined ? "" : String(key) };
  }

  function groupsTable(route, data) {
    const by = data.by;
    const body = data.rows.map((g) =>
      h("tr", { class: "clickable", title: "filter on " + by + " = " + g.key, onclick: () => update(route, Object.assign(groupFilter(by, g.key), { by: "" })) },
        h("td", null, g.key === null ? "(none)" : String(g.key)),
        h("td", { class: "num" }, fmtNum(g.n)),
        h("td", { class: "num" }, fmtNum(g.n_resolved)),
        h("td", { class: "num" }, fmtNum(g.n_labelled)),
        h("td", { class: "rate" }, rateBar(g.success_rate))));
    return h("section", { class: "groups" },
      h("h3", null, "Grouped by " + by),
      h("table", { class: "data groups-table" },
        h("thead", null, h("tr", null, h("th", null, by), h("th", { class: "num" }, "n"), h("th", { class: "num" }, "resolved"), h("th", { class: "num" }, "labelled"), h("th", null, "success rate"))),
        h("tbody", null, body)));
  }

  function rateBar(rate) {
    if (rate === null || rate === undefined) return h("span", { class: "muted" }, "–");
    return h("span", { class: "rate-cell" },
      h("span", { class: "rate-bar" }, h("span", { class: "rate-fill", style: "width:" + (rate * 100).toFixed(1) + "%" })),
      (rate * 100).toFixed(1) + "%");
  }

  function headerCell(route, key, label) {
    const sort = route.params.sort || "started_at";
    const order = route.params.order || "desc";
    const active = sort === key;
    const next = active && order === "desc" ? "asc" : "desc";
    return h("th", { class: "sortable" + (active ? " sorted-" + order : ""), "data-key": key, "aria-sort": active ? (order === "asc" ? "ascending" : "descending") : "none",
      onclick: () => update(route, { sort: key, order: next }, false) }, label, active ? (order === "asc" ? " ▲" : " ▼") : "");
  }

  function cell(key, row) {
    const v = row[key];
    switch (key) {
      case "trajectory_id":
        return h("td", { class: "id" }, h("a", { href: routeHref(["t", v], withAt()), onclick: (e) => e.stopPropagation() }, v));
      case "task_id":
        return h("td", { class: "id" }, h("a", { class: "task-link", href: routeHref(["candidates", v], withAt()), title: "all candidates of this task", onclick: (e) => e.stopPropagation() }, v));
      case "resolved":
        return h("td", null, outcomeBadge(v));
      case "cost_usd":
        return h("td", { class: "num" }, fmtCost(v));
      case "started_at":
        return h("td", { class: "time" }, fmtTime(v));
      case "reward":
        return h("td", { class: "num" }, fmtNum(v, 2));
      case "status":
        return h("td", null, h("span", { class: "status status-" + v }, v || "–"), row.is_subagent ? h("span", { class: "badge" }, "subagent") : null);
      default:
        return h("td", { class: typeof v === "number" ? "num" : null }, v === null || v === undefined ? "–" : String(v));
    }
  }

  function pager(route, data) {
    const limit = data.limit;
    const offset = data.offset;
    const sizes = h("select", { name: "limit", "aria-label": "page size", onchange: (e) => update(route, { limit: e.target.value }) },
      PAGE_SIZES.map((n) => h("option", { value: String(n) }, n + " / page")));
    sizes.value = String(limit);
    const last = Math.min(offset + data.rows.length, data.total);
    return h("div", { class: "pager" },
      h("button", { type: "button", class: "prev", disabled: offset <= 0, onclick: () => update(route, { offset: String(Math.max(0, offset - limit)) }, true) }, "‹ prev"),
      h("span", { class: "page-info" }, data.total ? fmtNum(offset + 1) + "–" + fmtNum(last) + " of " + fmtNum(data.total) : "no trajectories"),
      h("button", { type: "button", class: "next", disabled: offset + limit >= data.total, onclick: () => update(route, { offset: String(offset + limit) }, true) }, "next ›"),
      sizes,
      h("span", { class: "muted elapsed" }, data.elapsed_ms !== undefined ? fmtNum(data.elapsed_ms, 1) + " ms" : ""));
  }

  function runsTable(route, data) {
    const open = (row) => go(["t", row.trajectory_id], {});
    return h("table", { class: "data runs-table" },
      h("thead", null, h("tr", null, COLUMNS.map(([k, label]) => headerCell(route, k, label)))),
      h("tbody", null, data.rows.map((row) =>
        h("tr", { class: "clickable run-row", "data-id": row.trajectory_id, onclick: () => open(row) }, COLUMNS.map(([k]) => cell(k, row))))));
  }

  async function render(el, route, ctx) {
    const meta = ctx.meta;
    const at = route.params.at;
    const errorSlot = h("div", { class: "query-error" });
    el.appendChild(h("h2", null, "Runs ", h("span", { class: "muted small" }, fmtNum(meta.counts && meta.counts.trajectories) + " trajectories in this snapshot")));
    el.appendChild(controls(meta, route, errorSlot));
    const groupsSlot = h("div", { class: "groups-slot" });
    const tableSlot = h("div", { class: "table-slot" }, h("p", { class: "muted" }, "Loading…"));
    el.appendChild(groupsSlot);
    el.appendChild(tableSlot);
    const selection = Object.assign({ at }, pick(route.params, SELECTION));
    const runsParams = Object.assign({}, selection, pick(route.params, ["sort", "order", "offset", "limit"]));
    // Settled into {groups} or {error} at once, so a failing runs query leaves no unhandled rejection.
    const groupsPromise = route.params.by
      ? TL.api.get("groups", Object.assign({ by: route.params.by }, selection)).then((groups) => ({ groups }), (error) => ({ error }))
      : null;
    let data;
    try {
      data = await TL.api.get("runs", runsParams);
    } catch (err) {
      if (!ctx.isCurrent()) return;
      TL.dom.clear(tableSlot);
      errorSlot.appendChild(errorBox(err, err.field === "where" || err.status === 400 ? "Query rejected" : "Cannot list runs"));
      return;
    }
    if (!ctx.isCurrent()) return;
    TL.dom.clear(tableSlot).appendChild(pager(route, data));
    tableSlot.appendChild(h("div", { class: "table-wrap" }, runsTable(route, data)));
    if (groupsPromise) {
      const result = await groupsPromise;
      if (!ctx.isCurrent()) return;
      groupsSlot.appendChild(result.error ? errorBox(result.error, "Cannot group") : groupsTable(route, result.groups));
    }
  }

  TL.runs = { render };
})(window.TL);
