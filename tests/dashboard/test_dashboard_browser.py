"""End to end in headless Chromium (driven by Playwright): the dashboard over a workspace seeded with every
data shape, and over a real swarm server, at desktop width and at a phone's 390 px (in dark mode).
Assertions wait on elements (never sleep), and any console error or uncaught exception on a page fails
the test."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from a3r.dashboard import build_config

from .browser import INSTALL_HINT, LiveDashboard, chromium_path
from .conftest import eval_accuracy, reward

sync_api = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT)
expect = sync_api.expect
CHROMIUM = chromium_path()
REPO = Path(__file__).resolve().parents[2]
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


def _watched_page(browser, **context):
    ctx = browser.new_context(**context)
    pg = ctx.new_page()
    pg.set_default_timeout(15_000)
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    return ctx, pg, problems


@pytest.fixture
def page(browser):
    """A fresh desktop page whose console errors, uncaught exceptions and dialogs (a sign of injected
    script) fail the test."""
    ctx, pg, problems = _watched_page(browser, viewport={"width": 1280, "height": 900})
    yield pg
    ctx.close()
    assert not problems, problems


@pytest.fixture
def phone(browser):
    """The same at a phone's width (390 px) with the system set to dark mode."""
    ctx, pg, problems = _watched_page(
        browser, viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True, has_touch=True
    )
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
    assert mean[2][:2] == [6, 0.95], "step 6 only has run lr-hi-s1"
    # sorting by the last value puts the runs without one last, in either direction
    page.select_option("#group", "")
    for clicks in (1, 2):
        page.locator("th[data-key='last']").click()
        expect(page.locator("th[data-key='last']")).to_have_class(
            re.compile("sorted-asc" if clicks == 1 else "sorted-desc")
        )
        lasts = page.locator("#runs tbody td[data-col='last']").all_inner_texts()
        assert lasts[-3:] == ["–", "–", "–"] and "–" not in lasts[:3], lasts


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


def test_report_runs_and_campaign_link_to_each_other(page, dash, seeded):
    page.goto(dash.url + "/")
    fin = page.locator("article[data-campaign='finished-study']")
    expect(fin.locator(".answer")).to_contain_text("Answer: The smallest batch size that trains is 2.")
    fin.locator("h2 a").click()
    expect(page.locator("#answer")).to_have_text("The smallest batch size that trains is 2.")
    expect(page.locator("li[data-stage='stage-0'] .bar-label")).to_have_text("3/3")
    page.locator("#report-link").click()
    expect(page.frame_locator("#report-frame").locator("#report-title")).to_have_text(
        "Report of finished-study"
    )
    first = seeded.run("bs2-s1")
    page.locator(f"tr[data-arm='bs=2'] a:text-is('{first}')").click()
    expect(page).to_have_url(re.compile(rf"/run\?ws=.&id={first}$"))
    page.locator("#run-report-link").click()
    expect(page.locator("#campaign-link")).to_have_text("finished-study")
    page.locator("#campaign-link").click()
    expect(page.locator("#title")).to_have_text("finished-study")


def test_every_logged_metric_markers_tooltips_smoothing_and_log_scale(page, dash, seeded):
    page.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['finished']}")
    expect(page.locator("#metric optgroup")).to_have_count(3)  # training, evaluation, timing
    expect(page.locator("#metric option").first).to_have_text("reward (primary)")
    assert page.locator("#metric optgroup[label='evaluation'] option").all_inner_texts() == ["eval_accuracy"]
    expect(page.locator("td[data-col='progress'] .bar-label").first).to_have_text("10/10")
    # eval_accuracy has two points per run (steps 0 and 10): drawn with markers, and smoothing leaves it as logged
    page.select_option("#metric", "eval_accuracy")
    page.locator("#smooth").fill("0.9")
    wait_series(
        page, "curves", "series.length === 6 && series.every(s => s.data.length === 2 && s.showSymbol)"
    )
    last = {s[0]: s[2] for s in series(page, "curves")}
    assert last["bs8-s1"][:3] == [10, eval_accuracy(1, 10, 8), eval_accuracy(1, 10, 8)]
    expect(page.locator("#curve-note")).to_contain_text("smoothing window capped")
    # a tooltip: integer step, the value formatted
    tip = page.locator("#curves .a3r-tip")
    page.evaluate(
        "echarts.getInstanceByDom(document.getElementById('curves'))"
        ".dispatchAction({type: 'showTip', seriesIndex: 0, dataIndex: 1})"
    )
    expect(tip).to_contain_text("step 10")
    expect(tip).to_contain_text(f"bs8-s1: {eval_accuracy(1, 10, 8)}")
    # reward has 10 points: smoothed; the tooltip shows both values
    page.select_option("#metric", "reward")
    page.locator("#smooth").fill("0.5")
    wait_series(page, "curves", "series.length === 6 && series[0].data[9][1] !== series[0].data[9][2]")
    page.evaluate(
        "echarts.getInstanceByDom(document.getElementById('curves'))"
        ".dispatchAction({type: 'showTip', seriesIndex: 0, dataIndex: 9})"
    )
    expect(tip).to_contain_text("step 9")
    expect(tip).to_contain_text(f"raw {reward(1, 9, 8)}")
    expect(tip).to_contain_text("smoothed ")
    # grouped: mean, raw mean, the t interval and n
    page.select_option("#group", "pool.batch_size")
    wait_series(page, "curves", "series.some(s => s.name === 'pool.batch_size=8 (n=3)')")
    idx = page.evaluate(
        "echarts.getInstanceByDom(document.getElementById('curves')).getOption().series"
        ".findIndex(s => s.name === 'pool.batch_size=8 (n=3)')"
    )
    page.evaluate(
        f"echarts.getInstanceByDom(document.getElementById('curves'))"
        f".dispatchAction({{type: 'showTip', seriesIndex: {idx}, dataIndex: 9}})"
    )
    expect(tip).to_contain_text("95% t [")
    expect(tip).to_contain_text("n=3")
    # log scale, kept in the URL
    page.locator("#logy").check()
    expect(page).to_have_url(re.compile(r"log=1"))
    page.wait_for_function(
        "() => echarts.getInstanceByDom(document.getElementById('curves')).getOption().yAxis[0].type === 'log'"
    )
    # the run page: every metric, the primary first, grouped by kind, with smoothing
    page.goto(f"{dash.url}/run?ws=.&id={seeded.run('bs8-s1')}&smooth=0.5")
    expect(page.locator("#metric-charts .kind h3")).to_have_text(["training", "evaluation", "timing"])
    expect(page.locator("#metric-charts figcaption").first).to_have_text("reward (primary)")
    wait_series(
        page, ".chart[data-metric='eval_accuracy']", "series[0].data.length === 2 && series[0].showSymbol"
    )
    wait_series(page, ".chart[data-metric='reward']", "series[0].data[9][1] !== series[0].data[9][2]")


