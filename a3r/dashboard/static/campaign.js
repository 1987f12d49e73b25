// Campaign page: stage progress, the report's answer, live learning curves (only new points are
// fetched: each request says the last step already held per run), smoothing, overlay of selected runs,
// grouping by a config column with mean and 95% t interval, log scale; comparison of runs against their
// config values (per value with t intervals, parallel coordinates, importance) and a two-run config diff;
// the run table with sort, filter and selection kept in the URL.
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
  const logIn = document.getElementById("logy");
  const summarySel = document.getElementById("summary");
  const diffA = document.getElementById("diff-a");
  const diffB = document.getElementById("diff-b");
  const diffAll = document.getElementById("diff-all");
  logIn.checked = state.get("log") === "1";
  summarySel.value = state.get("summary", "final");
  diffAll.checked = state.get("same") === "1";
  smoothIn.value = state.get("smooth", "0");
  smoothOut.textContent = smoothIn.value;
  filterIn.value = state.get("q");
  smoothIn.addEventListener("input", () => { state.set({ smooth: smoothIn.value === "0" ? "" : smoothIn.value }); smoothOut.textContent = smoothIn.value; drawCurves(); });
  metricSel.addEventListener("change", () => { state.set({ metric: metricSel.value }); refreshCurves(); refreshCompare(); });
  groupSel.addEventListener("change", () => { state.set({ group: groupSel.value }); drawCurves(); });
  logIn.addEventListener("change", () => { state.set({ log: logIn.checked ? "1" : "" }); drawCurves(); });
  summarySel.addEventListener("change", () => { state.set({ summary: summarySel.value === "final" ? "" : summarySel.value }); refreshCompare(); });
  for (const sel of [diffA, diffB]) sel.addEventListener("change", () => { state.set({ diff: `${diffA.value},${diffB.value}` }); refreshDiff(); });
  diffAll.addEventListener("change", () => { state.set({ same: diffAll.checked ? "1" : "" }); drawDiff(); });
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
    const label = (c) => table.column_labels[c] || c;
    return [...COLUMNS.slice(0, 5), ...table.columns.map((c) => [`config.${c}`, label(c), (r) => r.config[c], c]), ...COLUMNS.slice(5)];
  }

  function matches(r, q, st) {
    if (st && r.state !== st) return false;
    if (!q) return true;
    const hay = [r.id, r.name, r.stage, r.state, r.host, r.message, ...Object.values(r.config)].join(" ").toLowerCase();
    return q.toLowerCase().split(/\s+/).every((w) => hay.includes(w));
  }

  /** Order of two cells; runs without a value come last whichever the direction. */
  function compare(a, b, desc) {
    const missingA = a === null || a === undefined;
    const missingB = b === null || b === undefined;
    if (missingA || missingB) return missingA === missingB ? 0 : missingA ? 1 : -1;
    if (a === b) return 0;
    return (a < b ? -1 : 1) * (desc ? -1 : 1);
  }

  function cell(key, r) {
    switch (key) {
      case "id": return el("a", { href: url("/run", { ws, id: r.id }) }, String(r.id));
      case "name": return el("a", { href: url("/run", { ws, id: r.id }) }, r.name);
      case "stage": return r.stage;
      case "state": return [badge(r.state), r.late ? el("span", { class: "badge late", title: "heartbeat older than the stale threshold" }, "late") : null,
        r.failure_kind ? el("span", { class: "muted" }, ` ${r.failure_kind}`) : null];
      case "attempts": return r.attempts > 1 ? el("span", { class: "retried", title: "retried" }, `${r.attempts}`) : String(r.attempts);
      case "progress": return bar(r.progress, r.step === null && r.state !== "succeeded" ? "–" : `${r.steps_done}/${r.steps}`);
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
    const head = el("tr", {}, el("th", { title: "plot these runs" }, "plot"), cols.map(([key, label, , full]) =>
      el("th", { class: "sortable" + (key === sort ? (desc ? " sorted-desc" : " sorted-asc") : ""), dataset: { key }, title: full || null,
        onclick: () => { state.set({ sort: key, desc: key === sort && !desc ? "1" : "" }); drawTable(); } }, label)));
    replace(document.querySelector("#runs thead"), head);
    const getter = (cols.find(([k]) => k === sort) || cols[0])[2];
    const rows = table.rows.filter((r) => matches(r, state.get("q"), state.get("state")))
      .sort((a, b) => compare(getter(a), getter(b), desc));
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
      document.getElementById("crumb-name").replaceChildren(document.createTextNode(data.campaign.name + " · "),
        el("a", { href: url("/report", { ws, id }) }, "report"));
    }
  }

  // -- curves ----------------------------------------------------------------------------------------
  function plotted() {
    const sel = selected();
    const rows = table ? table.rows : [];
    if (sel.size) return rows.filter((r) => sel.has(r.id));
    return rows.slice(0, MAX_AUTO_LINES);
  }

  // Serialized: the poll and a click in the table may both refresh; run one after the other, each asking
  // only after what the previous one added (running them at once duplicated a run's points).
  const refreshCurves = A3R.serial(fetchCurves);
  async function fetchCurves() {
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
        A3R.appendPoints(held.points, data.series[String(r.id)] || []);
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
    const positive = runs.every((r) => have.get(r.id).points.every((p) => p[1] === null || p[1] > 0));
    logIn.disabled = !positive;
    const log = logIn.checked && positive;
    const series = [];
    let capped = false;
    const smoothed = (r) => {
      const pts = have.get(r.id).points;
      if (weight && A3R.effectiveWeight(weight, pts.filter((p) => p[1] !== null).length) < weight) capped = true;
      return A3R.smooth(pts, weight);
    };
    let lines;
    if (group) {
      const groups = new Map();
      for (const r of runs) {
        const key = `${group}=${String(r.config[group])}`; // the exact value: groups must not merge by rounding
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(smoothed(r));
      }
      [...groups.keys()].sort().forEach((key, i) => {
        const agg = A3R.meanInterval(groups.get(key), 1);
        const raw = new Map(A3R.meanInterval(groups.get(key), 2).map((p) => [p[0], p[1]]));
        const color = PALETTE[i % PALETTE.length];
        const n = groups.get(key).length;
        if (log) { // a stacked band cannot be drawn on a log axis: its edges as dashed lines instead
          for (const [edge, col] of [["lo", 2], ["hi", 3]]) series.push({ name: `${key} ${edge}`, type: "line", symbol: "none", color,
            lineStyle: { type: "dashed", width: 1, opacity: 0.6 }, data: agg.map((p) => [p[0], p[col]]), silent: true });
        } else {
          series.push({ name: `${key} lo`, type: "line", stack: `band${i}`, symbol: "none", lineStyle: { opacity: 0 }, data: agg.map((p) => [p[0], p[2]]), silent: true });
          series.push({ name: `${key} band`, type: "line", stack: `band${i}`, symbol: "none", lineStyle: { opacity: 0 }, areaStyle: { color, opacity: 0.18 }, data: agg.map((p) => [p[0], p[3] - p[2]]), silent: true });
        }
        series.push({ name: `${key} (n=${n})`, type: "line", ...A3R.markers(agg.length), color, lineStyle: { width: 2 },
          data: agg.map((p) => [p[0], p[1], p[2], p[3], p[4], raw.get(p[0])]) });
      });
      lines = (p) => {
        const [, mean, lo, hi, n, raw] = p.data;
        const out = [weight && raw !== mean ? `mean ${fmt(mean)} (raw ${fmt(raw)})` : `mean ${fmt(mean)}`];
        out.push(n > 1 ? `95% t [${fmt(lo)}, ${fmt(hi)}]` : "one run: no interval");
        out.push(`n=${n}`);
        return out;
      };
    } else {
      runs.forEach((r, i) => {
        const data = smoothed(r);
        series.push({ name: r.name, type: "line", ...A3R.markers(data.length), color: PALETTE[i % PALETTE.length], data });
      });
      // a point smoothing left as logged (a short series) shows its one value
      lines = (p) => (weight && p.data[1] !== p.data[2] ? [`smoothed ${fmt(p.data[1])}`, `raw ${fmt(p.data[2])}`] : [fmt(p.data[2])]);
    }
    const legendNames = series.filter((s) => !/ (lo|band|hi)$/.test(s.name)).map((s) => s.name);
    curves.setOption({
      animation: false,
      tooltip: A3R.tooltip(lines),
      legend: { type: "scroll", top: 0, data: legendNames },
      grid: { left: 60, right: 20, top: 40, bottom: 60 },
      xAxis: { type: "value", name: "step", nameLocation: "middle", nameGap: 25, minInterval: 1 },
      yAxis: A3R.yAxis(metric, log),
      dataZoom: [{ type: "inside" }, { type: "slider", height: 18, bottom: 5 }],
      series,
    }, { replaceMerge: ["series"] });
    const total = table ? table.rows.length : 0;
    const sel = selected().size;
    const notes = [sel ? `${sel} selected run(s)` :
      total > MAX_AUTO_LINES ? `first ${MAX_AUTO_LINES} of ${total} runs: tick runs below to choose` : `${runs.length} run(s)`];
    if (capped) notes.push("smoothing window capped at a fifth of each series (short series are drawn as logged)");
    if (!positive && logIn.checked) notes.push("log scale off: some values are not positive");
    document.getElementById("curve-note").textContent = notes.join(" · ");
  }

  // -- comparison of runs against their config values -------------------------------------------------
  let compareData = null;
  let compareSig = "";
  const paramCharts = new Map(); // param -> chart
  const parallel = A3R.chart(document.getElementById("parallel"));

  const refreshCompare = A3R.serial(async () => {
    if (!table || !metricSel.value) return;
    const sig = JSON.stringify([metricSel.value, summarySel.value, table.rows.map((r) => [r.id, r.state, r.step, r.attempts])]);
    if (sig === compareSig) return;
    compareData = await getJSON(url("/api/compare", { ws, id, metric: metricSel.value, summary: summarySel.value }));
    compareSig = sig;
    drawCompare();
  });

  function axisFor(values) {
    return values.every((v) => typeof v === "number") ? { type: "value", scale: true } : { type: "category", data: [...new Set(values.map(String))].sort() };
  }

  function drawCompare() {
    const d = compareData;
    const box = document.getElementById("by-param");
    const what = `${d.summary === "auc" ? "area under the curve of" : "final"} ${d.metric}`;
    document.getElementById("compare-note").textContent = `${d.runs.length} run(s) scored on ${what}` +
      (d.unscored ? `; ${d.unscored} without a value yet` : "") + (d.lower_is_better ? " (lower is better)" : "");
    for (const [p, c] of paramCharts) if (!d.params.includes(p)) { c.dispose(); paramCharts.delete(p); box.querySelector(`figure[data-param="${CSS.escape(p)}"]`)?.remove(); }
    for (const p of d.params) {
      if (!paramCharts.has(p)) {
        const node = el("div", { class: "chart small", dataset: { param: p } });
        box.append(el("figure", { dataset: { param: p } }, el("figcaption", { title: p }, `${what} by ${d.param_labels[p]}`), node));
        paramCharts.set(p, A3R.chart(node));
      }
      const groups = d.by_param[p] || [];
      const cats = groups.map((g) => String(g.value));
      const runsOf = d.runs.map((r) => [cats.indexOf(String(r.config[p])), r.score, r.name]);
      paramCharts.get(p).setOption({
        animation: false,
        tooltip: { trigger: "item", formatter: (it) => {
          if (it.seriesName === "runs") return A3R.escape(`${it.data[2]}: ${fmt(it.data[1])}`);
          const g = groups[it.dataIndex];
          return A3R.escape(`${d.param_labels[p]}=${g.value}: mean ${fmt(g.mean)}` + (g.lo === null ? " (no interval: one run or identical scores)" : `, 95% t [${fmt(g.lo)}, ${fmt(g.hi)}]`) + `, n=${g.n}`);
        } },
        grid: { left: 55, right: 15, top: 15, bottom: 35 },
        xAxis: { type: "category", data: cats, name: d.param_labels[p], nameLocation: "middle", nameGap: 22 },
        yAxis: { type: "value", scale: true, name: d.metric },
        series: [
          { name: "runs", type: "scatter", symbolSize: 7, itemStyle: { opacity: 0.55 }, data: runsOf },
          { name: "mean", type: "custom", data: groups.map((g, i) => [i, g.mean, g.lo, g.hi, g.n]),
            renderItem: (params, api) => {
              const i = api.value(0);
              const mean = api.coord([i, api.value(1)]);
              const children = [{ type: "circle", shape: { cx: mean[0], cy: mean[1], r: 5 }, style: { fill: "#e15759" } }];
              if (!Number.isNaN(api.value(2)) && api.value(2) !== null && groups[i].lo !== null) {
                const lo = api.coord([i, groups[i].lo]);
                const hi = api.coord([i, groups[i].hi]);
                const st = { stroke: "#e15759", lineWidth: 2 };
                children.push({ type: "line", shape: { x1: lo[0], y1: lo[1], x2: hi[0], y2: hi[1] }, style: st },
                  { type: "line", shape: { x1: lo[0] - 6, y1: lo[1], x2: lo[0] + 6, y2: lo[1] }, style: st },
                  { type: "line", shape: { x1: hi[0] - 6, y1: hi[1], x2: hi[0] + 6, y2: hi[1] }, style: st });
              }
              return { type: "group", children };
            },
            encode: { x: 0, y: [1, 2, 3] } },
        ],
      }, { replaceMerge: ["series"] });
    }
    // parallel coordinates: one axis per varied value and the score, one line per run
    const dims = [...d.params, "score"];
    const scores = d.runs.map((r) => r.score);
    parallel.setOption({
      animation: false,
      parallel: { left: 60, right: 90, top: 30, bottom: 30 },
      parallelAxis: dims.map((p, i) => ({ dim: i, name: p === "score" ? d.metric : d.param_labels[p],
        ...(p === "score" ? { type: "value", scale: true } : axisFor(d.runs.map((r) => r.config[p]))) })),
      visualMap: scores.length ? { show: true, dimension: dims.length - 1, min: Math.min(...scores), max: Math.max(...scores),
        right: 0, top: "middle", itemHeight: 120, calculable: true, inRange: { color: d.lower_is_better ? ["#59a14f", "#e15759"] : ["#e15759", "#59a14f"] } } : undefined,
      series: [{ type: "parallel", lineStyle: { width: 1.5, opacity: 0.6 },
        data: d.runs.map((r) => [...d.params.map((p) => (typeof r.config[p] === "number" ? r.config[p] : String(r.config[p]))), r.score]) }],
    }, { replaceMerge: ["series", "parallelAxis", "visualMap"] });
    // importance
    const imp = d.importance;
    const tb = document.querySelector("#importance tbody");
    replace(document.querySelector("#importance thead"), imp.available ? el("tr", {}, ["parameter", "η² (share of variance)", "permutation p", "values"].map((h) => el("th", {}, h))) : []);
    replace(tb, imp.available ? imp.rows.map((r) => el("tr", { dataset: { param: r.param } },
      el("td", { title: r.param }, d.param_labels[r.param] || r.param),
      el("td", {}, bar(r.eta_squared || 0, r.eta_squared === null ? "–" : fmt(r.eta_squared, 3))),
      el("td", {}, fmt(r.p, 3)), el("td", {}, String(r.levels)))) :
      el("tr", {}, el("td", { id: "importance-off", class: "muted" }, `Not shown: ${imp.reason}.`)));
  }

  // -- two-run config diff -------------------------------------------------------------------------------
  let diffData = null;
  const refreshDiff = A3R.serial(async () => {
    if (!diffA.value || !diffB.value) return;
    if (diffA.value === diffB.value) {
      diffData = null;
      document.getElementById("diff-note").textContent = "pick two different runs";
      replace(document.querySelector("#diff tbody"));
      return;
    }
    diffData = await getJSON(url("/api/diff", { ws, a: diffA.value, b: diffB.value }));
    drawDiff();
  });

  function drawDiff() {
    if (!diffData) return;
    const d = diffData;
    document.getElementById("diff-note").textContent = `${d.differ} of ${d.rows.length} keys differ`;
    replace(document.querySelector("#diff thead"), el("tr", {}, el("th", {}, "key"),
      el("th", {}, el("a", { href: url("/run", { ws, id: d.a.id }) }, `run ${d.a.id} ${d.a.name}`)),
      el("th", {}, el("a", { href: url("/run", { ws, id: d.b.id }) }, `run ${d.b.id} ${d.b.name}`))));
    const show = d.rows.filter((r) => diffAll.checked || !r.same);
    const cellOf = (v) => (v === undefined ? "(absent)" : typeof v === "string" ? v : JSON.stringify(v));
    replace(document.querySelector("#diff tbody"), show.map((r) => el("tr", { class: r.same ? "" : "differs", dataset: { key: r.key } },
      el("td", {}, r.key), el("td", {}, cellOf(r.a)), el("td", {}, cellOf(r.b)))));
  }

  function setDiffRuns() {
    const ids = table.rows.map((r) => String(r.id));
    const label = Object.fromEntries(table.rows.map((r) => [String(r.id), `${r.id} ${r.name}`]));
    const kinds = {};
    const sel = [...selected()].map(String);
    const [a, b] = state.get("diff").split(",");
    const pickA = ids.includes(a) ? a : sel[0] || ids[0];
    const pickB = ids.includes(b) ? b : sel[1] || ids[1] || ids[0];
    const before = `${diffA.value},${diffB.value}`;
    A3R.groupedOptions(diffA, ids, kinds, pickA, label);
    A3R.groupedOptions(diffB, ids, kinds, pickB, label);
    return before !== `${diffA.value},${diffB.value}`;
  }

  A3R.poll(async () => {
    const data = await getJSON(url("/api/campaign", { ws, id }));
    table = data;
    drawHeader(data);
    const primary = data.primary_metric || data.metrics[0] || "";
    A3R.groupedOptions(metricSel, data.metrics, data.metric_kinds, state.get("metric", primary),
      Object.fromEntries(data.metrics.map((m) => [m, m === primary ? `${m} (primary)` : m])));
    const groupable = data.columns.filter((c) => !data.seed_columns.includes(c));
    setOptions(groupSel, groupable, state.get("group"), true);
    for (const o of groupSel.options) if (o.value) { o.textContent = data.column_labels[o.value] || o.value; o.title = o.value; }
    setOptions(stateSel, [...new Set(data.rows.map((r) => r.state))].sort(), state.get("state"), true);
    drawTable();
    if (data.rows.length > 1 && setDiffRuns()) refreshDiff();
    document.getElementById("diff-box").hidden = data.rows.length < 2;
    await refreshCurves();
    await refreshCompare();
  });
})();
