"""Report rendering from a synthetic campaign in a real store: every printed number traces to the store."""

from __future__ import annotations

import json
import re

import pytest

from a3r.analysis import RunObs, analyse, fmt
from a3r.leader.blueprints import stage_blueprints
from a3r.leader.design import ResearchBudget, first_stage
from a3r.leader.goals import parse_goal
from a3r.leader.observe import observe
from a3r.leader.power import power_at
from a3r.report import (
    allowed_numbers,
    build_report_data,
    question_of,
    vet_prose,
    write_report,
)
from a3r.report.data import achieved_power

GOAL = "find the minimum batch size that still trains arithmetic in {1, 4, 16}"
PROVENANCE = {
    "engine_commit": "abc123",
    "engine_dirty": False,
    "host": "testhost",
    "python": "3.11",
    "started_at": "now",
    "store": "a3r.db",
    "bootstrap_seed": 0,
}


def _one_stage(design, runs) -> list[dict]:
    """The leader state's record of a campaign whose one stage ran `runs` and finished."""
    return [
        {
            "index": 1,
            "design": design.model_dump(mode="json"),
            "run_ids": [r.id for r in runs],
            "decision": {"action": "finish", "reason": "synthetic", "author": "offline"},
            "dropped": {},
        }
    ]


def _campaign(ws, record, name="synth", level=None, spread=0.01):
    """The synthetic campaign: arm x gains level[x] (default: bs=1 0.5, bs=4 0.6, bs=16 0.8) plus
    `spread` x seed; one run retried, one failed for good."""
    goal = parse_goal(GOAL)
    budget = ResearchBudget(max_runs=20, steps=4, seeds=3, max_seeds=4, confirm=False)  # one pooled stage
    design = first_stage(goal, budget)
    camp = ws.create_campaign(name, GOAL)
    stage = ws.create_stage(camp.id, "stage-1", design.purpose)
    runs = ws.add_blueprints(stage.id, stage_blueprints(goal, design))
    # bs=1 gains more than half of bs=16's (the "fails" margin), so it still trains and is the answer
    level = level or {1: 0.5, 4: 0.6, 16: 0.8}
    for run in runs:
        x = ws.store.blueprint_of(run).engine_config["swarm"]["pool"]["batch_size"]
        # held-out accuracy: 0.1 untrained (step 0, the same for every run), then rising by the arm's gain
        curve = [(0, 0.1)] + [(s, 0.1 + level[x] * s / 4 + spread * run.seed) for s in range(1, 5)]
        if run.id == runs[0].id:  # an infrastructure failure, retried as a second attempt
            record(ws, run.id, curve[:3], outcome="failed", retry=True)
        if run.id == runs[-1].id:  # a code error: final, excluded from the statistics
            record(ws, run.id, curve[:2], outcome="failed")
            continue
        record(ws, run.id, curve)
    stages = _one_stage(design, runs)
    return goal, budget, camp, runs, stages


def test_observe_reads_values_curves_and_attempts_from_the_store(ws, record):
    goal, _b, camp, runs, _s = _campaign(ws, record)
    recs = observe(ws, camp.id, goal)
    assert [r.obs.run_id for r in recs] == [r.id for r in runs]
    first = recs[0]
    assert first.obs.x == 1 and first.obs.label == "bs=1" and first.obs.state == "succeeded"
    assert [a.state for a in first.attempts] == ["failed", "succeeded"] and first.obs.attempts == 2
    assert first.obs.series[-1][0] == 4 and first.steps_done == 4
    assert first.episodes == 4 * 1 * 4  # steps x batch size x default group size
    assert recs[-1].obs.state == "failed"


