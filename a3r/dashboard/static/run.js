// Run page: facts, one live chart per logged metric (only new points fetched; the primary metric first, the
// rest grouped by kind; smoothing and log scale kept in the URL), the attempts with their retries and
// fixes, the latest attempt's log tail, effective config, blueprint and events.
"use strict";
(() => {
  const { el, replace, getJSON, url, ago, when, badge, fmt, state } = A3R;
  const ws = A3R.body.dataset.ws;
  const id = Number(A3R.body.dataset.id);
  const charts = new Map(); // metric -> {chart, points, attempts}
  const smoothIn = document.getElementById("smooth");
  const smoothOut = document.getElementById("smooth-val");
  const logIn = document.getElementById("logy");
  smoothIn.value = state.get("smooth", "0");
  smoothOut.textContent = smoothIn.value;
  logIn.checked = state.get("log") === "1";
  smoothIn.addEventListener("input", () => { state.set({ smooth: smoothIn.value === "0" ? "" : smoothIn.value }); smoothOut.textContent = smoothIn.value; drawAll(); });
  logIn.addEventListener("change", () => { state.set({ log: logIn.checked ? "1" : "" }); drawAll(); });

  function table(node, headers, rows) {
    replace(node.querySelector("thead"), el("tr", {}, headers.map((h) => el("th", {}, h))));
    replace(node.querySelector("tbody"), rows);
  }

  function drawFacts(d) {
    const r = d.run;
    const link = document.getElementById("campaign-link");
    link.href = url("/campaign", { ws, id: d.campaign.id });
    link.textContent = d.campaign.name;
    replace(document.getElementById("report-crumb"), d.report ? [" · ", el("a", { id: "run-report-link", href: url("/report", { ws, id: d.campaign.id }) }, "report")] : []);
    document.getElementById("stage-name").textContent = `stage ${d.stage.index}: ${d.stage.name}`;
    const facts = [
      ["state", [badge(r.state), r.failure_kind ? ` ${r.failure_kind}` : ""]],
      ["seed", r.seed],
      ["task", d.blueprint.task],
      ["primary metric", d.primary_metric],
      ["budget", `${d.blueprint.budget.steps} steps, ${d.blueprint.budget.wall_time_s} s`],
      ["attempts", d.attempts.length],
      ["message", r.message || "–"],
      ["created", when(r.created_at)],
      ["ended", when(r.ended_at) || "–"],
    ];
    replace(document.getElementById("run-facts"), el("dl", {}, facts.map(([k, v]) => [el("dt", {}, k), el("dd", { dataset: { fact: k } }, v)])));
    document.getElementById("config").textContent = JSON.stringify(d.config, null, 2);
    document.getElementById("blueprint").textContent = JSON.stringify(d.blueprint, null, 2);
  }

  function drawAttempts(d) {
    table(document.getElementById("attempts"), ["#", "state", "host/slot", "failure", "exit", "fix applied", "reason", "retry of", "dispatched", "heartbeat", "ended"],
      d.attempts.map((a) => el("tr", { dataset: { attempt: a.number, state: a.state } },
        el("td", {}, String(a.number)), el("td", {}, badge(a.state)), el("td", {}, `${a.host}/${a.slot}`),
        el("td", {}, a.failure_kind || ""), el("td", {}, a.exit_code === null ? "" : String(a.exit_code)),
        el("td", {}, a.fix || ""), el("td", {}, a.reason || ""),
        el("td", {}, a.retry_of ? `attempt ${d.attempts.find((b) => b.id === a.retry_of)?.number ?? a.retry_of}` : ""),
        el("td", {}, when(a.dispatched_at)), el("td", {}, a.heartbeat_age === null ? "" : ago(a.heartbeat_age)),
        el("td", {}, when(a.ended_at)))));
  }

  function drawEvents(d) {
    table(document.getElementById("events"), ["time", "kind", "message"],
      d.events.slice().reverse().map((e) => el("tr", {}, el("td", {}, when(e.ts)), el("td", {}, e.kind), el("td", {}, e.message))));
  }

  function drawLog(d) {
    document.getElementById("log-attempt").textContent = d.log_attempt ? `(attempt ${d.log_attempt})` : "";
    const pre = document.getElementById("log");
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = d.log_tail || "(no log yet)";
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  function draw(name, c) {
    const weight = Number(smoothIn.value) || 0;
    const data = A3R.smooth(c.points, weight);
    const positive = data.every((p) => p[2] > 0);
    const log = logIn.checked && positive;
    c.chart.setOption({
      animation: false,
      tooltip: A3R.tooltip((p) => (weight && p.data[1] !== p.data[2] ? [`smoothed ${fmt(p.data[1])}`, `raw ${fmt(p.data[2])}`] : [fmt(p.data[2])])),
      grid: { left: 55, right: 15, top: 15, bottom: 30 },
      xAxis: { type: "value", name: "step", minInterval: 1 },
      yAxis: A3R.yAxis("", log),
      series: [{ name, type: "line", ...A3R.markers(data.length), data }],
    }, { replaceMerge: ["series"] });
    return positive;
  }

  function drawAll() {
    let notPositive = 0;
    for (const [name, c] of charts) if (!draw(name, c)) notPositive += 1;
    document.getElementById("metrics-note").textContent = logIn.checked && notPositive
      ? `${notPositive} chart(s) stay linear: some values are not positive` : "";
  }

  function kindBox(box, kind) {
    let sec = box.querySelector(`div[data-kind="${kind}"]`);
    if (!sec) {
      sec = el("div", { class: "kind", dataset: { kind } }, el("h3", {}, kind), el("div", { class: "charts" }));
      box.append(sec);
    }
    return sec.querySelector(".charts");
  }

  async function refreshMetrics(d) {
    const box = document.getElementById("metric-charts");
    for (const name of d.metrics) {
      if (!charts.has(name)) {
        const node = el("div", { class: "chart small", dataset: { metric: name } });
        const label = name === d.primary_metric ? `${name} (primary)` : name;
        kindBox(box, d.metric_kinds[name] || "other").append(el("figure", {}, el("figcaption", {}, label), node));
        charts.set(name, { chart: A3R.chart(node), points: [], attempts: d.attempts.length });
      }
      const c = charts.get(name);
      if (c.attempts !== d.attempts.length) { c.points = []; c.attempts = d.attempts.length; }
      const last = c.points.length ? c.points[c.points.length - 1][0] : null;
      const data = await getJSON(url("/api/metrics", { ws, name, runs: last === null ? `${id}` : `${id}:${last}` }));
      A3R.appendPoints(c.points, data.series[String(id)] || []);
    }
    drawAll();
  }

  A3R.poll(async () => {
    const d = await getJSON(url("/api/run", { ws, id }));
    drawFacts(d);
    drawAttempts(d);
    drawLog(d);
    drawEvents(d);
    await refreshMetrics(d);
  });
})();
