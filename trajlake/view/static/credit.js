/* Credit overlay for the transcript page: run pickers, per-turn colours on a diverging scale
 * (credit or advantage), and the V(s_t) curve per run with rise segments and loss-mask spans. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, fmtNum, errorBox } = TL.dom;
  const { s, divergingColor, legend, scale } = TL.svg;

  function turnKey(thread, turn) {
    return thread + "|" + turn;
  }

  /** Loads the chosen runs for one trajectory; a run without rows for it becomes {error}. */
  async function load(at, id, names) {
    return Promise.all(names.map(async (name) => {
      try {
        return { name, payload: await TL.api.get("credit", { at, id, run: name }) };
      } catch (err) {
        return { name, error: err };
      }
    }));
  }

  /** Indexes loaded runs by turn and fixes each run's symmetric colour range for `metric`. */
  function overlay(loadedRuns, metric) {
    const runs = loadedRuns.filter((r) => r.payload).map((r) => {
      const rows = new Map();
      let maxAbs = 0;
      for (const row of r.payload.turns || []) {
        rows.set(turnKey(row.thread, row.turn), row);
        const v = row[metric];
        if (typeof v === "number" && Number.isFinite(v)) maxAbs = Math.max(maxAbs, Math.abs(v));
      }
      return { name: r.name, payload: r.payload, rows, maxAbs: maxAbs || 1 };
    });
    const failed = loadedRuns.filter((r) => r.error);
    return {
      metric, runs, failed,
      row(run, thread, turn) {
        return run.rows.get(turnKey(thread, turn)) || null;
      },
      color(run, thread, turn) {
        const row = run.rows.get(turnKey(thread, turn));
        return row ? divergingColor(row[metric], run.maxAbs) : null;
      },
    };
  }

  function runSelect(meta, name, value, label, onChange, covers) {
    // Offer only the runs that have rows for this trajectory where that is known (a bundle).
    const runs = (meta.credit_runs || []).filter((r) => covers(r.run_name));
    const select = h("select", { name, "aria-label": label, onchange: (e) => onChange(name, e.target.value) },
      h("option", { value: "" }, name === "credit" ? "no credit overlay" : "no second run"),
      runs.map((r) => h("option", { value: r.run_name }, r.run_name + " · " + r.estimator + " (" + fmtNum(r.n_trajectories) + " traj.)")));
    if (value && !runs.some((r) => r.run_name === value)) select.appendChild(h("option", { value }, value));
    select.value = value || "";
    return h("label", { class: "field" }, label, select);
  }

  /** The pickers: credit run, second run (side by side) and the credit / advantage toggle. */
  function controls(meta, params, onChange, covers) {
    const metric = params.metric === "advantage" ? "advantage" : "credit";
    const toggle = h("span", { class: "segmented", role: "radiogroup", "aria-label": "colour by" },
      ["credit", "advantage"].map((m) => h("button", { type: "button", class: "metric-" + m + (m === metric ? " on" : ""), "aria-pressed": m === metric ? "true" : "false",
        onclick: () => onChange("metric", m === "credit" ? "" : m) }, m)));
    const bar = h("div", { class: "credit-controls" },
      runSelect(meta, "credit", params.credit, "credit run", onChange, covers),
      params.credit ? runSelect(meta, "credit2", params.credit2, "compare with", onChange, covers) : null,
      params.credit ? toggle : null);
    if (!(meta.credit_runs || []).length) bar.appendChild(h("span", { class: "muted" }, "no credit runs in this snapshot"));
    return bar;
  }

  /** Run-level facts shown above its curve. */
  function runSummary(run) {
    const p = run.payload;
    let params = p.params;
    if (typeof params === "string") {
      try {
        params = JSON.parse(params);
      } catch (e) {
        /* keep the raw string */
      }
    }
    const brief = params && typeof params === "object"
      ? Object.entries(params).filter(([, v]) => v !== null && typeof v !== "object").map(([k, v]) => k + "=" + v).join(" ")
      : String(params || "");
    return h("div", { class: "run-summary" },
      h("strong", null, run.name), " ", h("span", { class: "muted" }, p.estimator || ""),
      h("div", { class: "muted small" }, brief), p.source_snapshot !== undefined ? h("div", { class: "muted small" }, "computed from snapshot " + p.source_snapshot) : null);
  }

  /** Contiguous runs of turns where pred(row) holds: [[firstIndex, lastIndex, row], …]. */
  function spans(rows, pred, keyOf) {
    const out = [];
    rows.forEach((row, i) => {
      if (!pred(row)) return;
      const last = out[out.length - 1];
      if (last && last[1] === i - 1 && keyOf(last[2]) === keyOf(row)) last[1] = i;
      else out.push([i, i, row]);
    });
    return out;
  }

  /** The V(s_t) curve of one run over the main thread, one marker per credited turn. */
  function curve(run, metric, onPick, index) {
    const rows = Array.from(run.rows.values()).filter((r) => r.thread === "main" && r.turn !== null).sort((a, b) => a.turn - b.turn);
    const W = 300, H = 190, L = 34, R = 10, T = 10, B = 46;
    const svg = s("svg", { class: "value-curve", "data-run": run.name, viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", "aria-label": "V(s_t) of " + run.name });
    if (!rows.length) {
      svg.appendChild(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis", text: "no main-thread turns" }));
      return svg;
    }
    const values = rows.flatMap((r) => [r.value_before, r.value_after]).filter((v) => typeof v === "number");
    const lo = Math.min(0, ...values);
    const hi = Math.max(1, ...values);
    const x = scale(0, Math.max(1, rows.length - 1), L, W - R);
    const y = scale(lo, hi, H - B, T);
    const step = rows.length > 1 ? x(1) - x(0) : W - L - R;
    // Rise segments: alternating bands behind the curve.
    spans(rows, (r) => r.segment_id !== null && r.segment_id !== undefined, (r) => r.segment_id).forEach(([a, b, r]) => {
      svg.appendChild(s("rect", { class: "segment-band seg-" + (r.segment_id % 2), x: x(a) - step / 2, y: T, width: (b - a + 1) * step, height: H - B - T },
        s("title", { text: "segment " + r.segment_id }) ));
    });
    // Loss-mask spans: a bar under the plot where the turn is trained on.
    spans(rows, (r) => r.mask === true || (typeof r.weight === "number" && r.weight > 0), () => 0).forEach(([a, b]) => {
      svg.appendChild(s("rect", { class: "mask-span", x: x(a) - step / 2, y: H - B + 6, width: (b - a + 1) * step, height: 6 }, s("title", { text: "in the loss" })));
    });
    svg.appendChild(s("line", { class: "axis-line", x1: L, y1: H - B, x2: W - R, y2: H - B }));
    svg.appendChild(s("line", { class: "axis-line", x1: L, y1: T, x2: L, y2: H - B }));
    [lo, (lo + hi) / 2, hi].forEach((v) => svg.appendChild(s("text", { class: "axis", x: L - 4, y: y(v) + 3, "text-anchor": "end", text: v.toFixed(2) })));
    svg.appendChild(s("text", { class: "axis", x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle", text: "turn (V before each turn; bar: in loss)" }));
    svg.appendChild(s("text", { class: "axis", x: L, y: H - B + 24, "text-anchor": "middle", text: String(rows[0].turn) }));
    svg.appendChild(s("text", { class: "axis", x: W - R, y: H - B + 24, "text-anchor": "middle", text: String(rows[rows.length - 1].turn) }));
    const pts = rows.filter((r) => typeof r.value_before === "number").map((r) => x(rows.indexOf(r)) + "," + y(r.value_before));
    svg.appendChild(s("polyline", { class: "v-line run-" + index, points: pts.join(" ") }));
    rows.forEach((r, i) => {
      const v = typeof r.value_before === "number" ? r.value_before : lo;
      const c = divergingColor(r[metric], run.maxAbs) || "#999";
      svg.appendChild(s("circle", { class: "v-point", "data-turn": r.turn, cx: x(i), cy: y(v), r: rows.length > 120 ? 2.5 : 4, fill: c,
        onclick: () => onPick("main", r.turn) },
        s("title", { text: "turn " + r.turn + ": V " + fmtNum(r.value_before) + " → " + fmtNum(r.value_after) + ", " + metric + " " + fmtNum(r[metric]) })));
    });
    return svg;
  }

  /** The sidebar: one block per run (summary, legend, curve) and the runs that have no rows here. */
  function sidebar(ov, onPick) {
    const side = h("aside", { class: "credit-side" });
    ov.runs.forEach((run, i) => {
      side.appendChild(h("div", { class: "credit-run run-" + i, "data-run": run.name },
        runSummary(run), legend(run.maxAbs, ov.metric), curve(run, ov.metric, onPick, i)));
    });
    ov.failed.forEach((r) => side.appendChild(errorBox(r.error, "Credit run " + r.name)));
    return side;
  }

  /** The per-turn strip(s) and the one-line credit summary for a turn. */
  function strips(ov, thread, turn) {
    return h("div", { class: "strips" }, ov.runs.map((run, i) => {
      const row = ov.row(run, thread, turn);
      const color = row ? divergingColor(row[ov.metric], run.maxAbs) : null;
      return h("span", { class: "strip strip-" + i + (row ? " has-credit" : ""), style: color ? "background:" + color : null,
        title: row ? run.name + ": " + ov.metric + " " + fmtNum(row[ov.metric]) : run.name + ": no credit for this turn" });
    }));
  }

  function turnBadges(ov, thread, turn) {
    return ov.runs.map((run, i) => {
      const row = ov.row(run, thread, turn);
      if (!row) return null;
      const masked = row.mask === false || row.weight === 0;
      return h("span", { class: "credit-badge run-" + i },
        h("span", { class: "swatch", style: "background:" + divergingColor(row[ov.metric], run.maxAbs) }),
        (ov.runs.length > 1 ? run.name + ": " : "") + ov.metric + " " + (row[ov.metric] >= 0 ? "+" : "") + fmtNum(row[ov.metric]),
        " · V " + fmtNum(row.value_before, 2) + "→" + fmtNum(row.value_after, 2),
        row.segment_id !== null && row.segment_id !== undefined ? h("span", { class: "badge seg" }, "seg " + row.segment_id) : null,
        h("span", { class: "badge " + (masked ? "masked" : "in-loss") }, masked ? "masked" : "w " + fmtNum(row.weight, 2)));
    });
  }

  TL.credit = { load, overlay, controls, sidebar, strips, turnBadges, curve };
})(window.TL);
