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
  const dark = window.matchMedia("(prefers-color-scheme: dark)").matches; // the system setting
  /** An ECharts chart in the page's colour scheme (ECharts' own dark theme when the system is dark). */
  function chart(node) {
    const c = echarts.init(node, dark ? "dark" : null, { renderer: "canvas" });
    if (dark) c.setOption({ backgroundColor: "transparent" });
    charts.push(c);
    return c;
  }
  window.addEventListener("resize", () => charts.forEach((c) => c.resize()));

  // An EMA of weight w averages over about 1/(1-w) points; on a short series that window would drag the
  // last value towards the first ones (a 2-point curve's final 0.69 became 0.52), so the window is capped
  // at a fifth of the series: series of 5 points or fewer are never smoothed.
  const MAX_WINDOW_SHARE = 5;
  function effectiveWeight(weight, n) {
    return Math.max(0, Math.min(weight, 1 - MAX_WINDOW_SHARE / n));
  }

  /** Debiased exponential moving average (TensorBoard's) with the weight capped by the series' length
   * (`effectiveWeight`); null (NaN logged) points are skipped. Returns [step, smoothed, raw] triples. */
  function smooth(points, weight) {
    const kept = points.filter((p) => p[1] !== null);
    const w = effectiveWeight(weight || 0, kept.length);
    const out = [];
    let last = 0;
    let n = 0;
    for (const [step, v] of kept) {
      if (!w) { out.push([step, v, v]); continue; }
      last = last * w + (1 - w) * v;
      n += 1;
      out.push([step, last / (1 - Math.pow(w, n)), v]);
    }
    return out;
  }

  /** Append `fresh` (step, value) points to `held` in place, keeping only steps after the last one held:
   * an answer that arrives twice (two refreshes racing) cannot duplicate points. */
  function appendPoints(held, fresh) {
    let last = held.length ? held[held.length - 1][0] : -Infinity;
    for (const p of fresh) if (p[0] > last) { held.push(p); last = p[0]; }
    return held;
  }

  /** Run async `fn` calls one after another: a call made while one runs waits for it (so two refreshes
   * never both ask for the same points). */
  function serial(fn) {
    let chain = Promise.resolve();
    return (...args) => (chain = chain.catch(() => {}).then(() => fn(...args)));
  }

  // Series shorter than this get a marker on every point (a one-point series is otherwise invisible).
  const MARKER_POINTS = 30;
  function markers(n) {
    return { showSymbol: n <= MARKER_POINTS, symbol: "circle", symbolSize: 6 };
  }

  /** Axis-trigger tooltip: the step, then per series its label and its value lines from `lines(p)`. */
  function tooltip(lines) {
    return {
      trigger: "axis",
      className: "a3r-tip",
      formatter: (params) => {
        const list = Array.isArray(params) ? params : [params];
        const shown = list.filter((p) => p.seriesName && !/ (lo|band|hi)$/.test(p.seriesName));
        if (!shown.length) return "";
        const step = Array.isArray(shown[0].data) ? shown[0].data[0] : shown[0].axisValue;
        return [`step ${escape(fmt(Math.round(Number(step))))}`, ...shown.map((p) =>
          `${p.marker}${escape(p.seriesName)}: ${lines(p).map(escape).join(" · ")}`)].join("<br>");
      },
    };
  }

  /** Value axis that can be logarithmic (only when every value is positive; the caller says). */
  function yAxis(name, log) {
    return log ? { type: "log", name, scale: true } : { type: "value", name, scale: true };
  }

  // Two-sided 95% Student t quantiles for 1..30 degrees of freedom (normal beyond).
  const T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145,
    2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042];

  /** Per step over several series: [step, mean, lo, hi, n] with a 95% t interval (lo = hi = mean for n = 1).
   * `col` picks the value of each point (1: the smoothed value of `smooth`'s triples, 2: the raw one). */
  function meanInterval(seriesList, col = 1) {
    const bySteps = new Map();
    for (const s of seriesList) for (const p of s) {
      const step = p[0];
      const v = p[col];
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

  /** A <select>'s options grouped by kind: `kinds` maps each value to its group's label. */
  function groupedOptions(select, values, kinds, current, labels) {
    const sig = values.map((v) => `${kinds[v] || ""}:${v}`).join("\u0000");
    if (select.dataset.sig !== sig) {
      const groups = new Map();
      for (const v of values) {
        const g = kinds[v] || "";
        if (!groups.has(g)) groups.set(g, []);
        groups.get(g).push(el("option", { value: v, title: v }, (labels && labels[v]) || v));
      }
      replace(select, [...groups].map(([g, opts]) => (g ? el("optgroup", { label: g }, opts) : opts)));
      select.dataset.sig = sig;
    }
    if (values.includes(current)) select.value = current;
  }

  return { el, replace, getJSON, url, state, escape, fmt, ago, when, badge, bar, poll, chart, smooth, effectiveWeight,
    appendPoints, serial, markers, tooltip, yAxis, groupedOptions, meanInterval, refreshMs, body, dark };
})();
