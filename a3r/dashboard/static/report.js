// Report page: the way back to the campaign, the report's answer, its arms with links to their runs, and
// the leader's report.html itself in a frame (served sandboxed: no script, nothing fetched).
"use strict";
(() => {
  const { el, replace, getJSON, url, fmt } = A3R;
  const ws = A3R.body.dataset.ws;
  const id = A3R.body.dataset.id;

  A3R.poll(async () => {
    const d = await getJSON(url("/api/report", { ws, id }));
    const link = document.getElementById("campaign-link");
    link.textContent = d.campaign.name;
    document.getElementById("answer").textContent = (d.answer || "The report has no answer summary.") +
      (d.conclusive === false ? " (not conclusive)" : "");
    const arms = d.arms;
    replace(document.querySelector("#arms thead"), arms.length ? el("tr", {}, ["arm", "runs", "n", "mean", "95% interval", "status"].map((h) => el("th", {}, h))) : []);
    replace(document.querySelector("#arms tbody"), arms.map((a) => el("tr", { dataset: { arm: a.label } },
      el("td", {}, a.label), el("td", { class: "run-links" }, (a.run_ids || []).map((rid, i) => [i ? ", " : "", el("a", { href: url("/run", { ws, id: rid }) }, String(rid))])),
      el("td", {}, fmt(a.n)), el("td", {}, fmt(a.mean)), el("td", {}, a.lo === null || a.lo === undefined ? "–" : `[${fmt(a.lo)}, ${fmt(a.hi)}]`),
      el("td", {}, a.status || ""))));
  });
})();
