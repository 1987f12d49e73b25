"""The leader's cost model: its arithmetic against hand-computed values, term by term (load, per step,
per held-out item, checkpoint writes under the engine's step and time rules)."""

from __future__ import annotations

import pytest

from a3r.leader.costs import RUN_COST, RunCost, checkpoint_writes, run_seconds


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


def _job(**training) -> dict:
    return {
        "eval_size": 64,
        "swarm": {"model": {"name": "smollm2-135m"}, "pool": {"batch_size": 4, "group_size": 8}, "training": training},
    }


@pytest.fixture
def cost(monkeypatch) -> RunCost:
    """Round figures, so the expected values below are computed by hand (and survive recalibration)."""
    c = RunCost(start=15.0, step=1.0, per_episode=0.25, per_item=0.17, per_checkpoint=7.0)
    monkeypatch.setitem(RUN_COST, "smollm2-135m", c)
    return c


def test_run_seconds_by_term(cost):
    # load 15 + 20 steps x (1 + 0.25 x 32 episodes) + 2 x 64 items x 0.17 = 15 + 180 + 21.76
    base = 216.76
    # every step: 19 full writes of 7 s and the weights-only write at max_steps (a third of the bytes)
    assert run_seconds(_job(checkpoint_every=1), 20) == pytest.approx(base + 7.0 * (19 + 1 / 3))
    assert run_seconds(_job(), 20) == run_seconds(_job(checkpoint_every=1), 20)  # the engine's default
    # A3R's default: 9 s steps reach 126 s at step 14, the only write; none at the end (the job deletes it)
    a3r = {**_job(checkpoint_every=1, checkpoint_every_s=120.0), "keep_final_checkpoint": False}
    assert run_seconds(a3r, 20) == pytest.approx(base + 7.0)


def test_evaluations_count_on_the_checkpoint_clock(cost):
    """eval_every 5: 64 x 5 items (before, after, steps 5 10 15) x 0.17 = 54.4 s, and the clock (9 s per
    step, 10.88 s per evaluation) reaches 120.76 s at step 11: one write of 7 s."""
    job = {**_job(checkpoint_every=1, checkpoint_every_s=120.0), "keep_final_checkpoint": False, "eval_every": 5}
    assert run_seconds(job, 20) == pytest.approx(15 + 180 + 54.4 + 7.0)
