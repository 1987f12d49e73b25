"""The leader's cost model: its arithmetic against hand-computed values, term by term (start, per step and
per episode-token, per held-out item, checkpoint writes under the engine's step and time rules), the
step-0 evaluation only for the runs that find no cached one, and the fit that turns a measured breakdown
(`benchmarks/run_cost.py`) into its constants."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from a3r.leader.blueprints import DEFAULT_BASE_JOB
from a3r.leader.costs import (
    RUN_COST,
    RUN_COST_THREADS,
    PricedRun,
    RunCost,
    checkpoint_writes,
    cost_of,
    episode_tokens,
    eval0_key,
    fit_run_cost,
    price_run,
    run_seconds,
    runs_within,
    schedule_runs,
    schedule_seconds,
)
from a3r.leader.knobs import set_dotted

SLOTS_JSON = Path(__file__).parents[2] / "docs" / "benchmarks" / "run_cost_slots_vs_main_2.json"


def test_checkpoint_writes_follow_the_engine_rule():
    # steps of 50 s, every 120 s: the clock reaches 150 s at steps 3, 6, 9; step 10 is max_steps
    assert checkpoint_writes(10, 50.0, {}, every_steps=1, every_s=120.0, final=True) == (3, True)
    assert checkpoint_writes(10, 50.0, {}, every_steps=1, every_s=120.0, final=False) == (3, False)
    # every second step and 120 s: 200 s at steps 4 and 8 (100 s at 2 and 6 is not enough)
    assert checkpoint_writes(10, 50.0, {}, every_steps=2, every_s=120.0, final=True) == (2, True)
    # step basis: every step before the last
    assert checkpoint_writes(10, 50.0, {}, every_steps=1, every_s=0.0, final=True) == (9, True)
    assert checkpoint_writes(10, 50.0, {}, every_steps=0, every_s=0.0, final=True) == (0, False)
    # an evaluation after step 2 runs on the server's clock: 100 + 30 + 50 = 180 s at step 3, then 150 at 6
    assert checkpoint_writes(7, 50.0, {2: 30.0}, every_steps=1, every_s=170.0, final=True) == (1, True)


def test_the_step_zero_evaluation_runs_on_the_checkpoint_clock():
    """The server's clock starts when the model is loaded, before the step-0 evaluation (the lead's
    measured default run wrote at step 11, where steps alone reach 120 s at step 13). Every 110 s, steps of
    50 s, 9 steps: 30 + 100 = 130 s at step 2, then 150 s at 5 and 8 (three writes); without the
    step-0 evaluation 150 s at steps 3 and 6 (two)."""
    assert checkpoint_writes(9, 50.0, {0: 30.0}, every_steps=1, every_s=110.0, final=True) == (3, True)
    assert checkpoint_writes(9, 50.0, {}, every_steps=1, every_s=110.0, final=True) == (2, True)


def _job(**training) -> dict:
    return {
        "eval_size": 64,
        "max_tokens": 25,
        "swarm": {
            "model": {"name": "smollm2-135m"},
            "pool": {"batch_size": 4, "group_size": 8},
            "training": training,
        },
    }


@pytest.fixture
def cost(monkeypatch) -> RunCost:
    """Round figures, so the expected values below are computed by hand (and survive recalibration): a
    step of 32 episodes x 25 tokens = 800 episode-tokens costs 0.4 + 0.6 + (0.006 + 0.004) x 800 = 9 s."""
    c = RunCost(
        start=15.0,
        sample_step=0.4,
        sample_token=0.006,
        update_step=0.6,
        update_token=0.004,
        per_item=0.17,
        per_checkpoint=7.0,
    )
    monkeypatch.setitem(RUN_COST, "smollm2-135m", c)
    return c


def test_steps_grow_linearly_in_episodes_and_tokens(cost):
    assert episode_tokens(_job()) == 800
    assert cost.step_seconds(800) == pytest.approx(9.0)
    assert cost.step_seconds(1600) == pytest.approx(17.0)  # twice the episodes or twice the tokens
    assert episode_tokens({"swarm": {}}) == 16 * 32  # the engine's defaults: batch 4 x group 4, 32 tokens


def test_run_seconds_by_term(cost):
    # start 15 + 20 steps x 9 s + 2 x 64 items x 0.17 = 15 + 180 + 21.76
    base = 216.76
    # every step: 19 full writes of 7 s and the weights-only write at max_steps (a third of the bytes)
    assert run_seconds(_job(checkpoint_every=1), 20) == pytest.approx(base + 7.0 * (19 + 1 / 3))
    assert run_seconds(_job(), 20) == run_seconds(_job(checkpoint_every=1), 20)  # the engine's default
    # A3R's default: the clock (10.88 s of step-0 evaluation, 9 s steps) reaches 127.88 s at step 13, the
    # only write; none at the end (the job deletes it)
    a3r = {**_job(checkpoint_every=1, checkpoint_every_s=120.0), "keep_final_checkpoint": False}
    assert run_seconds(a3r, 20) == pytest.approx(base + 7.0)
    # twice the reply budget: the steps' per-token part doubles (8 s -> 16 s a step)
    longer = {**_job(checkpoint_every=0), "max_tokens": 50}
    assert run_seconds(longer, 20) == pytest.approx(15 + 20 * 17 + 21.76)


def test_a_run_that_reuses_the_step_zero_evaluation_is_priced_without_it(cost):
    """Without the step-0 evaluation: 64 items fewer (10.88 s), and its 10.88 s leave the checkpoint clock,
    so A3R's 120 s rule writes at step 14 (126 s) instead of 13; still one write."""
    base = 15 + 180 + 64 * 0.17  # one evaluation, the end's
    assert run_seconds(_job(checkpoint_every=0), 20, eval0=False) == pytest.approx(base)
    a3r = {**_job(checkpoint_every=1, checkpoint_every_s=120.0), "keep_final_checkpoint": False}
    assert run_seconds(a3r, 20, eval0=False) == pytest.approx(base + 7.0)
    # every 85 s the clock tells them apart: 10.88 + 81 = 91.88 s at step 9, then 90 s at 19 (two writes),
    # against 90 s at step 10 and again at 20 = max_steps, which writes nothing here (one)
    every85 = {**_job(checkpoint_every=1, checkpoint_every_s=85.0), "keep_final_checkpoint": False}
    assert run_seconds(every85, 20) == pytest.approx(base + 64 * 0.17 + 2 * 7.0)
    assert run_seconds(every85, 20, eval0=False) == pytest.approx(base + 7.0)
    priced = price_run(a3r, 20)
    assert priced == PricedRun(
        seconds=pytest.approx(base + 64 * 0.17 + 7.0),
        reused_s=pytest.approx(base + 7.0),
        stored_after_s=pytest.approx(15 + 64 * 0.17),  # start-up, then the step-0 evaluation is stored
        key=eval0_key(a3r),
    )
    assert price_run({"swarm": {"model": {"name": "some/hf-dir"}}}, 20) is None


