// Campaign page: stage progress, the report's answer, live learning curves (only new points are
// fetched: each request says the last step already held per run), smoothing, overlay of selected runs,
// grouping by a config column with mean and 95% t interval, and the run table with sort, filter and
// selection kept in the URL.
"use strict";
(() => {
  const { el, replace, getJSON, url, state, fmt, ago, badge, bar } = A3R;
  const ws = A3R.body.dataset.ws;
  const id = A3R.body.dataset.id;
  const MAX_AUTO_LINES = 40; // with no selection, the curves show at most this many runs
  const curves = A3R.chart(document.getElementById("curves"));
  const cache = new Map(); // metric -> Map(run id -> {points, attempts})
  let table = null;

  // -- controls kept in the URL --------------------------------------------------------------------
  const smoothIn = document.getElementById("smooth");
  const smoothOut = document.getElementById("smooth-val");
  const metricSel = document.getElementById("metric");
  const groupSel = document.getElementById("group");
  const filterIn = document.getElementById("filter");
  const stateSel = document.getElementById("state-filter");
  smoothIn.value = state.get("smooth", "0");
  smoothOut.textContent = smoothIn.value;
  filterIn.value = state.get("q");
  smoothIn.addEventListener("input", () => { state.set({ smooth: smoothIn.value === "0" ? "" : smoothIn.value }); smoothOut.textContent = smoothIn.value; drawCurves(); });
  metricSel.addEventListener("change", () => { state.set({ metric: metricSel.value }); refreshCurves(); });
  groupSel.addEventListener("change", () => { state.set({ group: groupSel.value }); drawCurves(); });
  filterIn.addEventListener("input", () => { state.set({ q: filterIn.value }); drawTable(); });
  stateSel.addEventListener("change", () => { state.set({ state: stateSel.value }); drawTable(); });
  document.getElementById("clear-sel").addEventListener("click", () => { state.set({ sel: "" }); drawTable(); refreshCurves(); });

  for (const [key, what, fmtName] of [["exp-runs-csv", "runs", "csv"], ["exp-runs-json", "runs", "json"], ["exp-metrics-csv", "metrics", "csv"], ["exp-metrics-json", "metrics", "json"]]) {
    document.getElementById(key).href = url(`/api/export/${what}.${fmtName}`, { ws, id });
  }

  function selected() {
    return new Set(state.get("sel").split(",").filter(Boolean).map(Number));
  }

  function setOptions(select, values, current, keepFirst) {
    const have = [...select.options].slice(keepFirst ? 1 : 0).map((o) => o.value).join("\u0000");
    if (have !== values.join("\u0000")) {
      const first = keepFirst ? [select.options[0]] : [];
      replace(select, first, values.map((v) => el("option", { value: v }, v)));
    }
    if (values.includes(current) || (keepFirst && current === "")) select.value = current;
  }

  // -- the run table ---------------------------------------------------------------------------------
  const COLUMNS = [
    ["id", "run", (r) => r.id],
    ["name", "name", (r) => r.name],
    ["stage", "stage", (r) => r.stage_index],
    ["state", "state", (r) => r.state],
    ["attempts", "attempts", (r) => r.attempts],
    ["progress", "progress", (r) => r.progress],
    ["last", "last", (r) => r.last],
    ["best", "best", (r) => r.best],
    ["heartbeat", "heartbeat", (r) => r.heartbeat_age],
  ];

  function columns() {
    return [...COLUMNS.slice(0, 5), ...table.columns.map((c) => [`config.${c}`, c, (r) => r.config[c]]), ...COLUMNS.slice(5)];
  }

  function matches(r, q, st) {
    if (st && r.state !== st) return false;
    if (!q) return true;
    const hay = [r.id, r.name, r.stage, r.state, r.host, r.message, ...Object.values(r.config)].join(" ").toLowerCase();
    return q.toLowerCase().split(/\s+/).every((w) => hay.includes(w));
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    return a < b ? -1 : 1;
  }

  function cell(key, r) {
    switch (key) {
      case "id": return el("a", { href: url("/run", { ws, id: r.id }) }, String(r.id));
      case "name": return el("a", { href: url("/run", { ws, id: r.id }) }, r.name);
      case "stage": return r.stage;
      case "state": return [badge(r.state), r.late ? el("span", { class: "badge late", title: "heartbeat older than the stale threshold" }, "late") : null,
        r.failure_kind ? el("span", { class: "muted" }, ` ${r.failure_kind}`) : null];
      case "attempts": return r.attempts > 1 ? el("span", { class: "retried", title: "retried" }, `${r.attempts}`) : String(r.attempts);
      case "progress": return bar(r.progress, r.step === null ? "–" : `${r.step + 1}/${r.steps}`);
      case "last": return el("span", { title: r.metric }, fmt(r.last));
      case "best": return el("span", { title: r.metric }, fmt(r.best));
      case "heartbeat": return ago(r.heartbeat_age);
      default: return fmt(r.config[key.slice(7)]);
    }
  }

  function drawTable() {
    if (!table) return;
    const cols = columns();
    const sort = state.get("sort", "id");
    const desc = state.get("desc") === "1";
    const sel = selected();
    const head = el("tr", {}, el("th", { title: "plot these runs" }, "plot"), cols.map(([key, label]) =>
      el("th", { class: "sortable" + (key === sort ? (desc ? " sorted-desc" : " sorted-asc") : ""), dataset: { key },
        onclick: () => { state.set({ sort: key, desc: key === sort && !desc ? "1" : "" }); drawTable(); } }, label)));
    replace(document.querySelector("#runs thead"), head);
    const getter = (cols.find(([k]) => k === sort) || cols[0])[2];
    const rows = table.rows.filter((r) => matches(r, state.get("q"), state.get("state")))
      .sort((a, b) => compare(getter(a), getter(b)) * (desc ? -1 : 1));
    replace(document.querySelector("#runs tbody"), rows.map((r) =>
      el("tr", { dataset: { run: r.id, state: r.state }, class: sel.has(r.id) ? "selected" : "" },
        el("td", {}, el("input", { type: "checkbox", checked: sel.has(r.id), "aria-label": `plot run ${r.id}`, onchange: (e) => {
          const s = selected();
          if (e.target.checked) s.add(r.id); else s.delete(r.id);
          state.set({ sel: [...s].sort((a, b) => a - b).join(",") });
          drawTable();
          refreshCurves();
        } })),
        cols.map(([key]) => el("td", { dataset: { col: key } }, cell(key, r))))));
    document.getElementById("runs-count").textContent = `${rows.length} of ${table.rows.length} runs`;
  }

  // -- stages and report -------------------------------------------------------------------------------
  function drawHeader(data) {
    document.getElementById("goal").textContent = data.campaign.goal;
    replace(document.getElementById("stages"), el("ol", { class: "stage-list" }, data.summary.stages.map((st) =>
      el("li", { class: "stage", dataset: { stage: st.name } }, el("span", { class: "stage-name" }, st.name),
        bar(st.total ? st.done / st.total : 0, `${st.done}/${st.total}`),
        el("span", { class: "counts" }, Object.entries(st.counts).map(([s, n]) => el("span", { class: "count" }, badge(s), ` ${n}`))),
        st.purpose ? el("span", { class: "muted purpose" }, st.purpose) : null))));
    const box = document.getElementById("report-box");
    box.hidden = !data.report;
    if (data.report) {
      document.getElementById("answer").textContent = (data.report.answer || "The report has no answer summary.") +
        (data.report.conclusive === false ? " (not conclusive)" : "");
      document.getElementById("report-link").href = url("/report", { ws, id });
    }
  }

  // -- curves ----------------------------------------------------------------------------------------
  function plotted() {
    const sel = selected();
    const rows = table ? table.rows : [];
    if (sel.size) return rows.filter((r) => sel.has(r.id));
    return rows.slice(0, MAX_AUTO_LINES);
  }

  async function refreshCurves() {
    if (!table || !metricSel.value) return drawCurves();
    const metric = metricSel.value;
    if (!cache.has(metric)) cache.set(metric, new Map());
    const have = cache.get(metric);
    const runs = plotted();
    for (const r of runs) { // a new attempt may log earlier steps again: start that run over
      const held = have.get(r.id);
      if (held && held.attempts !== r.attempts) have.delete(r.id);
    }
    const ask = runs.map((r) => {
      const held = have.get(r.id);
      return held && held.points.length ? `${r.id}:${held.points[held.points.length - 1][0]}` : `${r.id}`;
    });
    if (ask.length) {
      const data = await getJSON(url("/api/metrics", { ws, name: metric, runs: ask.join(",") }));
      for (const r of runs) {
        const held = have.get(r.id) || { points: [], attempts: r.attempts };
        held.points.push(...(data.series[String(r.id)] || []));
        have.set(r.id, held);
      }
    }
    drawCurves();
  }

  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

  function drawCurves() {
    const metric = metricSel.value;
    const weight = Number(smoothIn.value) || 0;
    const group = groupSel.value;
    const have = cache.get(metric) || new Map();
    const runs = plotted().filter((r) => have.has(r.id) && have.get(r.id).points.length);
    const series = [];
    if (group) {
      const groups = new Map();
      for (const r of runs) {
        const key = `${group}=${String(r.config[group])}`; // the exact value: groups must not merge by rounding
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(A3R.smooth(have.get(r.id).points, weight));
      }
      [...groups.keys()].sort().forEach((key, i) => {
        const agg = A3R.meanInterval(groups.get(key));
        const color = PALETTE[i % PALETTE.length];
        const n = groups.get(key).length;
        series.push({ name: `${key} lo`, type: "line", stack: `band${i}`, symbol: "none", lineStyle: { opacity: 0 }, data: agg.map((p) => [p[0], p[2]]), tooltip: { show: false }, silent: true });
        series.push({ name: `${key} band`, type: "line", stack: `band${i}`, symbol: "none", lineStyle: { opacity: 0 }, areaStyle: { color, opacity: 0.18 }, data: agg.map((p) => [p[0], p[3] - p[2]]), tooltip: { show: false }, silent: true });
        series.push({ name: `${key} (n=${n})`, type: "line", symbol: "none", color, lineStyle: { width: 2 }, data: agg.map((p) => [p[0], p[1]]) });
      });
    } else {
      runs.forEach((r, i) => series.push({ name: r.name, type: "line", symbol: "none", showSymbol: false, color: PALETTE[i % PALETTE.length], data: A3R.smooth(have.get(r.id).points, weight) }));
    }
    const legendNames = series.filter((s) => !/ (lo|band)$/.test(s.name)).map((s) => s.name);
    curves.setOption({
      animation: false,
      tooltip: { trigger: "axis" },
      legend: { type: "scroll", top: 0, data: legendNames },
      grid: { left: 60, right: 20, top: 40, bottom: 60 },
      xAxis: { type: "value", name: "step", nameLocation: "middle", nameGap: 25, minInterval: 1 },
      yAxis: { type: "value", name: metric, scale: true },
      dataZoom: [{ type: "inside" }, { type: "slider", height: 18, bottom: 5 }],
      series,
    }, { replaceMerge: ["series"] });
    const total = table ? table.rows.length : 0;
    const sel = selected().size;
    document.getElementById("curve-note").textContent = sel ? `${sel} selected run(s)` :
      total > MAX_AUTO_LINES ? `first ${MAX_AUTO_LINES} of ${total} runs: tick runs below to choose` : `${runs.length} run(s)`;
  }

  A3R.poll(async () => {
    const data = await getJSON(url("/api/campaign", { ws, id }));
    table = data;
    drawHeader(data);
    const primary = data.rows.length ? data.rows[0].metric : data.metrics[0] || ""; // the blueprint's first metric
    setOptions(metricSel, data.metrics, state.get("metric", primary), false);
    setOptions(groupSel, data.columns, state.get("group"), true);
    setOptions(stateSel, [...new Set(data.rows.map((r) => r.state))].sort(), state.get("state"), true);
    drawTable();
    await refreshCurves();
  });
})();