def test_refresh_racing_a_tick_does_not_duplicate_points(page, dash, seeded):
    """A tick in the table while the poll's request for points is still out used to fetch the same points
    twice and append both. Requests are held here so the tick always lands inside the poll's."""
    held, finished = [], []
    page.route("**/api/metrics*", lambda route: held.append(route))
    page.on("requestfinished", lambda r: finished.append(r.url) if "/api/metrics" in r.url else None)
    page.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['many']}")
    page.wait_for_function("() => document.querySelectorAll('#runs tbody tr').length === 60")
    while not held:  # the poll's request for the first 40 runs is out
        page.wait_for_timeout(20)
    page.locator("#runs tbody input[type=checkbox]").nth(0).check()
    released = 0
    for _ in range(1000):  # release every request; done once the poll's and the tick's have both answered
        while released < len(held):
            held[released].continue_()
            released += 1
        one = page.evaluate("""() => { const o = echarts.getInstanceByDom(document.getElementById('curves')).getOption();
                                     return !!o && !!o.series && o.series.length === 1; }""")
        if len(finished) >= 2 and one:
            break
        page.wait_for_timeout(20)
    page.unroute_all()
    name = series(page, "curves")[0][0]
    steps = page.evaluate(
        "echarts.getInstanceByDom(document.getElementById('curves')).getOption().series[0].data.map(p => p[0])"
    )
    assert steps == list(range(8)), f"{name}: each step once, got {steps}"


def test_many_runs_selection_comparison_views_and_config_diff(page, dash, seeded):
    page.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['many']}")
    expect(page.locator("#runs tbody tr")).to_have_count(60)
    expect(page.locator("#curve-note")).to_have_text("first 40 of 60 runs: tick runs below to choose")
    boxes = page.locator("#runs tbody input[type=checkbox]")
    boxes.nth(0).check()
    boxes.nth(59).check()
    expect(page).to_have_url(re.compile(r"sel=\d+%2C\d+|sel=\d+,\d+"))
    wait_series(page, "curves", "series.length === 2")
    last = {s[0]: s[2] for s in series(page, "curves")}
    assert last["grid-bs2-s1"][:2] == [7, reward(1, 7, 2)]
    page.fill("#filter", "bs8-s2")
    expect(page.locator("#runs tbody tr")).to_have_count(2)  # bs8-s2 and bs8-s20
    # the seed key varies but is no setting: not offered as a grouping; long keys shown by their last part
    assert page.locator("#group option").all_inner_texts() == ["(none: one line per run)", "batch_size"]
    expect(page.locator("th[data-key='config.pool.batch_size']")).to_have_text("batch_size")
    # final reward against batch size: three values, 20 runs each, mean with its t interval
    wait_series(
        page,
        "#by-param .chart[data-param='pool.batch_size']",
        "series[0].data.length === 60 && series[1].data.length === 3",
    )
    means = page.evaluate("""() => echarts.getInstanceByDom(document.querySelector("#by-param .chart[data-param='pool.batch_size']"))
                               .getOption().series[1].data.map(d => [d[0], d[1], d[2] < d[1] && d[1] < d[3], d[4]])""")
    expected = [sum(reward(s, 7, bs) for s in range(1, 21)) / 20 for bs in (2, 4, 8)]
    assert [m[0] for m in means] == [0, 1, 2] and all(m[2] and m[3] == 20 for m in means)
    assert [m[1] for m in means] == pytest.approx(expected, abs=1e-9)
    wait_series(page, "parallel", "series[0].data.length === 60")
    expect(page.locator("#importance tr[data-param='pool.batch_size']")).to_be_visible()
    # area under the curve instead of the final value: kept in the URL
    page.select_option("#summary", "auc")
    expect(page).to_have_url(re.compile(r"summary=auc"))
    expect(page.locator("#compare-note")).to_contain_text("area under the curve of reward")
    # config diff of the two ticked runs (defaults to the selection): blueprint, batch size and seed differ
    expect(page.locator("#diff-note")).to_have_text(re.compile(r"^4 of \d+ keys differ$"))
    keys = page.locator("#diff tbody td:first-child")
    expect(keys).to_have_text(["blueprint", "pool.batch_size", "seed", "training.seed"])
    expect(page.locator("#diff tr[data-key='seed'] td")).to_have_text(["seed", "1", "20"])
    page.locator("#diff-all").check()
    expect(page.locator("#diff tr[data-key='training.lr']:not(.differs)")).to_be_visible()


