/* Rendering of one turn's messages: roles, reasoning, tool calls with formatted arguments, results
 * with exit codes, edits as diffs, long outputs collapsed, and search hits highlighted.
 * searchTexts() lists exactly the strings render() highlights, so hit counts match the marks. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, fmtNum, fmtCost, fmtMs } = TL.dom;
  const COLLAPSE_LINES = 20;

  function contentText(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    return JSON.stringify(content, null, 2);
  }

  /** Tool-call arguments as a reader wants them: a shell command verbatim, anything else as JSON. */
  function formatArgs(call) {
    const args = call.arguments_json;
    if (args && typeof args === "object" && !Array.isArray(args)) {
      const entries = Object.entries(args);
      if (entries.length === 1 && typeof entries[0][1] === "string") return entries[0][1];
      // Flat arguments read best as "key: value" lines (multi-line strings indented below the key).
      if (entries.every(([, v]) => v === null || typeof v !== "object")) {
        return entries.map(([k, v]) => (typeof v === "string" && v.includes("\n") ? k + ":\n  " + v.split("\n").join("\n  ") : k + ": " + v)).join("\n");
      }
      return JSON.stringify(args, null, 2);
    }
    return call.arguments === null || call.arguments === undefined ? "" : String(call.arguments);
  }

  function countIn(text, needle) {
    if (!needle || !text) return 0;
    const hay = text.toLowerCase();
    let n = 0;
    for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + needle.length)) n += 1;
    return n;
  }

  /** Text nodes with every (case-insensitive) occurrence of needle wrapped in <mark class="hit">. */
  function highlighted(text, needle) {
    if (!needle) return [text];
    const out = [];
    const hay = text.toLowerCase();
    let start = 0;
    for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, start)) {
      if (i > start) out.push(text.slice(start, i));
      out.push(h("mark", { class: "hit" }, text.slice(i, i + needle.length)));
      start = i + needle.length;
    }
    if (start < text.length) out.push(text.slice(start));
    return out;
  }

  /** A text block, collapsed to its first lines with "show all" unless it holds a search hit. */
  function textBlock(text, needle, cls) {
    const lines = text.split("\n");
    const pre = h("pre", { class: "text " + (cls || "") });
    if (lines.length <= COLLAPSE_LINES || countIn(text, needle) > 0) {
      TL.dom.append(pre, highlighted(text, needle));
      return pre;
    }
    TL.dom.append(pre, lines.slice(0, COLLAPSE_LINES).join("\n"));
    const button = h("button", { type: "button", class: "show-all" }, "show all " + fmtNum(lines.length) + " lines");
    const wrap = h("div", { class: "collapsed-block" }, pre, button);
    button.addEventListener("click", () => {
      TL.dom.clear(pre);
      TL.dom.append(pre, highlighted(text, needle));
      button.remove();
      wrap.classList.remove("collapsed-block");
    });
    return wrap;
  }

  function diffBlock(diff, needle) {
    const pre = h("pre", { class: "diff" });
    diff.split("\n").forEach((line, i, all) => {
      if (i === all.length - 1 && line === "") return;
      let cls = "ctx";
      if (line.startsWith("+++") || line.startsWith("---")) cls = "meta";
      else if (line.startsWith("@@")) cls = "hunk";
      else if (line.startsWith("+")) cls = "add";
      else if (line.startsWith("-")) cls = "del";
      pre.appendChild(h("span", { class: "diff-line " + cls }, highlighted(line, needle)));
      pre.appendChild(document.createTextNode("\n"));
    });
    return pre;
  }

  /** Every highlightable string of a turn, in render order. */
  function searchTexts(turn) {
    const out = [];
    for (const m of turn.messages) {
      if (m.reasoning) out.push(m.reasoning);
      out.push(contentText(m.content));
      for (const call of m.tool_calls || []) out.push(formatArgs(call));
    }
    for (const e of turn.edits || []) out.push(e.diff || "");
    return out;
  }

  function countHits(turn, needle) {
    return searchTexts(turn).reduce((n, t) => n + countIn(t, needle), 0);
  }

  function tokenText(m) {
    const parts = [];
    if (m.prompt_tokens !== null && m.prompt_tokens !== undefined) parts.push(fmtNum(m.prompt_tokens) + " in");
    if (m.completion_tokens !== null && m.completion_tokens !== undefined) parts.push(fmtNum(m.completion_tokens) + " out");
    if (m.reasoning_tokens) parts.push(fmtNum(m.reasoning_tokens) + " reasoning");
    if (m.cached_tokens) parts.push(fmtNum(m.cached_tokens) + " cached");
    return parts.join(" · ");
  }

  function resultBadges(m) {
    const out = [];
    if (m.exit_code !== null && m.exit_code !== undefined) {
      out.push(h("span", { class: "badge exit-code " + (m.exit_code === 0 ? "ok" : "bad") }, "exit " + m.exit_code));
    }
    if (m.is_error) out.push(h("span", { class: "badge bad error-badge" }, "error"));
    return out;
  }

  function messageHeader(m) {
    return h("div", { class: "msg-head" },
      h("span", { class: "role" }, m.role), m.name ? h("span", { class: "msg-name" }, m.name) : null,
      m.tool_call_id ? h("span", { class: "muted small" }, "↳ " + m.tool_call_id) : null,
      resultBadges(m),
      m.is_copied_context ? h("span", { class: "badge copied" }, "copied context") : null,
      h("span", { class: "spacer" }),
      m.model ? h("span", { class: "muted small" }, m.model) : null,
      m.finish_reason ? h("span", { class: "muted small" }, m.finish_reason) : null,
      h("span", { class: "muted small" }, tokenText(m)),
      h("span", { class: "muted small" }, "#" + m.idx));
  }

  function toolCall(call, needle) {
    return h("div", { class: "tool-call" },
      h("div", { class: "tool-head" }, h("span", { class: "tool-name" }, call.name || "(unnamed tool)"), call.id ? h("span", { class: "muted small" }, call.id) : null),
      formatArgs(call) ? textBlock(formatArgs(call), needle, "args") : h("div", { class: "muted small" }, "(no arguments)"));
  }

  function message(m, needle) {
    const el = h("div", { class: "msg role-" + m.role + (m.is_copied_context ? " copied-context" : ""), "data-idx": m.idx }, messageHeader(m));
    if (m.reasoning) {
      const details = h("details", { class: "reasoning" }, h("summary", null, "reasoning (" + fmtNum(m.reasoning.length) + " chars)"), textBlock(m.reasoning, needle, "reasoning-text"));
      if (countIn(m.reasoning, needle) > 0) details.open = true;
      el.appendChild(details);
    }
    const text = contentText(m.content);
    // Empty assistant content next to a tool call is the norm; other empty messages say so.
    // Tool output is terminal text (monospace); everything else is prose.
    const kind = m.role === "tool" ? "output" : "content";
    if (text || !(m.tool_calls || []).length) el.appendChild(text ? textBlock(text, needle, kind) : h("div", { class: "muted small" }, "(empty)"));
    (m.tool_calls || []).forEach((c) => el.appendChild(toolCall(c, needle)));
    return el;
  }

  function turnStats(turn) {
    const parts = [];
    if (turn.prompt_tokens !== null && turn.prompt_tokens !== undefined) parts.push(fmtNum(turn.prompt_tokens) + " in");
    if (turn.completion_tokens !== null && turn.completion_tokens !== undefined) parts.push(fmtNum(turn.completion_tokens) + " out");
    if (turn.cost_usd !== null && turn.cost_usd !== undefined) parts.push(fmtCost(turn.cost_usd));
    if (turn.latency_ms !== null && turn.latency_ms !== undefined) parts.push(fmtMs(turn.latency_ms));
    return parts.join(" · ");
  }

  /** Renders a turn's body: header (number, stats, credit), messages, edits. */
  function render(turn, needle, creditBadges) {
    const title = turn.turn === null || turn.turn === undefined ? "before the first turn" : "turn " + turn.turn;
    const body = h("div", { class: "turn-body" },
      h("div", { class: "turn-head" }, h("span", { class: "turn-title" }, title), h("span", { class: "muted small turn-stats" }, turnStats(turn)), creditBadges));
    turn.messages.forEach((m) => body.appendChild(message(m, needle)));
    (turn.edits || []).forEach((e) => body.appendChild(h("div", { class: "edit" },
      h("div", { class: "edit-head" }, h("span", { class: "badge" }, e.kind), " ", e.path || "(path unknown)"),
      diffBlock(e.diff || "", needle))));
    return body;
  }

  /** A height guess for an unrendered turn, so the scroll bar is roughly right before rendering. */
  function estimateHeight(turn) {
    let px = 34;
    for (const m of turn.messages) {
      const lines = contentText(m.content).split("\n").length + (m.tool_calls || []).reduce((n, c) => n + formatArgs(c).split("\n").length + 1, 0);
      px += 30 + Math.min(lines, COLLAPSE_LINES + 1) * 17 + (m.reasoning ? 24 : 0);
    }
    for (const e of turn.edits || []) px += 30 + (e.diff || "").split("\n").length * 17;
    return px;
  }

  TL.turns = { render, countHits, estimateHeight, searchTexts, diffBlock, textBlock, contentText };
})(window.TL);
