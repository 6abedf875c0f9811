/* The page shell: hash router, header (lake, snapshot switcher, nav) and page-level error display.
 * Routes: #/runs?<filters>, #/t/<id>?credit=RUN&credit2=RUN2&turn=N, #/candidates/<task_id>?model=M,
 * #/lake; every route takes at=REF (a tag or a snapshot number). */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const { h, clear, parseHash, routeHref, errorBox } = TL.dom;
  const metaCache = new Map();
  let renderSeq = 0;

  const PAGES = {
    runs: (el, route, ctx) => TL.runs.render(el, route, ctx),
    t: (el, route, ctx) => TL.transcript.render(el, route, ctx),
    candidates: (el, route, ctx) => TL.candidates.render(el, route, ctx),
    lake: (el, route, ctx) => TL.lake.render(el, route, ctx),
  };

  const MODULES = { runs: TL.runs, t: TL.transcript, candidates: TL.candidates, lake: TL.lake };

  function getMeta(at) {
    const key = at || "";
    if (!metaCache.has(key)) {
      const p = TL.api.get("meta", { at });
      p.catch(() => metaCache.delete(key));
      metaCache.set(key, p);
    }
    return metaCache.get(key);
  }

  function refLabel(ref) {
    if (ref.kind === "tag") return ref.ref + " (tag, snapshot " + ref.snapshot + ")";
    const op = ref.operation ? " · " + ref.operation : "";
    return "snapshot " + ref.snapshot + op;
  }

  function renderHeader(meta, route) {
    document.getElementById("lake-name").textContent = meta ? meta.lake : "";
    const badge = document.getElementById("mode-badge");
    badge.textContent = TL.api.mode === "bundle" ? "bundle (read from disk)" : "read-only";
    const select = document.getElementById("ref-select");
    clear(select);
    const at = route.params.at || "";
    const latest = meta && meta.latest_snapshot !== undefined ? " (" + meta.latest_snapshot + ")" : "";
    select.appendChild(h("option", { value: "" }, "latest" + latest));
    const refs = (meta && meta.refs) || [];
    const tags = refs.filter((r) => r.kind === "tag");
    const snaps = refs.filter((r) => r.kind !== "tag");
    if (tags.length) select.appendChild(h("optgroup", { label: "tags" }, tags.map((r) => h("option", { value: r.ref }, refLabel(r)))));
    if (snaps.length) select.appendChild(h("optgroup", { label: "snapshots" }, snaps.map((r) => h("option", { value: r.ref }, refLabel(r)))));
    if (at && !refs.some((r) => r.ref === at)) select.appendChild(h("option", { value: at }, at));
    select.value = at;
    // A bundle holds one snapshot: the switcher shows it but cannot change it.
    select.disabled = TL.api.mode === "bundle";
    select.title = TL.api.mode === "bundle" ? "a bundle holds one snapshot" : "read the lake at another snapshot or tag";
    document.querySelectorAll("[data-nav]").forEach((a) => {
      a.classList.toggle("active", a.dataset.nav === route.path[0] || (a.dataset.nav === "runs" && route.path[0] === "t"));
      a.setAttribute("href", routeHref([a.dataset.nav], at ? { at } : {}));
    });
  }

  function onRefChange(event) {
    const route = parseHash(location.hash);
    const params = Object.assign({}, route.params, { at: event.target.value });
    // Page offsets belong to the old snapshot's result set.
    delete params.offset;
    location.hash = routeHref(route.path, params);
  }

  async function render() {
    const seq = ++renderSeq;
    const route = parseHash(location.hash);
    const app = document.getElementById("app");
    let meta = null;
    // A page may start its own request now rather than after the metadata arrives.
    const module = MODULES[route.path[0]];
    if (module && module.prefetch) module.prefetch(route);
    try {
      meta = await getMeta(route.params.at);
    } catch (err) {
      if (seq !== renderSeq) return;
      renderHeader(null, route);
      clear(app).appendChild(errorBox(err, "Cannot read the lake at " + (route.params.at || "latest")));
      return;
    }
    if (seq !== renderSeq) return;
    renderHeader(meta, route);
    const page = PAGES[route.path[0]];
    clear(app);
    if (!page) {
      app.appendChild(errorBox(new Error("no page " + route.path.join("/") + "; try Runs or Lake")));
      return;
    }
    const ctx = { meta, seq, isCurrent: () => seq === renderSeq };
    try {
      await page(app, route, ctx);
    } catch (err) {
      if (seq !== renderSeq) return;
      app.appendChild(errorBox(err));
    }
  }

  function showBanner(message) {
    const banner = document.getElementById("banner");
    banner.hidden = false;
    banner.textContent = "Page error: " + message;
  }

  window.addEventListener("error", (e) => showBanner(e.message));
  window.addEventListener("unhandledrejection", (e) => showBanner((e.reason && e.reason.message) || String(e.reason)));
  window.addEventListener("hashchange", render);
  document.getElementById("ref-select").addEventListener("change", onRefChange);
  TL.app = { render, getMeta };
  render();
})(window.TL);