def test_benchmark_heatmap_committed_reports_and_empty_workspace(page, dash, seeded):
    page.goto(dash.url + "/bench")
    expect(page.locator("tr[data-benchmark='engine/step_time'] .verdict")).to_have_text("regression")
    expect(page.locator("tr[data-benchmark='engine/episodes_per_s'] .verdict")).to_have_text("improvement")
    wait_series(page, "heatmap", "series[0].data.length === 6")
    # the repository's committed bench report (reports/examples/bench-default), with no store results
    committed = LiveDashboard(build_config(workspace=seeded.empty, reports_dir=REPO / "reports"))
    try:
        page.goto(committed.url + "/bench")
        report = page.locator("article.bench-report[data-where$='examples/bench-default']")
        expect(report.locator(".headline")).to_contain_text("No regression of bcff6a5f8f against acfe040871")
        expect(report.locator("tr[data-benchmark='arithmetic/final_reward'] td").first).to_have_text(
            "arithmetic"
        )
        expect(page.locator("#bench-empty")).to_be_hidden()
        page.goto("about:blank")
    finally:
        committed.close()
    empty = LiveDashboard(build_config(workspace=seeded.empty, reports_dir=seeded.empty / "reports"))
    try:
        page.goto(empty.url + "/")
        expect(page.locator("#no-campaigns")).to_contain_text("No campaign yet")
        page.goto(empty.url + "/bench")
        expect(page.locator("#bench-empty")).to_be_visible()
        expect(page.locator("#bench-how")).to_have_text(
            "a3r bench run --commits BASE..HEAD\na3r bench report"
        )
        assert "`" not in page.locator("#bench-empty").inner_text()
        page.goto("about:blank")
    finally:
        empty.close()


def test_phone_width_and_dark_mode(phone, dash, seeded):
    """At 390 px nothing makes a page wider than the screen (wide tables scroll inside their box), and
    with the system in dark mode the page and its charts are dark."""
    wide = "() => document.documentElement.scrollWidth"
    pages = [
        ("/", "article[data-campaign='finished-study'] .answer"),
        (f"/campaign?ws=.&id={seeded.ids['live']}", "#runs tbody tr"),
        (f"/campaign?ws=.&id={seeded.ids['many']}", "#importance tr[data-param='pool.batch_size']"),
        (f"/campaign?ws=.&id={seeded.ids['empty']}", "#runs-count"),
        (f"/campaign?ws=campaigns/second&id={seeded.ids['second']}", "#runs tbody tr"),
        (f"/run?ws=.&id={seeded.run('lr-hi-s2')}", "#attempts tbody tr"),
        (f"/report?ws=.&id={seeded.ids['finished']}", "#arms tbody tr"),
        ("/bench", "#regressions tbody tr"),
    ]
    for path, ready in pages:
        phone.goto(dash.url + path)
        expect(phone.locator(ready).first).to_be_visible()
        assert phone.evaluate(wide) <= 390, f"{path} is {phone.evaluate(wide)} px wide at 390 px"
        bg = phone.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert sum(map(int, re.findall(r"\d+", bg)[:3])) < 3 * 60, f"{path}: background {bg} is not dark"
    phone.goto(f"{dash.url}/campaign?ws=.&id={seeded.ids['finished']}")
    wait_series(phone, "curves", "series.length === 6")
    # ECharts' dark theme draws light text: the legend's text colour is light
    legend = phone.evaluate(
        """() => { const c = echarts.getInstanceByDom(document.getElementById('curves')).getModel()
                     .getComponent('legend').get('textStyle').color;
                   const ctx = document.createElement('canvas').getContext('2d');
                   ctx.fillStyle = c; return ctx.fillStyle; }"""  # any CSS colour as #rrggbb
    )
    assert sum(int(legend[i : i + 2], 16) for i in (1, 3, 5)) > 3 * 0x99, legend
    phone.goto("about:blank")


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