def test_the_step_zero_key_holds_what_decides_the_evaluation_and_nothing_else():
    job = {**_job(), "task": "arithmetic", "lr": 1e-5, "seed": 0}
    assert eval0_key(job) is not None
    assert eval0_key({**job, "lr": 6e-5, "seed": 3}) == eval0_key(job)  # training settings do not matter
    for other in ({"max_tokens": 50}, {"eval_size": 32}, {"eval_seed": 1}, {"task": "calculator"}, {"concurrency": 8}):
        assert eval0_key({**job, **other}) != eval0_key(job), other
    assert eval0_key(job, threads=1) != eval0_key(job, threads=2)
    other_model = {**job, "swarm": {**job["swarm"], "model": {"name": "tiny"}}}
    assert eval0_key(other_model) != eval0_key(job)
    # never reused: no held-out set, the cache turned off, a team, another backend
    assert eval0_key({**job, "eval_size": 0}) is None and eval0_key({**job, "eval0_cache": False}) is None
    assert eval0_key({**job, "swarm": {**job["swarm"], "collaboration": {"roles": ["a", "b"]}}}) is None
    assert eval0_key({**job, "swarm": {**job["swarm"], "backend": "vllm"}}) is None


def test_only_the_runs_that_start_before_their_key_is_stored_pay_the_step_zero_evaluation():
    """Runs of 100 s (80 s reusing), stored 30 s after they start, on 2 slots, in submission order."""

    def run(key, seconds=100.0, reused=80.0, stored=30.0):
        return PricedRun(seconds, reused, stored, key)

    # a and a start together: both pay; the third a starts at 100 and reuses (180); b pays (100 + 100)
    sched = schedule_runs([run("a"), run("a"), run("a"), run("b")], 2)
    assert (sched.wall_s, sched.pays_eval0, sched.evaluated) == (200.0, [True, True, False, True], {"a", "b"})
    # after a stage that evaluated a: only b pays (80 + 80 on slot 0, 80 + 100 on slot 1)
    sched = schedule_runs([run("a"), run("a"), run("a"), run("b")], 2, frozenset({"a"}))
    assert (sched.wall_s, sched.pays_eval0) == (180.0, [False, False, False, True])
    # a run that starts after its key's entry is stored reuses it, though that run is not over yet: the
    # second a starts at 40 (after a 40 s b), 10 s after the first a stored its entry at 30 ...
    sched = schedule_runs([run("a"), run("b", 40.0, 40.0, 5.0), run("a")], 2)
    assert (sched.wall_s, sched.pays_eval0) == (120.0, [True, True, False])
    # ... and pays it when it starts at 20, before the entry exists (20 + 100)
    sched = schedule_runs([run("a"), run("b", 20.0, 20.0, 5.0), run("a")], 2)
    assert (sched.wall_s, sched.pays_eval0) == (120.0, [True, True, True])
    # a run without a key always pays and leaves nothing for the others; one slot runs them in turn
    sched = schedule_runs([run(None), run(None), run("a"), run("a")], 1)
    assert (sched.wall_s, sched.pays_eval0, sched.evaluated) == (380.0, [True, True, True, False], {"a"})
    assert schedule_runs([], 2).wall_s == 0.0


