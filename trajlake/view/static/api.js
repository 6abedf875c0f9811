/* Data access: fetch() from the server's /api, or the payload scripts of a static bundle.
 * A page opened from file:// cannot fetch(), so in bundle mode each payload is a classic script that
 * calls window.trajlakeBundleLoad(key, payload); runs, groups and tasks are computed here from the
 * bundle's rows with the same parameters the server takes. */
"use strict";
window.TL = window.TL || {};

(function (TL) {
  const bundle = window.TRAJLAKE_BUNDLE || null;
  const loaded = new Map(); // key -> payload (bundle mode)
  const waiting = new Map(); // key -> [resolve, reject] callbacks

  window.trajlakeBundleLoad = function (key, payload) {
    loaded.set(key, payload);
    const callbacks = waiting.get(key) || [];
    waiting.delete(key);
    callbacks.forEach((cb) => cb[0](payload));
  };

  class ApiError extends Error {
    constructor(message, status, field) {
      super(message);
      this.status = status || null;
      this.field = field || null;
    }
  }

  function query(params) {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== "") qs.set(k, String(v));
    }
    const s = qs.toString();
    return s ? "?" + s : "";
  }

  async function serverGet(endpoint, params) {
    // Relative URL: the page is served at the server's root, so this stays on its origin.
    let response;
    try {
      response = await fetch("api/" + endpoint + query(params), { headers: { Accept: "application/json" } });
    } catch (e) {
      throw new ApiError("cannot reach the trajlake server (" + e.message + ")");
    }
    const text = await response.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (e) {
      body = null;
    }
    if (!response.ok) {
      const message = body && body.error ? body.error : text.slice(0, 300) || response.statusText;
      throw new ApiError(message, response.status, body && body.field);
    }
    if (body === null) throw new ApiError("the server sent no JSON for " + endpoint, response.status);
    return body;
  }

  function loadBundleFile(key) {
    if (loaded.has(key)) return Promise.resolve(loaded.get(key));
    const file = bundle.files && bundle.files[key];
    if (!file) return Promise.reject(new ApiError("this bundle does not contain " + key, 404));
    return new Promise((resolve, reject) => {
      const first = !waiting.has(key);
      if (first) waiting.set(key, []);
      waiting.get(key).push([resolve, reject]);
      if (!first) return;
      const script = document.createElement("script");
      script.src = file;
      script.onerror = () => {
        const callbacks = waiting.get(key) || [];
        waiting.delete(key);
        callbacks.forEach((cb) => cb[1](new ApiError("cannot load " + file + " from the bundle", 404)));
      };
      script.onload = () => {
        if (!loaded.has(key)) {
          const callbacks = waiting.get(key) || [];
          waiting.delete(key);
          callbacks.forEach((cb) => cb[1](new ApiError(file + " did not register " + key)));
        }
      };
      document.head.appendChild(script);
    });
  }

  // ---- client-side runs / groups / tasks over the bundle's rows ----

  const FILTER_KEYS = ["harness", "policy_model", "generation", "run_id", "task_id"];

  function rowTags(row) {
    return Array.isArray(row.tags) ? row.tags : [];
  }

  function matches(row, params) {
    for (const key of FILTER_KEYS) {
      if (params[key] !== undefined && params[key] !== "" && String(row[key]) !== String(params[key])) return false;
    }
    if (params.tag && !rowTags(row).includes(params.tag)) return false;
    if (params.resolved) {
      const want = { true: true, false: false, unknown: null }[params.resolved];
      const have = row.resolved === undefined ? null : row.resolved;
      if (have !== want) return false;
    }
    if (params.q) {
      const q = params.q.toLowerCase();
      if (!String(row.trajectory_id).toLowerCase().includes(q) && !String(row.task_id).toLowerCase().includes(q)) {
        return false;
      }
    }
    return true;
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return -1;
    if (b === null || b === undefined) return 1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    if (typeof a === "boolean" && typeof b === "boolean") return (a ? 1 : 0) - (b ? 1 : 0);
    return String(a) < String(b) ? -1 : 1;
  }

  function bundleRuns(params) {
    if (params.where) throw new ApiError("SQL predicates need the server (a bundle has no SQL engine)", 400, "where");
    const started = performance.now();
    const sort = params.sort || "started_at";
    const sign = (params.order || "desc") === "asc" ? 1 : -1;
    const rows = bundle.runs.filter((r) => matches(r, params));
    rows.sort((a, b) => sign * compare(a[sort], b[sort]) || compare(a.trajectory_id, b.trajectory_id));
    const offset = Math.max(0, parseInt(params.offset || "0", 10));
    const limit = Math.min(500, Math.max(1, parseInt(params.limit || "50", 10)));
    return {
      total: rows.length, offset, limit, elapsed_ms: performance.now() - started,
      rows: rows.slice(offset, offset + limit),
    };
  }

  function bundleGroups(params) {
    const by = params.by || "harness";
    const groups = new Map();
    for (const row of bundle.runs.filter((r) => matches(r, params))) {
      const keys = by === "tag" ? rowTags(row) : [row[by]];
      for (const key of keys) {
        const g = groups.get(key) || { key, n: 0, n_resolved: 0, n_labelled: 0 };
        g.n += 1;
        if (row.resolved === true) g.n_resolved += 1;
        if (row.resolved === true || row.resolved === false) g.n_labelled += 1;
        groups.set(key, g);
      }
    }
    const rows = Array.from(groups.values());
    rows.forEach((g) => {
      g.success_rate = g.n_labelled ? g.n_resolved / g.n_labelled : null;
    });
    rows.sort((a, b) => b.n - a.n || compare(a.key, b.key));
    return { by, rows };
  }

  function bundleGet(endpoint, params) {
    switch (endpoint) {
      case "meta":
        return Promise.resolve(bundle.meta);
      case "lake":
        return Promise.resolve(bundle.lake);
      case "runs":
        return Promise.resolve().then(() => bundleRuns(params));
      case "groups":
        return Promise.resolve().then(() => bundleGroups(params));
      case "tasks":
        return Promise.resolve({ total: (bundle.tasks || []).length, rows: bundle.tasks || [] });
      case "trajectory":
        return loadBundleFile("trajectory:" + params.id);
      case "credit":
        return loadBundleFile("credit:" + params.run + ":" + params.id);
      case "candidates":
        return loadBundleFile("candidates:" + params.task_id);
      default:
        return Promise.reject(new ApiError("unknown endpoint " + endpoint, 404));
    }
  }

  TL.api = {
    mode: bundle ? "bundle" : "server",
    ApiError,
    /** get("runs", {at, harness, ...}) -> Promise of the endpoint's JSON payload. */
    get(endpoint, params) {
      return bundle ? bundleGet(endpoint, params || {}) : serverGet(endpoint, params || {});
    },
    /** Whether a bundle holds this payload (links to missing pages are drawn as plain text). */
    has(key) {
      return !bundle || Boolean(bundle.files && bundle.files[key]);
    },
  };
})(window.TL);
