/* Candidates page: every rollout of one task in its own column, aligned by turn, with outcome and
 * the value model's score, rank and best-of-N pick. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, fmtNum, outcomeBadge, routeHref, withAt, go } = TL.dom;

  function modelPicker(route, data) {
    if (!data.models || data.models.length < 2) {
      return data.model_id ? h("span", { class: "muted" }, "scores from " + data.model_id) : h("span", { class: "muted" }, "no value-model scores for this task");
    }
    const select = h("select", { name: "model", "aria-label": "value model",
      onchange: (e) => go(["candidates", data.task_id], Object.assign({}, route.params, { model: e.target.value, at: undefined })) },
      data.models.map((m) => h("option", { value: m }, m)));
    select.value = data.model_id || "";
    return h("label", { class: "field" }, "value model", select);
  }

  function columnHeader(c) {
    const link = TL.api.has("trajectory:" + c.trajectory_id)
      ? h("a", { href: routeHref(["t", c.trajectory_id], withAt()), class: "cand-id" }, c.trajectory_id)
      : h("span", { class: "cand-id" }, c.trajectory_id);
    return h("div", { class: "cand-head" + (c.picked ? " picked" : "") },
      h("div", null, link),
      h("div", { class: "cand-badges" }, outcomeBadge(c.resolved), c.picked ? h("span", { class: "badge picked-badge" }, "picked") : null,
        c.rank !== null && c.rank !== undefined ? h("span", { class: "badge rank" }, "rank " + c.rank) : null),
      h("div", { class: "small" }, "score ", h("strong", { class: "cand-score" }, c.score === null || c.score === undefined ? "–" : c.score.toFixed(3)),
        " · reward " + fmtNum(c.reward, 2) + " · " + fmtNum(c.n_turns) + " turns"),
      h("div", { class: "muted small" }, [c.policy_model, c.run_id, "gen " + c.generation, "attempt " + c.attempt].filter(Boolean).join(" · ")),
      h("div", { class: "muted small" }, c.status + (c.exit_reason ? " (" + c.exit_reason + ")" : "")));
  }

  function grid(data) {
    const cands = data.candidates;
    const depth = Math.max(0, ...cands.map((c) => c.turns.length ? Math.max(...c.turns.map((t) => t.turn)) + 1 : 0));
    const table = h("div", { class: "cand-grid", style: "grid-template-columns: 3.5em repeat(" + cands.length + ", minmax(14em, 1fr))" });
    table.appendChild(h("div", { class: "cand-corner" }, "turn"));
    cands.forEach((c) => table.appendChild(h("div", { class: "cand-col-head", "data-id": c.trajectory_id }, columnHeader(c))));
    const byTurn = cands.map((c) => new Map(c.turns.map((t) => [t.turn, t])));
    for (let i = 0; i < depth; i++) {
      table.appendChild(h("div", { class: "cand-turn-no" }, String(i)));
      cands.forEach((c, j) => {
        const t = byTurn[j].get(i);
        if (!t) {
          table.appendChild(h("div", { class: "cand-cell empty" }));
          return;
        }
        const open = () => go(["t", c.trajectory_id], { turn: String(i) });
        table.appendChild(h("div", { class: "cand-cell clickable" + (t.is_error ? " is-error" : ""), "data-id": c.trajectory_id, "data-turn": String(i), title: t.summary, onclick: open }, t.summary));
      });
    }
    return table;
  }

  async function render(el, route, ctx) {
    const task = route.path[1];
    if (!task) throw new Error("no task id in the address");
    const data = await TL.api.get("candidates", { at: route.params.at, task_id: task, model_id: route.params.model });
    if (!ctx.isCurrent()) return;
    el.appendChild(h("div", { class: "crumbs" }, h("a", { href: routeHref(["runs"], withAt()) }, "Runs"), " / task ",
      h("a", { href: routeHref(["runs"], withAt({ task_id: task })) }, task)));
    el.appendChild(h("section", { class: "card" },
      h("h2", null, "Candidates for ", h("span", { class: "id" }, data.task_id)),
      h("div", { class: "facts" },
        h("div", { class: "fact" }, h("span", { class: "fact-label" }, "rollouts"), h("span", { class: "fact-value" }, fmtNum(data.n))),
        h("div", { class: "fact" }, h("span", { class: "fact-label" }, "resolved"), h("span", { class: "fact-value" }, fmtNum(data.n_resolved))),
        modelPicker(route, data))));
    if (!data.candidates.length) {
      el.appendChild(h("p", { class: "muted" }, "no rollouts for this task in this snapshot"));
      return;
    }
    el.appendChild(h("div", { class: "cand-wrap" }, grid(data)));
  }

  TL.candidates = { render };
})(window.TL);
