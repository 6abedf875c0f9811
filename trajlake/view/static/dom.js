/* DOM helpers shared by every page: element builder, formatting, error boxes, hash routes. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  /** h("div", {class: "x", onclick: f}, child, "text", [more]) builds an element. */
  function h(tag, attrs) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [key, value] of Object.entries(attrs)) {
        if (value === undefined || value === null || value === false) continue;
        if (key.startsWith("on") && typeof value === "function") {
          el.addEventListener(key.slice(2), value);
        } else if (key === "dataset") {
          Object.assign(el.dataset, value);
        } else if (key === "style") {
          // Through the CSSOM: the server's Content-Security-Policy blocks style attributes.
          el.style.cssText = value;
        } else if (key === "text") {
          el.textContent = value;
        } else {
          el.setAttribute(key, value === true ? "" : String(value));
        }
      }
    }
    for (let i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }

  function append(el, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) {
      child.forEach((c) => append(el, c));
    } else if (child instanceof Node) {
      el.appendChild(child);
    } else {
      el.appendChild(document.createTextNode(String(child)));
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  function fmtNum(value, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return value.toFixed(digits === undefined ? 3 : digits);
  }

  function fmtCost(value) {
    if (value === null || value === undefined) return "–";
    return "$" + (value < 0.01 ? value.toFixed(4) : value.toFixed(2));
  }

  function fmtMs(value) {
    if (value === null || value === undefined) return "–";
    return value >= 1000 ? (value / 1000).toFixed(1) + " s" : Math.round(value) + " ms";
  }

  function fmtTime(value) {
    if (!value) return "–";
    return String(value).replace("T", " ").replace(/\.\d+/, "").replace(/\+00:00$|Z$/, "");
  }

  /** A resolved / failed / unknown badge for an outcome value (true, false, null). */
  function outcomeBadge(resolved) {
    if (resolved === true) return h("span", { class: "badge ok" }, "resolved");
    if (resolved === false) return h("span", { class: "badge bad" }, "failed");
    return h("span", { class: "badge" }, "unknown");
  }

  /** A readable error box: message, the offending parameter and the HTTP status when known. */
  function errorBox(err, context) {
    const box = h("div", { class: "error-box", role: "alert" });
    box.appendChild(h("strong", null, context ? context + ": " : "Error: "));
    box.appendChild(h("span", { class: "error-message" }, (err && err.message) || String(err)));
    if (err && err.field) box.appendChild(h("span", { class: "muted" }, " (parameter " + err.field + ")"));
    if (err && err.status) box.appendChild(h("span", { class: "muted" }, " [HTTP " + err.status + "]"));
    return box;
  }

  /** Parses "#/t/<id>?a=b" into {path: ["t", id], params: {a: "b"}}. */
  function parseHash(hash) {
    const raw = (hash || "").replace(/^#\/?/, "");
    const q = raw.indexOf("?");
    const pathPart = q >= 0 ? raw.slice(0, q) : raw;
    const params = {};
    new URLSearchParams(q >= 0 ? raw.slice(q + 1) : "").forEach((v, k) => {
      params[k] = v;
    });
    const path = pathPart.split("/").filter((s) => s !== "").map(decodeURIComponent);
    return { path: path.length ? path : ["runs"], params };
  }

  /** Builds a hash route; empty parameters are dropped so links stay short. */
  function routeHref(path, params) {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== "") qs.set(k, String(v));
    }
    const s = qs.toString();
    return "#/" + path.map(encodeURIComponent).join("/") + (s ? "?" + s : "");
  }

  /** The current route's `at`, carried into every link so switching snapshots sticks. */
  function withAt(params) {
    const at = parseHash(location.hash).params.at;
    return Object.assign(at ? { at } : {}, params || {});
  }

  function go(path, params) {
    location.hash = routeHref(path, withAt(params));
  }

  TL.dom = {
    h, append, clear, fmtNum, fmtCost, fmtMs, fmtTime, outcomeBadge, errorBox,
    parseHash, routeHref, withAt, go,
  };
})(window.TL);