def test_report_numbers_come_from_the_store(ws, record, tmp_path):
    goal, budget, camp, runs, stages = _campaign(ws, record)
    recs = observe(ws, camp.id, goal)
    data = build_report_data(
        campaign="synth",
        goal=goal,
        budget=budget,
        policy="offline",
        stages=stages,
        records=recs,
        provenance=PROVENANCE,
    )
    paths = write_report(data, recs, tmp_path / "reports" / "synth")
    md = open(paths["markdown"]).read()
    html = open(paths["html"]).read()

    ev = analyse(question_of(goal, budget), [r.obs for r in recs])
    assert ev.answer in md and data.evidence.answer == ev.answer
    assert "The smallest tested batch size that still trains is 1" in ev.answer and ev.conclusive
    for le in ev.levels:
        for a in le.arms:  # each arm row: seeds, mean, CI and gain as the analysis computes them
            g = a.gain_interval
            row = (
                f"| {a.label} | {fmt(a.x)} | {a.n} | {fmt(a.interval.mean)} | [{fmt(a.interval.lo)}, {fmt(a.interval.hi)}] "
                f"| {fmt(g.mean)} | [{fmt(g.lo)}, {fmt(g.hi)}] |"
            )
            assert row in md
    assert "Untrained level (step-0 held-out score" in md and "**Conclusive**" in md
    summary = json.loads(open(paths["json"]).read())
    assert summary["conclusive"] and summary["levels"][0]["answer"] == 1
    for r in runs:  # provenance: every run with its config and blueprint hashes
        assert re.search(
            rf"^\| {r.id} \| 1 \| bs=\d+ \| {r.seed} \| \w+ \| \d \| local \| `[0-9a-f]{{12}}` \| `[0-9a-f]{{12}}` \|",
            md,
            re.M,
        )
    assert "retried as attempt 2" in md and "final (run failed)" in md
    assert "Cancelled runs" not in md  # the code error is a failure, not a cancellation
    assert "Engine commit: `abc123`" in md and "Runs: 9 (8 succeeded), attempts: 10." in md
    assert "figures/stage-1-curves.png" in md and "figures/score-vs-variable.png" in md
    assert html.count("data:image/png;base64,") == 2 and 'src="figures' not in html  # self-contained
    assert sorted(p.name for p in (tmp_path / "reports" / "synth" / "figures").iterdir()) == [
        "score-vs-variable.png",
        "stage-1-curves.png",
    ]


def test_llm_prose_may_only_repeat_the_reports_numbers(ws, record):
    goal, budget, camp, _runs, stages = _campaign(ws, record)
    recs = observe(ws, camp.id, goal)
    data = build_report_data(
        campaign="synth",
        goal=goal,
        budget=budget,
        policy="llm:x",
        stages=stages,
        records=recs,
        provenance=PROVENANCE,
    )
    allowed = allowed_numbers(data)
    best = fmt(data.final_arms[-1].mean)
    text = f"Batch size 16 reached {best}, and surely 0.999 with 12 seeds."
    assert (
        vet_prose(text, allowed)
        == f"Batch size 16 reached {best}, and surely [unverified] with [unverified] seeds."
    )


def test_llm_written_designs_and_decisions_are_vetted(ws, record):
    goal, budget, camp, _runs, stages = _campaign(ws, record)
    design = stages[0]["design"]
    stages[0] = {
        **stages[0],
        "design": {
            **design,
            "author": "llm:x",
            "purpose": "Batch sizes 1, 4 and 16 should reach 0.97 quickly.",
        },
        "decision": {"action": "finish", "reason": "16 reached 0.93, done.", "author": "llm:x"},
    }
    recs = observe(ws, camp.id, goal)
    data = build_report_data(
        campaign="synth",
        goal=goal,
        budget=budget,
        policy="llm:x",
        stages=stages,
        records=recs,
        provenance=PROVENANCE,
    )
    view = data.stages[0]
    assert view.design.purpose == "Batch sizes 1, 4 and 16 should reach [unverified] quickly."
    assert view.decision["reason"] == "16 reached [unverified], done."


def _rows_for(goal_text: str, finals: dict, seeds: int = 3):
    """Table rows of the analysis of runs whose final held-out score is finals[x] + 0.02 * seed."""
    from a3r.analysis import RunObs
    from a3r.report.data import _arm_rows

    goal = parse_goal(goal_text)
    obs = [
        RunObs(i, 1, s, x, None, f"lr={x}", "succeeded", ((0, 0.1), (4, v + 0.02 * s)))
        for i, (x, v, s) in enumerate(((x, v, s) for x, v in finals.items() for s in range(seeds)), 1)
    ]
    ev = analyse(question_of(goal, ResearchBudget(), eval_items=64), obs)
    return ev, {r.label: r.status for r in _arm_rows(ev)}


