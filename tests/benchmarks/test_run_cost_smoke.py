"""benchmarks/run_cost.py runs end to end (tiny model, 1 step, two runs of this tree), so the script that
measures run cost on a quiet machine cannot rot unnoticed. Checks structure and accounting, never speed."""

from __future__ import annotations

import json

import pytest
from tests_support import load_benchmark

rc = load_benchmark("run_cost")


@pytest.mark.slow
def test_smoke_run_breaks_the_wall_time_into_terms(tmp_path):
    out = tmp_path / "run_cost.json"
    result = rc.main(["--smoke", "--out", str(out)])
    assert json.loads(out.read_text())["shape"] == "default"
    assert [r["variant"] for r in result["runs"]] == ["a", "b"]  # one repeat, both variants
    for run in result["per_run"]["a"] + result["per_run"]["b"]:
        terms = [run[t] for t in rc.TERMS]
        assert all(t >= 0 for t in terms) and run["load_s"] > 0 and run["sample_s"] > 0
        # the terms are disjoint parts of the child's life, so they cannot add up to more than its wall time
        assert sum(terms) <= run["wall_s"]
        # this tree's server splits its one step into the update and the checkpoint (A3R's default: none)
        assert run["update_s"] > 0 and run["checkpoint_s"] >= 0
        assert run["step_time_s"] == pytest.approx(run["update_s"] + run["checkpoint_s"])
        assert run["eta_s"] is not None and run["runs_per_hour"] == pytest.approx(3600 / run["wall_s"])
    smoke_job = result["runs"][0]["job"]
    assert smoke_job["swarm"]["model"]["name"] == "tiny" and smoke_job["swarm"]["training"]["max_steps"] == 1
    assert result["speedup_over_a"]["b"]["n"] == 1
    # the cost-model line to paste into a3r/leader/costs.py, fitted to the run (one step, no writes)
    line = rc.fitted_cost_line(result["runs"][0])
    assert line.startswith('RUN_COST["tiny"] = RunCost(start=') and "per_checkpoint=0)" in line


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s in a suite beside a 2-slot sweep on 2 cores; 300 s cut one
def test_smoke_slots_compare_one_two_thread_run_with_two_one_thread_runs(tmp_path):
    result = rc.main(["--smoke", "--slots", "--out", str(tmp_path / "slots.json")])
    one, two = (next(r for r in result["rounds"] if r["layout"] == n) for n in ("1x2", "2x1"))
    assert (one["runs"], one["threads"], two["runs"], two["threads"]) == (1, 2, 2, 1)
    assert (one["seeds"], two["seeds"]) == (
        [0],
        [0, 1],
    )  # the same shape, one more seed: same evidence per run
    assert [r["threads"] for r in two["per_run"]] == [1, 1]
    assert two["runs_per_hour"] == pytest.approx(2 * 3600 / two["wall_s"])
    assert result["two_slots_over_one"]["n"] == 1


def test_shapes_are_built_from_the_trees_defaults():
    default = rc.build_job("default", [])
    assert (
        default["swarm"]["training"]["checkpoint_every_s"] > 0 and default["keep_final_checkpoint"] is False
    )
    demo = rc.build_job("demo", ["eval_size=8"])
    assert demo["swarm"]["pool"]["batch_size"] == 8 and demo["eval_size"] == 8
    assert demo["swarm"]["training"]["max_steps"] == 8
