// Benchmarks page: written `a3r bench` reports (headline and regression table), the benchmark x commit
// heatmap (mean per commit relative to the benchmark's median) and the latest-vs-previous table from
// every store's benchmark results; with neither, the commands that produce them.
"use strict";
(() => {
  const { el, replace, getJSON, fmt } = A3R;
  let heat = null;

  function drawReports(reports) {
    const cols = ["benchmark", "metric", "unit", "direction", "baseline", "candidate", "delta", "rel", "p", "verdict"];
    const heads = ["benchmark", "metric", "unit", "better", "baseline", "candidate", "change [interval]", "relative", "p (worse)", "verdict"];
    replace(document.getElementById("bench-reports"), reports.map((r) => el("article", { class: "bench-report", dataset: { where: r.where } },
      el("h3", {}, r.suite ? `suite ${r.suite}` : r.where, el("span", { class: "muted" }, ` · ${r.where}`)),
      r.error ? el("p", { class: "error" }, r.error) : [
        el("p", { class: r.regressed ? "error headline" : "headline" }, r.headline),
        el("p", { class: "muted" }, `baseline ${r.baseline.slice(0, 10)} · candidate ${r.candidate.slice(0, 10)} · ${r.commits.length} commit(s) measured`),
        el("div", { class: "table-wrap" }, el("table", { class: "bench-table" },
          el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
          el("tbody", {}, r.table.map((row) => el("tr", { dataset: { benchmark: `${row.benchmark}/${row.metric}` } },
            cols.map((c) => el("td", c === "verdict" ? { class: `verdict verdict-${String(row[c]).replace(/_/g, "-")}` } : {}, row[c] ?? "–"))))))),
      ])));
  }

  A3R.poll(async () => {
    const d = await getJSON("/api/bench");
    const empty = !d.cells.length;
    document.getElementById("bench-empty").hidden = !empty || d.reports.length > 0;
    document.getElementById("reports-body").hidden = !d.reports.length;
    document.getElementById("bench-body").hidden = empty;
    document.getElementById("bench-how").textContent = d.how_to.join("\n");
    document.getElementById("bench-looked").textContent = d.looked.join(", ");
    drawReports(d.reports);
    if (empty) return;
    if (!heat) heat = A3R.chart(document.getElementById("heatmap"));
    const rels = d.cells.map((c) => c[3]).filter((v) => v !== null);
    const spread = Math.max(0.05, ...rels.map((v) => Math.abs(v - 1)));
    heat.setOption({
      animation: false,
      tooltip: { formatter: (p) => {
        const c = d.cells[p.dataIndex];
        const esc = A3R.escape;
        return `${esc(d.benchmarks[c[1]])} @ ${esc(d.commits[c[0]])}<br>${esc(fmt(c[2]))} ${esc(c[5])} (${c[4]} repeat(s))<br>${esc(fmt(c[3]))} x median`;
      } },
      grid: { left: 220, right: 30, top: 10, bottom: 90 },
      xAxis: { type: "category", data: d.commits.map((c) => c.slice(0, 10)), axisLabel: { rotate: 40 } },
      yAxis: { type: "category", data: d.benchmarks },
      visualMap: { min: 1 - spread, max: 1 + spread, calculable: true, orient: "horizontal", left: "center", bottom: 0,
        inRange: { color: ["#2166ac", "#f7f7f7", "#b2182b"] }, text: ["above median", "below median"] },
      series: [{ type: "heatmap", data: d.cells.map((c) => [c[0], c[1], c[3]]), label: { show: d.cells.length <= 80, formatter: (p) => fmt(d.cells[p.dataIndex][2], 3) } }],
    });
    replace(document.querySelector("#regressions thead"), el("tr", {}, ["benchmark", "previous commit", "commit", "previous", "latest", "change", "better", "verdict"].map((h) => el("th", {}, h))));
    replace(document.querySelector("#regressions tbody"), d.regressions.map((r) => el("tr", { dataset: { benchmark: r.benchmark, verdict: r.verdict } },
      el("td", {}, r.benchmark), el("td", {}, r.previous_commit.slice(0, 10)), el("td", {}, r.commit.slice(0, 10)),
      el("td", {}, `${fmt(r.previous)} ${r.unit}`), el("td", {}, `${fmt(r.latest)} ${r.unit}`),
      el("td", {}, r.change === null ? "–" : `${(100 * r.change).toFixed(1)}%`), el("td", {}, r.lower_is_better ? "lower" : "higher"),
      el("td", { class: `verdict verdict-${r.verdict.replace(/ /g, "-")}` }, r.verdict))));
  });
})();
