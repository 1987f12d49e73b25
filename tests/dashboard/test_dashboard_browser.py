"""End to end in headless Chromium (driven by Playwright): the dashboard over a workspace seeded with every
data shape, and over a real swarm server. Assertions wait on elements (never sleep), and any console
error or uncaught exception on a page fails the test."""

from __future__ import annotations

import re

import httpx
import pytest

from a3r.dashboard import build_config

from .browser import INSTALL_HINT, LiveDashboard, chromium_path
from .conftest import reward

sync_api = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT)
expect = sync_api.expect
CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=INSTALL_HINT)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield b
        b.close()


@pytest.fixture(scope="module")
def dash(seeded):
    srv = LiveDashboard(build_config(workspace=seeded.root, reports_dir=seeded.reports, refresh_s=0.5))
    yield srv
    srv.close()


@pytest.fixture
def page(browser):
    """A fresh page whose console errors, uncaught exceptions and dialogs (a sign of injected script)
    fail the test."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.set_default_timeout(15_000)
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    yield pg
    ctx.close()
    assert not problems, problems


def wait_series(page, chart_id: str, predicate: str) -> None:
    """Wait until `predicate` (JS over `series`, the chart's series options) holds for an ECharts chart
    (a chart that has no option yet counts as not yet)."""
    page.wait_for_function(
        f"""id => {{ const el = document.getElementById(id) || document.querySelector(id);
             const c = el && echarts.getInstanceByDom(el); const o = c && c.getOption();
             if (!o || !o.series) return false; const series = o.series; return !!({predicate}); }}""",
        arg=chart_id,
    )


def series(page, chart_id: str):
    """[(name, number of points, last point)] of an ECharts chart on the page."""
    return page.evaluate(
        """id => echarts.getInstanceByDom(document.getElementById(id)).getOption().series
              .map(s => [s.name, s.data.length, s.data[s.data.length - 1] || null])""",
        chart_id,
    )


def test_campaigns_page_shows_every_campaign_state_and_stage_progress(page, dash):
    page.goto(dash.url + "/")
    fin = page.locator("article[data-campaign='finished-study']")
    expect(fin.locator(".status")).to_have_text("finished")
    expect(fin.locator("li[data-stage='stage-1'] .bar-label")).to_have_text("3/3")
    expect(fin.locator("a.report-link")).to_be_visible()
    live = page.locator("article[data-campaign='live-study']")
    expect(live.locator(".status")).to_have_text("running")
    expect(live.locator(".goal")).to_have_text("does the learning rate matter? <script>alert(1)</script>")
    expect(page.locator("article[data-campaign='planning-only'] .status")).to_have_text("empty")
    expect(page.locator("article[data-campaign='second-study']")).to_contain_text(
        "workspace campaigns/second"
    )
    expect(page.locator("#live")).to_contain_text("updated")


def test_live_campaign_table_sort_filter_and_curves_that_fetch_only_new_points(page, dash, seeded):
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/metrics" in r.url else None)
    page.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['live']}")
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(6)
    retried = page.locator(f"tr[data-run='{seeded.run('lr-hi-s2')}']")
    expect(retried.locator("td[data-col='attempts']")).to_have_text("2")
    expect(page.locator(f"tr[data-run='{seeded.run('lr-hi-s4')}'] .badge.late")).to_be_visible()
    expect(page.locator("th[data-key='config.training.lr']")).to_be_visible()
    # sort by the config column, descending; the URL keeps it and a reload restores it
    page.locator("th[data-key='config.training.lr']").click()
    page.locator("th[data-key='config.training.lr']").click()
    expect(page).to_have_url(re.compile(r"sort=config.training.lr&desc=1"))
    page.select_option("#state-filter", "running")
    expect(rows).to_have_count(3)
    page.reload()
    expect(rows).to_have_count(3)
    expect(page.locator("#state-filter")).to_have_value("running")
    expect(page.locator("th.sorted-desc")).to_have_attribute("data-key", "config.training.lr")
    page.select_option("#state-filter", "")
    expect(rows).to_have_count(6)
    # curves: one line per run that logged the metric; then new points arrive and only they are fetched
    rid = seeded.run("lr-hi-s1")
    wait_series(page, "curves", "series.length === 3")
    att = seeded.ids["running_attempt"]
    off = seeded.ids["running_offset"]
    assert seeded.store.ingest_metrics(
        att, [(5, "reward", 0.9), (6, "reward", 0.95)], expected_offset=off, new_offset=off + 2
    )
    seeded.ids["running_offset"] = off + 2
    wait_series(
        page,
        "curves",
        "series.some(s => s.name === 'lr-hi-s1' && s.data.length === 7 && s.data[6][1] === 0.95)",
    )
    assert any(f"runs={rid}%3A4" in u or f"runs={rid}:4" in u for u in asked), "asked only for steps after 4"
    expect(page.locator(f"tr[data-run='{rid}'] td[data-col='last']")).to_have_text("0.95")
    # group by the learning rate: one mean line per value, with its interval band
    page.select_option("#group", "training.lr")
    expect(page).to_have_url(re.compile(r"group=training.lr"))
    wait_series(page, "curves", "series.some(s => s.name === 'training.lr=0.0001 (n=3)')")
    mean = next(s for s in series(page, "curves") if s[0] == "training.lr=0.0001 (n=3)")
    assert mean[2] == [6, 0.95], "step 6 only has run lr-hi-s1"


def test_run_page_shows_attempts_retries_log_metrics_and_config(page, dash, seeded):
    page.goto(f"{dash.url}/run?ws=.&id={seeded.run('lr-hi-s2')}")
    attempts = page.locator("#attempts tbody tr")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_contain_text("infrastructure")
    expect(attempts.nth(1)).to_contain_text("infrastructure: resume from checkpoint")
    expect(attempts.nth(1)).to_contain_text("attempt 1")
    expect(page.locator("#campaign-link")).to_have_text("live-study")
    expect(page.locator("#config")).to_contain_text('"lr": 0.0001')
    expect(page.locator("figure .chart[data-metric='reward']")).to_be_visible()
    wait_series(page, ".chart[data-metric='reward']", "series[0].data.length === 6")
    page.goto(f"{dash.url}/run?ws=.&id={seeded.run('lr-hi-s1')}")
    expect(page.locator("#log")).to_contain_text("live log line <b>not bold</b>")
    page.goto(f"{dash.url}/run?ws=.&id={seeded.run('lr-hi-s3')}")
    expect(page.locator("#log")).to_contain_text("ZeroDivisionError")
    expect(page.locator("dd[data-fact='state']")).to_contain_text("code_error")


def test_finished_campaign_report_and_many_runs_selection(page, dash, seeded):
    page.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['finished']}")
    expect(page.locator("#answer")).to_have_text("The smallest batch size that trains is 2.")
    expect(page.locator("li[data-stage='stage-0'] .bar-label")).to_have_text("3/3")
    with page.expect_popup() as popup:
        page.locator("#report-link").click()
    expect(popup.value.locator("#report-title")).to_have_text("Report of finished-study")
    popup.value.close()

    page.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['many']}")
    expect(page.locator("#runs tbody tr")).to_have_count(60)
    expect(page.locator("#curve-note")).to_have_text("first 40 of 60 runs: tick runs below to choose")
    boxes = page.locator("#runs tbody input[type=checkbox]")
    boxes.nth(0).check()
    boxes.nth(59).check()
    expect(page).to_have_url(re.compile(r"sel=\d+%2C\d+|sel=\d+,\d+"))
    wait_series(page, "curves", "series.length === 2")
    last = {s[0]: s[2] for s in series(page, "curves")}
    assert last["grid-bs2-s1"] == [7, reward(1, 7, 2)]
    page.fill("#filter", "bs8-s2")
    expect(page.locator("#runs tbody tr")).to_have_count(2)  # bs8-s2 and bs8-s20


def test_benchmark_heatmap_and_empty_workspace(page, dash, seeded):
    page.goto(dash.url + "/bench")
    expect(page.locator("tr[data-benchmark='engine/step_time'] .verdict")).to_have_text("regression")
    expect(page.locator("tr[data-benchmark='engine/episodes_per_s'] .verdict")).to_have_text("improvement")
    wait_series(page, "heatmap", "series[0].data.length === 6")
    empty = LiveDashboard(build_config(workspace=seeded.empty))
    try:
        page.goto(empty.url + "/")
        expect(page.locator("#no-campaigns")).to_contain_text("No campaign yet")
        page.goto(empty.url + "/bench")
        expect(page.locator("#bench-empty")).to_be_visible()
        page.goto("about:blank")
    finally:
        empty.close()


def test_swarm_server_page_state_pool_metrics_and_tokens(page, live_server, tmp_path):
    from tests_support import ADMIN_TOKEN

    from engine.config import SwarmConfig

    srv = live_server(SwarmConfig(pool={"policy": "task_count", "batch_size": 1, "group_size": 2}))
    msgs = [{"role": "user", "content": "2+2?"}]
    with srv.client("math-client") as c:
        for task, r in (("a", 1.0), ("a", 0.0), ("b", 0.5)):
            with c.episode(task) as ep:
                ep.openai().chat.completions.create(model=ep.model, messages=msgs, max_tokens=4)
                ep.end(r)
            if task == "a" and r == 0.0:
                c.wait_for_step(1, timeout=60)  # the two "a" episodes trained; "b" stays pooled
    dash = LiveDashboard(
        build_config(workspace=tmp_path, swarm=[{"url": srv.url, "token": ADMIN_TOKEN}], refresh_s=0.5)
    )
    try:
        page.goto(dash.url + "/swarm?s=0")
        expect(page.locator("#states li.current")).to_have_text("ROLLING")
        expect(page.locator("dd[data-fact='global step']")).to_have_text("1")
        expect(page.locator("#last-metrics tr[data-metric='step_time_s']")).to_be_visible()
        expect(page.locator("#episode option")).to_have_count(1)
        expect(page.locator("#episode-facts")).to_contain_text("task b · client math-client · reward 0.5")
        trainable = page.locator(".block.trainable")
        expect(trainable.first).to_be_visible()
        n = int(trainable.first.get_attribute("data-tokens"))
        assert 1 <= n <= 5, "a reply of at most 4 sampled tokens (and its end-of-turn token)"
        expect(trainable.first.locator(".cell.trainable")).to_have_count(n)
        assert "logprob" in trainable.first.locator(".cell").first.get_attribute("title")
        expect(page.locator(".block.author-user, .block[data-trainable='0']").first).to_be_visible()
        wait_series(page, "pool-tasks", "series[0].data[0] === 1")
        page.goto("about:blank")  # stop polling before the dashboard goes away
    finally:
        dash.close()
    # a wrong admin token is a 502 that says so (checked over HTTP: the browser logs any 5xx as an error)
    bad = LiveDashboard(build_config(workspace=tmp_path, swarm=[{"url": srv.url, "token": "not-the-token"}]))
    try:
        r = httpx.get(bad.url + "/api/swarm/0/status")
        assert r.status_code == 502 and "refused the admin token" in r.json()["error"]["message"]
    finally:
        bad.close()
