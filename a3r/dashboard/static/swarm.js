// Swarm server page: the state machine, pool fill per task and per client, throughput measured between
// polls, the last training step's metrics, and a token-level view of pooled episodes (which tokens are
// trainable and their sampling logprobs) for spotting reward hacking. Read through the dashboard's
// server-side proxy, so the server's admin token never reaches the browser.
"use strict";
(() => {
  const { el, replace, getJSON, fmt } = A3R;
  const index = Number(A3R.body.dataset.index);
  const STATES = ["OFFLINE", "BOOTING", "ROLLING", "ROLLING_POST", "WEIGHT_SYNCING"];
  const taskChart = A3R.chart(document.getElementById("pool-tasks"));
  const clientChart = A3R.chart(document.getElementById("pool-clients"));
  const rateChart = A3R.chart(document.getElementById("throughput"));
  const history = []; // [time s, episodes ended, global step]
  const rates = { episodes: [], steps: [] };
  let episodes = [];
  let shownKey = "";

  function bars(chart, names, values, target, label) {
    chart.setOption({
      animation: false,
      tooltip: { trigger: "axis" },
      grid: { left: 45, right: 15, top: 20, bottom: 60 },
      xAxis: { type: "category", data: names, axisLabel: { rotate: names.length > 6 ? 30 : 0 } },
      yAxis: { type: "value", minInterval: 1, name: label },
      series: [{ type: "bar", name: label, data: values,
        markLine: target ? { symbol: "none", data: [{ yAxis: target }], label: { formatter: "group size", position: "insideEndTop" } } : undefined }],
    }, { replaceMerge: ["series"] });
  }

  function drawStatus(st) {
    replace(document.getElementById("states"), STATES.map((s) =>
      el("li", { class: s === st.state ? "current" : "", "aria-current": s === st.state ? "step" : null, dataset: { state: s } }, s)));
    const pool = st.pool;
    const counts = st.episode_counts || {};
    const facts = [
      ["model", st.model || "–"], ["global step", st.global_step],
      ["live episodes", `${st.episodes_live} train, ${st.episodes_live_eval} eval`],
      ["ended / aborted / expired", `${counts.ended || 0} / ${counts.aborted || 0} / ${counts.expired || 0}`],
      ["pool policy", pool.policy], ["pooled episodes", pool.episodes],
      ["complete tasks", `${pool.complete_tasks} / ${pool.target_tasks} (group size ${pool.group_size})`],
      ["non-degenerate tasks", pool.nondegenerate_tasks], ["discarded degenerate", pool.discarded_degenerate],
      ["clients", Object.entries(st.clients).map(([c, v]) => `${c}${v.agree ? " (agrees)" : ""}`).join(", ") || "–"],
    ];
    replace(document.getElementById("server-facts"), el("dl", {}, facts.map(([k, v]) => [el("dt", {}, k), el("dd", { dataset: { fact: k } }, String(v))])));
    const err = document.getElementById("server-error");
    err.hidden = !st.error;
    err.textContent = st.error || "";
    const clients = Object.entries(pool.by_client || {});
    bars(clientChart, clients.map((c) => c[0]), clients.map((c) => c[1]), null, "episodes");
    replace(document.querySelector("#last-metrics tbody"), st.last_metrics
      ? Object.entries(st.last_metrics).sort().map(([k, v]) => el("tr", { dataset: { metric: k } }, el("th", {}, k), el("td", {}, fmt(v))))
      : [el("tr", {}, el("td", { class: "muted" }, "no training step yet"))]);
  }

  function drawThroughput(st) {
    const now = Date.now() / 1000;
    const ended = (st.episode_counts || {}).ended || 0;
    const prev = history[history.length - 1];
    history.push([now, ended, st.global_step]);
    if (prev && now > prev[0]) {
      const t = new Date(now * 1000);
      rates.episodes.push([t, (ended - prev[1]) / (now - prev[0])]);
      rates.steps.push([t, 60 * (st.global_step - prev[2]) / (now - prev[0])]);
      for (const k of Object.keys(rates)) if (rates[k].length > 300) rates[k].shift();
    }
    rateChart.setOption({
      animation: false,
      tooltip: { trigger: "axis" },
      legend: { top: 0 },
      grid: { left: 45, right: 45, top: 30, bottom: 30 },
      xAxis: { type: "time", min: "dataMin", max: "dataMax" },
      yAxis: [{ type: "value", name: "episodes/s" }, { type: "value", name: "steps/min" }],
      series: [{ name: "episodes/s", type: "line", showSymbol: false, data: rates.episodes },
        { name: "steps/min", type: "line", yAxisIndex: 1, showSymbol: false, data: rates.steps }],
    });
  }

  // -- token-level episode view --------------------------------------------------------------------
  function shade(logprob) { // 0 -> white, -5 or less -> dark red
    const x = Math.min(1, Math.max(0, -logprob / 5));
    return `rgba(180, 30, 30, ${(0.08 + 0.85 * x).toFixed(2)})`;
  }

  function drawBlock(b) {
    const n = b.token_ids.length;
    const lps = b.logprobs;
    const cells = b.token_ids.map((tok, i) => {
      const lp = lps ? lps[i] : null;
      return el("span", { class: "cell" + (b.trainable ? " trainable" : ""), title: lp === null ? `token ${tok}` : `token ${tok} · logprob ${lp.toFixed(3)}`,
        style: lp === null ? {} : { backgroundColor: shade(lp) } });
    });
    const meanLp = lps && lps.length ? lps.reduce((a, c) => a + c, 0) / lps.length : null;
    return el("div", { class: `block author-${b.author}${b.trainable ? " trainable" : ""}`, dataset: { author: b.author, trainable: b.trainable ? "1" : "0", tokens: n } },
      el("div", { class: "block-head" }, el("span", { class: "tok" + (b.trainable ? " trainable" : "") }, b.trainable ? "trainable" : "context"),
        ` ${b.author} · ${n} tokens`, meanLp === null ? "" : ` · mean logprob ${meanLp.toFixed(3)}`),
      el("pre", { class: "block-text" }, b.text),
      el("div", { class: "cells" }, cells));
  }

  function drawEpisode() {
    const view = document.getElementById("episode-view");
    const ep = episodes.find((e) => e.episode_id === document.getElementById("episode").value);
    if (!ep) { replace(view, el("p", { class: "muted", id: "no-episodes" }, "The pool is empty: episodes appear here once clients end them.")); document.getElementById("episode-facts").textContent = ""; return; }
    const blocks = ep.timelines.flatMap((t) => t.blocks);
    const trainable = blocks.filter((b) => b.trainable).reduce((a, b) => a + b.token_ids.length, 0);
    const total = blocks.reduce((a, b) => a + b.token_ids.length, 0);
    document.getElementById("episode-facts").textContent = `task ${ep.task_id} · client ${ep.client_id} · reward ${fmt(ep.reward)} · ${ep.timelines.length} timeline(s) · ${trainable} of ${total} tokens trainable`;
    replace(view, ep.timelines.map((t, i) => el("section", { class: "timeline", dataset: { timeline: i } },
      el("h3", {}, `timeline ${i + 1} (call ${t.call_index})`), t.blocks.map(drawBlock))));
  }

  function drawEpisodes(data, groupSize) {
    const tasks = Object.entries(data.by_task).sort();
    bars(taskChart, tasks.map((t) => t[0]), tasks.map((t) => t[1].episodes), groupSize, "episodes");
    episodes = data.episodes;
    const key = episodes.map((e) => e.episode_id).join(",");
    if (key === shownKey) return; // unchanged: keep the reader's selection and scroll
    shownKey = key;
    const select = document.getElementById("episode");
    const current = select.value;
    replace(select, episodes.map((e) => el("option", { value: e.episode_id }, `#${e.seq} ${e.task_id} · ${e.client_id} · reward ${fmt(e.reward)}`)));
    if (episodes.some((e) => e.episode_id === current)) select.value = current;
    drawEpisode();
  }
  document.getElementById("episode").addEventListener("change", drawEpisode);

  A3R.poll(async () => {
    const st = await getJSON(`/api/swarm/${index}/status`);
    drawStatus(st);
    drawThroughput(st);
    drawEpisodes(await getJSON(`/api/swarm/${index}/episodes?limit=20`), st.pool.group_size);
  });
})();