def test_evaluations_count_on_the_checkpoint_clock(cost):
    """eval_every 5: 64 x 5 items (before, after, steps 5 10 15) x 0.17 = 54.4 s, and the clock (10.88 s
    per evaluation, 9 s per step) reaches 10.88 + 90 + 2 x 10.88 + 9 = 131.64 s at step 11, then 82.88 s
    by step 19: one write of 7 s."""
    job = {
        **_job(checkpoint_every=1, checkpoint_every_s=120.0),
        "keep_final_checkpoint": False,
        "eval_every": 5,
    }
    assert run_seconds(job, 20) == pytest.approx(15 + 180 + 54.4 + 7.0)


BREAKDOWN = {  # a run_cost.py breakdown in round numbers: 260 s in all
    "process_s": 0.1,
    "imports_s": 4.9,
    "server_s": 4.0,
    "load_s": 5.0,
    "other_s": 1.0,
    "sample_s": 100.0,
    "update_s": 110.0,
    "eval_s": 32.0,
    "checkpoint_s": 3.0,
}


def test_a_measured_breakdown_fits_term_by_term():
    c = fit_run_cost(
        BREAKDOWN, steps=20, episode_tokens=500, eval_items=128, checkpoint_writes=1, update_step=0.5
    )
    # start 0.1 + 4.9 + 4 + 5 + 1; sampling 5 s a step / 500; update (5.5 - 0.5) / 500; 32 / 128; 3 / 1
    assert c == pytest.approx(
        RunCost(
            start=15.0,
            sample_step=0.0,
            sample_token=0.01,
            update_step=0.5,
            update_token=0.01,
            per_item=0.25,
            per_checkpoint=3.0,
        )
    )


def test_the_fitted_model_gives_back_the_measured_wall_time(monkeypatch):
    """Run at the shape it was fitted on, the model predicts the breakdown's sum: 20 steps of 20 x 25
    episode-tokens, 64 items before and after, and the one write its own clock rule places (16 s of
    step-0 evaluation + 10.5 s steps reach 121 s at step 10, then 126 s at step 22 > 20)."""
    c = fit_run_cost(
        BREAKDOWN, steps=20, episode_tokens=500, eval_items=128, checkpoint_writes=1, update_step=0.5
    )
    monkeypatch.setitem(RUN_COST, "smollm2-135m", c)
    job = {
        "eval_size": 64,
        "max_tokens": 25,
        "keep_final_checkpoint": False,
        "swarm": {
            "model": {"name": "smollm2-135m"},
            "pool": {"batch_size": 5, "group_size": 4},
            "training": {"checkpoint_every": 1, "checkpoint_every_s": 120.0},
        },
    }
    assert run_seconds(job, 20) == pytest.approx(sum(BREAKDOWN.values()))


def test_runs_are_scheduled_over_slots_in_whole_rounds():
    assert schedule_seconds([10.0] * 3, 2) == 20.0  # 3 equal runs on 2 slots: two runs' time
    assert schedule_seconds([10.0] * 4, 1) == 40.0
    assert schedule_seconds([30.0, 10.0, 10.0, 10.0], 2) == 30.0  # the three short ones share a slot
    assert schedule_seconds([10.0, 10.0, 30.0], 2) == 40.0  # in submission order: the long one comes last
    assert schedule_seconds([], 2) == 0.0
    assert runs_within(100.0, 30.0, 2) == 6 and runs_within(29.0, 30.0, 2) == 0 and runs_within(-5.0, 30.0, 1) == 0


