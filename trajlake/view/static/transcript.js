/* Transcript page: header (ids, outcome, labels, tokens, cost), turns in order with lazy rendering
 * (a fixed-estimate placeholder per turn, filled when it nears the viewport), threads in their own
 * sections, search with next/prev, and the credit overlay. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, fmtNum, fmtCost, fmtTime, outcomeBadge, routeHref, withAt, go } = TL.dom;
  const cache = new Map(); // "at|id" -> trajectory payload (switching overlays must not refetch it)

  function getTrajectory(at, id) {
    const key = (at || "") + "|" + id;
    if (!cache.has(key)) {
      const p = TL.api.get("trajectory", { at, id });
      p.catch(() => cache.delete(key));
      cache.set(key, p);
    }
    return cache.get(key);
  }

  function fact(label, value) {
    return h("div", { class: "fact" }, h("span", { class: "fact-label" }, label), h("span", { class: "fact-value" }, value === null || value === undefined || value === "" ? "–" : value));
  }

  function labelsTable(labels) {
    if (!labels || !labels.length) return h("p", { class: "muted small" }, "no labels");
    return h("table", { class: "data labels-table" },
      h("thead", null, h("tr", null, ["source", "outcome", "reward", "created", "details"].map((c) => h("th", null, c)))),
      h("tbody", null, labels.map((l) => h("tr", null,
        h("td", null, l.source), h("td", null, outcomeBadge(l.resolved)), h("td", { class: "num" }, fmtNum(l.reward, 2)),
        h("td", { class: "time" }, fmtTime(l.created_at)),
        h("td", { class: "small" }, l.details === null || l.details === undefined ? "" : typeof l.details === "string" ? l.details : JSON.stringify(l.details))))));
  }

  function header(data) {
    const t = data.trajectory;
    const o = data.outcome || {};
    // A bundle holds candidates only for the tasks of its selection.
    const taskLink = t.task_id && TL.api.has("candidates:" + t.task_id)
      ? h("a", { href: routeHref(["candidates", t.task_id], withAt()), class: "task-link" }, t.task_id)
      : t.task_id;
    const card = h("section", { class: "card transcript-header" },
      h("h2", { class: "traj-id" }, t.trajectory_id),
      h("div", { class: "facts" },
        fact("task", taskLink), fact("harness", [t.harness, t.harness_version ? " " + t.harness_version : ""].join("")),
        fact("model", t.policy_model), fact("generation", t.generation), fact("run", t.run_id), fact("attempt", t.attempt),
        fact("status", [t.status, t.exit_reason ? " (" + t.exit_reason + ")" : ""].join("")),
        fact("outcome", h("span", { class: "outcome" }, outcomeBadge(o.resolved), " ", o.source ? h("span", { class: "muted small" }, "by " + o.source) : null)),
        fact("reward", fmtNum(o.reward, 2)), fact("turns", fmtNum(t.n_turns)), fact("tool calls", fmtNum(t.n_tool_calls)),
        fact("tokens", fmtNum(t.prompt_tokens) + " in · " + fmtNum(t.completion_tokens) + " out"), fact("cost", fmtCost(t.cost_usd)),
        fact("started", fmtTime(t.started_at)), fact("ended", fmtTime(t.ended_at)),
        t.is_subagent ? fact("subagent of", t.parent_trajectory_id) : null,
        t.n_redactions ? fact("redactions", fmtNum(t.n_redactions)) : null),
      h("details", { class: "labels" }, h("summary", null, "labels (" + (data.labels || []).length + ")"), labelsTable(data.labels)));
    if (data.final_output) {
      const looksLikeDiff = /^(diff --git|--- |@@ )/m.test(data.final_output);
      card.appendChild(h("details", { class: "final-output" }, h("summary", null, "final output"),
        looksLikeDiff ? TL.turns.diffBlock(data.final_output, "") : TL.turns.textBlock(data.final_output, "", "content")));
    }
    return card;
  }

  /** Search state and the toolbar that drives it; blocks re-render to show marks. */
  function makeSearch(view) {
    const input = h("input", { type: "search", class: "transcript-search", placeholder: "find in transcript (press /)", "aria-label": "find in transcript" });
    const status = h("span", { class: "search-status muted" });
    const state = { needle: "", hits: [], current: -1 };
    function refresh() {
      state.needle = input.value.trim().toLowerCase();
      state.hits = [];
      view.blocks.forEach((b) => {
        b.hits = state.needle ? TL.turns.countHits(b.turn, state.needle) : 0;
        for (let k = 0; k < b.hits; k++) state.hits.push([b, k]);
        if (b.rendered) view.fill(b);
      });
      state.current = -1;
      status.textContent = state.needle ? (state.hits.length ? state.hits.length + " matches" : "no matches") : "";
      if (state.hits.length) move(1);
    }
    function move(delta) {
      if (!state.hits.length) return;
      state.current = (state.current + delta + state.hits.length) % state.hits.length;
      const [block, k] = state.hits[state.current];
      if (!block.rendered) view.fill(block);
      document.querySelectorAll("mark.hit.current").forEach((m) => m.classList.remove("current"));
      const mark = block.el.querySelectorAll("mark.hit")[k];
      if (mark) {
        mark.classList.add("current");
        mark.scrollIntoView({ block: "center" });
      }
      status.textContent = state.current + 1 + " / " + state.hits.length;
    }
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(refresh, 150);
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        clearTimeout(timer);
        if (input.value.trim().toLowerCase() !== state.needle) refresh();
        else move(e.shiftKey ? -1 : 1);
      }
    });
    const bar = h("div", { class: "search-bar" }, input,
      h("button", { type: "button", class: "search-prev", title: "previous match (Shift+Enter)", onclick: () => move(-1) }, "↑ prev"),
      h("button", { type: "button", class: "search-next", title: "next match (Enter)", onclick: () => move(1) }, "↓ next"), status);
    return { bar, state };
  }

  /** Builds placeholders for every turn and fills them as they near the viewport. */
  function makeView(data, overlay) {
    const view = { blocks: [], search: null };
    const observer = new IntersectionObserver((entries) => {
      entries.forEach((entry) => {
        if (!entry.isIntersecting) return;
        const block = entry.target.__block;
        if (block && !block.rendered) view.fill(block);
      });
    }, { rootMargin: "800px 0px" });
    view.fill = (block) => {
      const needle = view.search ? view.search.state.needle : "";
      const badges = overlay ? TL.credit.turnBadges(overlay, block.turn.thread, block.turn.turn) : null;
      const body = TL.turns.render(block.turn, needle, badges);
      if (block.body) block.body.replaceWith(body);
      else block.el.appendChild(body);
      block.body = body;
      block.rendered = true;
      block.el.style.minHeight = "";
      block.el.classList.add("rendered");
      observer.unobserve(block.el);
    };
    const threads = new Map();
    data.turns.forEach((turn) => {
      if (!threads.has(turn.thread)) threads.set(turn.thread, []);
      threads.get(turn.thread).push(turn);
    });
    const info = new Map((data.threads || []).map((t) => [t.thread, t]));
    const sections = [];
    threads.forEach((turns, thread) => {
      const meta = info.get(thread) || {};
      const section = h("section", { class: "thread" + (thread === "main" ? " main-thread" : " side-thread"), "data-thread": thread });
      if (thread !== "main" || threads.size > 1) {
        section.appendChild(h("h3", { class: "thread-heading" }, "thread: " + thread, meta.is_subagent ? h("span", { class: "badge subagent" }, "subagent") : null,
          h("span", { class: "muted small" }, " " + fmtNum(meta.n_messages !== undefined ? meta.n_messages : turns.reduce((n, t) => n + t.messages.length, 0)) + " messages")));
      }
      turns.forEach((turn) => {
        const el = h("div", { class: "turn", "data-thread": thread, "data-turn": turn.turn === null ? "pre" : String(turn.turn) });
        if (overlay) el.appendChild(TL.credit.strips(overlay, thread, turn.turn));
        el.style.minHeight = TL.turns.estimateHeight(turn) + "px";
        const block = { turn, el, rendered: false, body: null, hits: 0 };
        el.__block = block;
        view.blocks.push(block);
        section.appendChild(el);
      });
      sections.push(section);
    });
    view.sections = sections;
    view.observe = () => view.blocks.forEach((b) => observer.observe(b.el));
    view.jump = (thread, turn) => {
      const block = view.blocks.find((b) => b.turn.thread === thread && String(b.turn.turn) === String(turn));
      if (!block) return false;
      if (!block.rendered) view.fill(block);
      block.el.scrollIntoView({ block: "start" });
      // Turns above fill in as they near the viewport and change height: scroll again once settled.
      [120, 400].forEach((ms) => setTimeout(() => block.el.scrollIntoView({ block: "start" }), ms));
      view.blocks.forEach((b) => b.el.classList.remove("current-turn"));
      block.el.classList.add("flash", "current-turn");
      setTimeout(() => block.el.classList.remove("flash"), 1500);
      return true;
    };
    return view;
  }

  function setParam(route, key, value) {
    const params = Object.assign({}, route.params, { [key]: value });
    if (key === "credit" && !value) delete params.credit2;
    delete params.turn;
    delete params.at;
    go(["t", route.path[1]], params);
  }

  async function render(el, route, ctx) {
    const id = route.path[1];
    const at = route.params.at;
    if (!id) throw new Error("no trajectory id in the address");
    const names = [route.params.credit, route.params.credit2].filter((n, i, all) => n && all.indexOf(n) === i);
    const metric = route.params.metric === "advantage" ? "advantage" : "credit";
    const [data, creditRuns] = await Promise.all([getTrajectory(at, id), TL.credit.load(at, id, names)]);
    if (!ctx.isCurrent()) return;
    const overlay = names.length ? TL.credit.overlay(creditRuns, metric) : null;
    const view = makeView(data, overlay);
    const search = makeSearch(view);
    view.search = search;
    el.appendChild(h("div", { class: "crumbs" }, h("a", { href: routeHref(["runs"], withAt()) }, "Runs"), " / ", id));
    el.appendChild(header(data));
    el.appendChild(h("div", { class: "toolbar sticky" }, search.bar, TL.credit.controls(ctx.meta, route.params, (k, v) => setParam(route, k, v), (run) => TL.api.has("credit:" + run + ":" + id))));
    const turnsCol = h("div", { class: "turns" + (overlay ? " with-credit" : "") }, view.sections);
    if (!data.turns.length) turnsCol.appendChild(h("p", { class: "muted" }, "this trajectory has no messages"));
    const layout = h("div", { class: "transcript-layout" + (overlay ? " has-side" : "") }, turnsCol);
    if (overlay) layout.appendChild(TL.credit.sidebar(overlay, (thread, turn) => view.jump(thread, turn)));
    el.appendChild(layout);
    view.observe();
    if (route.params.turn !== undefined) view.jump(route.params.thread || "main", route.params.turn);
  }

  // "/" jumps to the transcript's search box, as in most code viewers.
  document.addEventListener("keydown", (e) => {
    const tag = document.activeElement ? document.activeElement.tagName : "";
    if (e.key !== "/" || tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") return;
    const box = document.querySelector("input.transcript-search");
    if (box) {
      e.preventDefault();
      box.focus();
    }
  });

  TL.transcript = {
    render,
    prefetch(route) {
      if (route.path[1]) getTrajectory(route.params.at, route.path[1]).catch(() => null);
    },
  };
})(window.TL);
