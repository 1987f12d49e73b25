// Campaigns page: every campaign of every store under the workspace, with counts by state and each
// stage's progress, and the report's answer when there is one; refreshed live.
"use strict";
(() => {
  const { el, replace, getJSON, url, badge, bar, when } = A3R;
  const box = document.getElementById("campaigns");

  function counts(c) {
    return el("span", { class: "counts" }, Object.entries(c.counts).map(([s, n]) => el("span", { class: "count" }, badge(s), ` ${n}`)));
  }

  function stages(c) {
    if (!c.stages.length) return el("p", { class: "muted" }, "no stage yet");
    return el("ol", { class: "stage-list" }, c.stages.map((st) =>
      el("li", { class: "stage", dataset: { stage: st.name } },
        el("span", { class: "stage-name" }, st.name),
        bar(st.total ? st.done / st.total : 0, `${st.done}/${st.total}`),
        el("span", { class: "counts" }, Object.entries(st.counts).map(([s, n]) => el("span", { class: "count" }, badge(s), ` ${n}`))),
        st.purpose ? el("span", { class: "muted purpose" }, st.purpose) : null)));
  }

  function card(c) {
    const href = url("/campaign", { ws: c.ws, id: c.id });
    return el("article", { class: "campaign", dataset: { campaign: c.name, status: c.status } },
      el("h2", {}, el("a", { href }, c.name), " ", el("span", { class: `status status-${c.status}` }, c.status)),
      c.goal ? el("p", { class: "goal" }, c.goal) : null,
      el("p", { class: "muted" }, `workspace ${c.ws} · created ${when(c.created_at)} · last change ${when(c.updated_at)}`),
      el("div", { class: "progress-row" }, bar(c.total ? c.done / c.total : 0, `${c.done}/${c.total} runs finished`), counts(c)),
      stages(c),
      c.report ? el("p", { class: "answer" }, el("strong", {}, c.conclusive === false ? "Answer (not conclusive): " : "Answer: "),
        c.answer || "the report has no answer summary", " ",
        el("a", { href: url("/report", { ws: c.ws, id: c.id }), class: "report-link" }, "report")) : null);
  }

  A3R.poll(async () => {
    const data = await getJSON("/api/overview");
    document.getElementById("workspace").textContent = `workspace ${data.workspace} · ${data.sources.length} store(s)`;
    replace(document.getElementById("sources-errors"),
      data.sources.filter((s) => s.error).map((s) => el("p", { class: "error" }, `${s.db}: ${s.error}`)));
    box.removeAttribute("aria-busy");
    if (!data.campaigns.length) {
      replace(box, el("p", { id: "no-campaigns", class: "empty" },
        "No campaign yet. Start one (", el("code", {}, "make demo"), " or ", el("code", {}, 'a3r research "<goal>"'),
        ") and it appears here."));
      return;
    }
    replace(box, data.campaigns.map(card));
  });
})();