def test_table_labels_never_contradict_the_answer():
    """Issue 25: a campaign stopped after its calibration labelled its only arm "best" while the answer said
    "cannot tell". "best" is printed only when the answer names that best."""
    text = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"
    ev, status = _rows_for(text, {1.5e-5: 0.6})  # the calibration's reference arm alone
    assert ev.answer.startswith("Cannot tell") and status == {"lr=1.5e-05": ""}
    ev, status = _rows_for(text, {3e-6: 0.58, 1.5e-5: 0.6, 6e-5: 0.1})  # a lead that is not separated
    assert not ev.conclusive and status == {
        "lr=3e-06": "not separated",
        "lr=1.5e-05": "leads",
        "lr=6e-05": "worse",
    }
    ev, status = _rows_for(text, {3e-6: 0.2, 1.5e-5: 0.6, 6e-5: 0.1})
    assert ev.conclusive and status["lr=1.5e-05"] == "best" and "Best learning rate: 1.5e-05" in ev.answer


def test_the_report_states_the_power_the_answering_runs_had_not_the_seeds_it_asked_for():
    # a confirmation of 4 seeds per arm where the calibration asked for 9: the power is that of 4 seeds
    goal = parse_goal("compare learning rate 1e-5 with 3e-5 on arithmetic")
    budget = ResearchBudget()
    obs = [
        RunObs(10 * x_i + s, 3, s, x, None, f"lr={x}", "succeeded", ((0, 0.25), (8, 0.25 + g + 0.01 * s)))
        for x_i, (x, g) in enumerate([(1e-5, 0.3), (3e-5, 0.45)])
        for s in range(4)
    ]
    ev = analyse(question_of(goal, budget, eval_items=64), obs)
    cal = [{"visible": True, "sigma_plan": 0.1, "effect": 0.15, "seeds_per_arm": 9}]
    p = achieved_power(goal, budget, ev, cal)
    assert p["seeds"] == 4 and p["arms"] == 2 and p["needed"] == 9
    assert (
        p["power"] == pytest.approx(power_at("compare", 2, 4, 0.1, 0.15, 0.05, 1 / 64)) and p["power"] < 0.8
    )
    assert achieved_power(goal, budget, ev, [{**cal[0], "visible": False}]) is None  # nothing to size for


def test_a_report_on_the_training_steps_never_names_one_step_count_for_every_run(ws, record, tmp_path):
    """Issue 25: the real minimum-steps campaign's report said "20 steps per run" and "3 seed(s) of 20
    steps" (the budget's default) while its runs trained 1, 2, 4 and 8 steps."""
    text = "What is the minimum number of training steps that still trains arithmetic: 1, 2 or 4?"
    goal = parse_goal(text)
    budget = ResearchBudget(max_runs=20, steps=20, seeds=3, max_seeds=4, confirm=False)
    design = first_stage(goal, budget)
    camp = ws.create_campaign("steps", text)
    stage = ws.create_stage(camp.id, "stage-1", design.purpose)
    runs = ws.add_blueprints(stage.id, stage_blueprints(goal, design))
    for run in runs:
        n = ws.store.blueprint_of(run).engine_config["swarm"]["training"]["max_steps"]
        record(ws, run.id, [(0, 0.25), (n, 0.25 + 0.1 * n + 0.01 * run.seed)])
    stages = _one_stage(design, runs)
    from a3r.leader.calibration import Calibration

    cal = Calibration(
        stage=1,
        label="steps=4",
        steps=20,
        runs=3,
        untrained=0.25,
        gain=0.4,
        sigma=0.03,
        run_s=100.0,
        visible=True,
    ).model_dump(mode="json")
    data = build_report_data(
        campaign="steps",
        goal=goal,
        budget=budget,
        policy="offline",
        stages=stages,
        records=observe(ws, camp.id, goal),
        provenance=PROVENANCE,
        calibration=[cal],
    )
    md = open(write_report(data, observe(ws, camp.id, goal), tmp_path / "r")["markdown"]).read()
    assert (
        "each run trains its arm's step count" in md
        and "**Calibration (stage 1):** steps=4, 3 seed(s):" in md
    )
    assert "20 steps" not in md


