// Shared helpers of the dashboard pages: DOM building with text nodes only (nothing from the server is
// ever parsed as HTML), JSON fetching with readable errors, URL-kept view state, polling, formatting,
// smoothing and intervals for the charts (ECharts, vendored).
"use strict";

const A3R = (() => {
  const body = document.body;
  const refreshMs = Number(body.dataset.refreshMs) || 2000;

  /** el("a", {href: "/x", class: "c"}, "text", child) -> element; strings become text nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k === "style") Object.assign(node.style, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function replace(node, ...children) {
    node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  }

  async function getJSON(url) {
    const resp = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    const data = await resp.json().catch(() => null);
    if (!resp.ok) throw new Error((data && data.error && data.error.message) || `HTTP ${resp.status} from ${url}`);
    return data;
  }

  /** URL with query parameters, dropping empty ones. */
  function url(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
    const s = q.toString();
    return s ? `${path}?${s}` : path;
  }

  // View state lives in the address bar so a link reproduces the view.
  const state = {
    get(key, fallback = "") {
      const v = new URLSearchParams(location.search).get(key);
      return v === null ? fallback : v;
    },
    set(changes) {
      const q = new URLSearchParams(location.search);
      for (const [k, v] of Object.entries(changes)) {
        if (v === null || v === undefined || v === "" || v === false) q.delete(k);
        else q.set(k, v);
      }
      history.replaceState(null, "", `${location.pathname}?${q.toString()}`);
    },
  };

  /** For the few places a library takes an HTML string (ECharts tooltip formatters). */
  function escape(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  function fmt(v, digits = 4) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return String(Number(v.toPrecision(digits)));
  }

  function ago(seconds) {
    if (seconds === null || seconds === undefined) return "";
    if (seconds < 60) return `${seconds.toFixed(1)} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    return `${(seconds / 3600).toFixed(1)} h ago`;
  }

  function when(ts) {
    return ts ? new Date(ts * 1000).toLocaleString() : "";
  }

  function badge(stateName, extra) {
    return el("span", { class: `badge state-${stateName}${extra ? " " + extra : ""}` }, stateName);
  }

  function bar(frac, label) {
    const pct = Math.max(0, Math.min(1, frac || 0)) * 100;
    return el("span", { class: "bar", title: label || `${pct.toFixed(0)}%` },
      el("span", { class: "fill", style: { width: `${pct}%` } }), el("span", { class: "bar-label" }, label || `${pct.toFixed(0)}%`));
  }

  /** Run `fn` now and every refresh; the header shows the last success or the error. */
  function poll(fn, every = refreshMs) {
    const live = document.getElementById("live");
    async function tick() {
      try {
        await fn();
        live.textContent = `updated ${new Date().toLocaleTimeString()}`;
        live.classList.remove("error");
      } catch (e) {
        live.textContent = `refresh failed: ${e.message}`;
        live.classList.add("error");
      }
      setTimeout(tick, every);
    }
    tick();
  }

  const charts = [];
  function chart(node) {
    const c = echarts.init(node, null, { renderer: "canvas" });
    charts.push(c);
    return c;
  }
  window.addEventListener("resize", () => charts.forEach((c) => c.resize()));

  /** Exponential moving average, debiased like TensorBoard's; null (NaN logged) points are skipped. */
  function smooth(points, weight) {
    if (!weight) return points.filter((p) => p[1] !== null);
    const out = [];
    let last = 0;
    let n = 0;
    for (const [step, v] of points) {
      if (v === null) continue;
      last = last * weight + (1 - weight) * v;
      n += 1;
      out.push([step, last / (1 - Math.pow(weight, n))]);
    }
    return out;
  }

  // Two-sided 95% Student t quantiles for 1..30 degrees of freedom (normal beyond).
  const T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145,
    2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042];

  /** Per step over several series: [step, mean, lo, hi, n] with a 95% t interval (lo = hi = mean for n = 1). */
  function meanInterval(seriesList) {
    const bySteps = new Map();
    for (const s of seriesList) for (const [step, v] of s) {
      if (!bySteps.has(step)) bySteps.set(step, []);
      bySteps.get(step).push(v);
    }
    const out = [];
    for (const step of [...bySteps.keys()].sort((a, b) => a - b)) {
      const vs = bySteps.get(step);
      const n = vs.length;
      const mean = vs.reduce((a, b) => a + b, 0) / n;
      let half = 0;
      if (n > 1) {
        const sd = Math.sqrt(vs.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1));
        half = (T95[n - 2] || 1.96) * sd / Math.sqrt(n);
      }
      out.push([step, mean, mean - half, mean + half, n]);
    }
    return out;
  }

  return { el, replace, getJSON, url, state, escape, fmt, ago, when, badge, bar, poll, chart, smooth, meanInterval, refreshMs, body };
})();