def test_a_run_is_priced_at_its_slots_thread_count(cost, monkeypatch):
    one = RunCost(
        start=20.0, sample_step=0.0, sample_token=0.01, update_step=1.0, update_token=0.01, per_item=0.3, per_checkpoint=7.0
    )
    monkeypatch.setitem(RUN_COST_THREADS, ("smollm2-135m", 1), one)
    job = _job(checkpoint_every=0)
    # a step of 800 episode-tokens: 1 + 0.02 x 800 = 17 s; 20 steps, 128 items at 0.3 s
    assert run_seconds(job, 20, threads=1) == pytest.approx(20 + 20 * 17 + 128 * 0.3)
    assert run_seconds(job, 20) == pytest.approx(15 + 20 * 9 + 128 * 0.17)  # the slot owns the host
    assert cost_of("smollm2-135m", 4) is cost and cost_of("smollm2-135m", None) is cost  # none measured at 4
    assert cost_of("some/hf-dir", 1) is None


def _slot_rounds() -> list[dict]:
    return [r for r in json.loads(SLOTS_JSON.read_text())["rounds"] if r["layout"] == "2x1"]


def _eval_items(run: dict) -> int:
    """Items a measured run evaluated: 128 (before and after), or 64 when it reused the cached step 0."""
    return round(run["eval_s"] / run["per_eval_item_s"])


def test_the_one_thread_entry_is_the_fit_of_the_median_two_slot_round():
    """RUN_COST_THREADS' SmolLM2 entry is `fit_run_cost` of the mean of repeat 2's two runs (the median
    round of the committed 2x1 measurement), to the rounding of its printed constants."""
    (median,) = [r for r in _slot_rounds() if r["repeat"] == 2]
    walls = sorted(r["wall_s"] for r in _slot_rounds())
    assert median["wall_s"] == walls[1]
    keys = ("process_s", "imports_s", "server_s", "load_s", "other_s", "sample_s", "update_s", "eval_s")
    runs = median["per_run"]
    assert [(_eval_items(p), p["eval0_reused"]) for p in runs] == [(64, True)] * 2
    mean = {k: statistics.mean(p[k] for p in runs) for k in (*keys, "checkpoint_s", "checkpoint_written", "train_optimizer_s")}
    fitted = fit_run_cost(
        mean,
        steps=20,
        episode_tokens=16 * 32,
        eval_items=64,
        checkpoint_writes=mean["checkpoint_written"],
        update_step=mean["train_optimizer_s"] / 20,
    )
    entry = RUN_COST_THREADS[("smollm2-135m", 1)]
    for field in RunCost.__dataclass_fields__:
        assert getattr(entry, field) == pytest.approx(getattr(fitted, field), rel=1e-3), field


def test_the_plan_eta_of_two_one_thread_runs_lands_within_20_percent_of_every_measured_round():
    """The default run on two 1-thread slots, as a stage of 2 runs (seeds 0 and 1, as measured): the ETA
    is one 1-thread run (both run at once), with the step-0 evaluation where the round's runs made it
    (repeat 0, a fresh cache) and without where they reused it (repeats 1 and 2). Repeat 2 is the fitted
    round (in sample); repeats 0 and 1 are out of sample. The whole-host constants with the runs' sum split
    over the slots (the model before slots were priced) would be more than 20% short."""
    job = json.loads(json.dumps(DEFAULT_BASE_JOB))
    set_dotted(job, "swarm.training.max_steps", 20)
    rounds = _slot_rounds()
    assert len(rounds) == 3 and {r["repeat"]: r["per_run"][0]["eval0_reused"] for r in rounds} == {0: False, 1: True, 2: True}
    for r in rounds:
        eval0 = not r["per_run"][0]["eval0_reused"]
        eta = schedule_seconds([run_seconds(job, 20, threads=1, eval0=eval0)] * 2, 2)
        assert 0.8 <= eta / r["wall_s"] <= 1.2, (r["repeat"], eta, r["wall_s"])
        old = 2 * run_seconds(job, 20, eval0=eval0) / 2
        assert old / r["wall_s"] < 0.8, (r["repeat"], old, r["wall_s"])