def test_achieved_power_prices_a_confirmation_with_the_sigma_it_was_sized_with():
    """Issue 25: the real compare campaign sized its confirmation at 9 seeds per arm for 80% power with
    sigma 0.13 (re-measured on the exploration runs), and its report said 57% because it priced the same 9
    seeds with the pilot's bound, 0.173. Plan and report use one sigma."""
    from a3r.leader.design import Arm, StageDesign

    goal = parse_goal("Does batch size 2 or 8 train arithmetic better in 8 steps?")
    budget = ResearchBudget()
    obs = [
        RunObs(10 * i + s, 4, s, x, None, f"bs={x}", "succeeded", ((0, 0.25), (8, 0.25 + g + 0.01 * (s % 3))))
        for i, (x, g) in enumerate([(2, 0.23), (8, 0.34)])
        for s in range(9)
    ]
    ev = analyse(question_of(goal, budget, eval_items=64), obs)
    cal = [{"visible": True, "sigma_plan": 0.173, "effect": 0.188, "seeds_per_arm": 15}]
    confirm = StageDesign(
        index=4,
        kind="confirm",
        purpose="confirm",
        hypothesis="h",
        arms=[Arm(x=x, seeds=list(range(6, 15)), why="confirmation") for x in (2, 8)],
        steps=8,
        planned_sigma=0.13,
        planned_effect=0.188,
        planned_needed=9,
    )
    floor = ev.question.floor_sd(0.0)
    p = achieved_power(goal, budget, ev, cal, [confirm])
    assert p["power"] == pytest.approx(power_at("compare", 2, 9, 0.13, 0.188, 0.05, floor)) and p["power"] >= 0.8
    assert p["sigma"] == 0.13 and p["needed"] == 9
    # without a confirmation's own sizing (a one-look campaign), the calibration's bound prices the seeds
    p = achieved_power(goal, budget, ev, cal, [])
    assert p["power"] == pytest.approx(power_at("compare", 2, 9, 0.173, 0.188, 0.05, floor)) and p["power"] < 0.6


def test_the_power_line_says_what_a_cannot_tell_means_only_for_a_cannot_tell_answer(ws, record, tmp_path):
    """Issue 25: the power line said 'a "cannot tell" here is weak evidence of no effect' under conclusive
    answers too (the real compare campaign's report, answer 8). A conclusive answer states the power its
    runs had; the caveat stays for answers that cannot tell."""
    from a3r.leader.calibration import Calibration

    # a calibration that sized for a small effect against a large sigma: the answering runs are underpowered
    cal = Calibration(
        stage=1, label="bs=16", steps=4, runs=3, untrained=0.1, gain=0.8, sigma=0.3, sigma_plan=0.4, run_s=100.0,
        visible=True, effect=0.1, seeds_per_arm=40,
    ).model_dump(mode="json")

    def power_line(name, **kw):
        goal, budget, camp, _runs, stages = _campaign(ws, record, name=name, **kw)
        recs = observe(ws, camp.id, goal)
        data = build_report_data(
            campaign=name, goal=goal, budget=budget, policy="offline", stages=stages, records=recs,
            provenance=PROVENANCE, calibration=[cal],
        )
        md = open(write_report(data, recs, tmp_path / name)["markdown"]).read()
        return data, next(line for line in md.splitlines() if line.startswith("**Power achieved:**"))

    data, line = power_line("conclusive")
    assert data.evidence.conclusive and data.power["power"] < 0.8
    pct = f"{100 * data.power['power']:.0f}%"
    assert line == (
        f"**Power achieved:** the answer rests on 3 arm(s) with at least {data.power['seeds']} seed(s) each: "
        f"{pct} power to detect an effect of 0.1."
    )
    # bs=1's gain, spread over seeds, cannot be placed against half of bs=16's: the answer cannot tell
    data, line = power_line("uncertain", level={1: 0.3, 4: 0.6, 16: 0.8}, spread=0.15)
    assert not data.evidence.conclusive and data.power["power"] < 0.8
    assert line.endswith(
        'power to detect an effect of 0.1, below 80%: a "cannot tell" here is weak evidence of no effect '
        "(40 seed(s) per arm would reach 80%)."
    )
