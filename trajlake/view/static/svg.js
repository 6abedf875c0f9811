/* SVG drawing helpers: element builder, the diverging credit colour scale, and small charts. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const NS = "http://www.w3.org/2000/svg";

  function s(tag, attrs) {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, String(v));
    }
    for (let i = 2; i < arguments.length; i++) {
      const c = arguments[i];
      if (c) el.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return el;
  }

  // Red (negative) - white (zero) - green (positive): the sign is what a reader looks for first.
  const NEG = [215, 48, 39];
  const MID = [247, 247, 247];
  const POS = [26, 152, 80];

  function mix(a, b, t) {
    return a.map((x, i) => Math.round(x + (b[i] - x) * t));
  }

  /** Colour for value v on a symmetric scale [-maxAbs, maxAbs]; null for a missing value. */
  function divergingColor(v, maxAbs) {
    if (v === null || v === undefined || Number.isNaN(v)) return null;
    const t = maxAbs > 0 ? Math.max(-1, Math.min(1, v / maxAbs)) : 0;
    const rgb = t < 0 ? mix(MID, NEG, -t) : mix(MID, POS, t);
    return "rgb(" + rgb.join(",") + ")";
  }

  /** A horizontal legend strip for the diverging scale, labelled with its range. */
  function legend(maxAbs, label) {
    const width = 160;
    const g = s("svg", { width: width + 80, height: 26, class: "legend", role: "img", "aria-label": label });
    const steps = 16;
    for (let i = 0; i < steps; i++) {
      const v = -maxAbs + (2 * maxAbs * (i + 0.5)) / steps;
      g.appendChild(s("rect", { x: 40 + (i * width) / steps, y: 2, width: width / steps + 0.5, height: 10, fill: divergingColor(v, maxAbs) }));
    }
    g.appendChild(s("text", { x: 36, y: 11, "text-anchor": "end", class: "axis", text: (-maxAbs).toFixed(2) }));
    g.appendChild(s("text", { x: 44 + width, y: 11, class: "axis", text: "+" + maxAbs.toFixed(2) }));
    g.appendChild(s("text", { x: 40 + width / 2, y: 24, "text-anchor": "middle", class: "axis", text: label }));
    return g;
  }

  /** Linear scale helper: maps [d0, d1] to [r0, r1]. */
  function scale(d0, d1, r0, r1) {
    const span = d1 - d0 || 1;
    return (v) => r0 + ((v - d0) / span) * (r1 - r0);
  }

  TL.svg = { s, divergingColor, legend, scale };
})(window.TL);
