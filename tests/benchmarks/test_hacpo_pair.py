"""benchmarks/hacpo_pair.py: the step-0 pre-check on real (tiny) models refuses a pair that cannot share
and passes one that can, and every method of the comparison runs the same pair, seed and prompts."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil

import pytest
from tests_support import load_benchmark

hp = load_benchmark("hacpo_pair")


def _args(**kw) -> argparse.Namespace:
    base = dict(
        precheck_samples=2, max_tokens=12, normalization="token", batch=2, group=2, mini_batch=4, eps_low=3e-3,
        eps_high=4e-3, min_in_band=0.3, eval_size=4, steps=1, lr=1e-5,
    )
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture(scope="module")
def items():
    return hp.precheck_items(3, set())


def test_the_precheck_refuses_a_pair_whose_cross_samples_fall_below_the_band(items):
    # Untrained tiny (BPE) and tiny-bytes disagree by nats per token about each other's replies: s << lo.
    result = hp.precheck({"a": "tiny", "b": "tiny-bytes"}, items, _args())
    assert not result["passed"]
    for check in result["checks"].values():
        assert not check["passed"] and check["n_answers"] > 0
        assert check["in_band_share"] < 0.3 and "HACPO would train almost only on its own samples" in check["reason"]


def test_a_learner_scoring_answers_of_its_own_weights_gets_s_1_and_passes(items):
    # The same weights on both sides: every answer whose text re-tokenises to the sampled ids has lp_k = lp_src
    # exactly (the same forward pass), so s = 1, inside the band; a random model's garbage may not round-trip.
    loaded = hp.load_model(hp.ModelConfig(name="tiny"))
    answers = hp.sample_answers(loaded, items, 2, 12, seed=0)
    lp_k, lp_src = hp.learner_logprobs(loaded, answers, "token")
    same = [(k, j) for a, k, j in zip(answers, lp_k, lp_src, strict=True) if list(a.ids) == loaded.tokenizer(a.text, add_special_tokens=False)["input_ids"]]
    assert same and all(k == j for k, j in same)
    result = hp.precheck({"a": "tiny", "b": "tiny"}, items, _args())
    assert result["passed"] and all(c["in_band_share"] >= 0.3 for c in result["checks"].values())


def test_every_method_runs_the_same_pair_on_the_same_prompts_and_ablations_set_one_flag():
    agents = {"add": {"model": {"name": "tiny"}}, "sub": {"model": {"name": "tiny"}}}
    jobs = {m: hp.job_for(1, m, agents, _args()) for m in hp.METHODS}
    assert {j.seed for j in jobs.values()} == {1} and {j.task for j in jobs.values()} == {"column_arithmetic"}
    assert {m: j.team.method.value for m, j in jobs.items()} == {m: hp.METHODS[m][0] for m in hp.METHODS}
    base = jobs["hacpo"].team.hacpo
    assert not jobs["hacpo-no-baseline"].team.hacpo.capability_baseline and base.capability_baseline
    assert not jobs["hacpo-no-omega"].team.hacpo.omega_modulation and base.omega_modulation
    assert (jobs["hacpo-alpha0"].team.hacpo.alpha, base.alpha, jobs["hacpo-alpha3"].team.hacpo.alpha) == (0.0, 1.0, 3.0)
    assert jobs["hacpo-alpha3"].team.hacpo.model_dump(exclude={"alpha"}) == base.model_dump(exclude={"alpha"})


@pytest.mark.parametrize("flags, passed", [(["--precheck-only"], True), ([], False)])
def test_the_precheck_pays_only_for_the_first_seeds_warm_starts(monkeypatch, tmp_path, flags, passed):
    """Each warm start costs 10-15 CPU-minutes of SmolLM2 on 2 cores: --precheck-only, or a refused pre-check,
    must not have paid for the other seeds' (it once warmed all five before reading seed 0's)."""
    warmed = []

    def warm_start(agent, seed, args, runs_root, excluded):
        warmed.append((agent, seed))
        (tmp_path / f"{agent}{seed}").mkdir(exist_ok=True)
        (tmp_path / f"{agent}{seed}" / "model.safetensors").write_bytes(b"weights")
        return tmp_path / f"{agent}{seed}", {"wall_s": 0.0}

    monkeypatch.setattr(hp, "warm_start", warm_start)
    monkeypatch.setattr(hp, "precheck", lambda models, items, args: {"passed": passed, "models": sorted(map(str, models.values()))})
    monkeypatch.setattr(hp, "precheck_lines", lambda result: [])
    argv = ["hacpo_pair.py", "--seeds", "3", "1", "2", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"), *flags]
    monkeypatch.setattr("sys.argv", argv)
    if passed:
        hp.main()
    else:
        with pytest.raises(SystemExit, match="pre-check refused"):
            hp.main()
    assert warmed == [("add", 3), ("sub", 3)]


def test_warm_start_streams_are_skewed_to_each_agents_own_operation():
    assert hp.warm_ops("add", 0.75) == "+++-" and hp.warm_ops("sub", 0.75) == "---+"
    assert hp.warm_ops("add", 1.0) == "+" and hp.warm_ops("sub", 2 / 3) == "--+"
    ops = [it.prompt for it in hp.WorkedArithmetic(ops=hp.warm_ops("add", 0.75)).dataset(400, 1)]
    assert 0.65 < sum("+" in p for p in ops) / len(ops) < 0.85  # 3 of 4 additions, drawn per item


def test_the_report_gives_each_seeds_in_band_share_per_learner():
    # Seed 1's `add` learner gets few cross samples in the band, `sub` all of them: a pooled mean over seeds
    # and learners would hide that, the per-seed table must not. GSPO exchanges nothing: no share at all.
    def run(after, band):
        steps = {a: [{"step": i + 1, "cross_in_band_frac": b} for i, b in enumerate(bs)] for a, bs in band.items()}
        return {"after": after, "steps": steps}

    runs = {
        (1, "hacpo"): run({"add": 0.9, "sub": 0.8}, {"add": [0.25, 0.35], "sub": [1.0, 0.9]}),
        (1, "gspo"): run({"add": 0.85, "sub": 0.7}, {"add": [], "sub": []}),
    }
    lines = hp.per_seed_lines(["add", "sub"], ["hacpo", "gspo"], [1], runs)
    assert "| 1 | hacpo | 0.900 | 0.800 | 0.30 | 0.95 |" in lines
    assert "| 1 | gspo | 0.850 | 0.700 | - | - |" in lines


def _fake_training(monkeypatch, weights: dict[str, bytes]) -> list[str]:
    """Warm starts that write `weights[agent]` + the seed as their weight file, and RL runs that write a summary
    and one step's metrics per agent, accuracies rising with each run trained; returns the list of trained
    run dirs' names, appended to as they train."""
    trained: list[str] = []

    def warm_start(agent, seed, args, runs_root, excluded):
        out = runs_root / "sft" / f"{agent}{seed}"
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.safetensors").write_bytes(weights[agent] + bytes([seed]))
        return out, {"wall_s": 1.0}

    def run_once(run_dir, job):
        trained.append(run_dir.name)
        run_dir.mkdir(parents=True, exist_ok=True)
        acc = {a: 0.5 + 0.01 * len(trained) for a in hp.AGENTS}
        (run_dir / "summary.json").write_text(json.dumps({"accuracy_before": acc, "accuracy_after": acc}))
        rows = [{"agent": a, "step": 1, f"reward/{a}": 0.5, "cross_in_band_frac": 0.5} for a in hp.AGENTS]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"job": job.model_dump(mode="json"), "wall_s": 2.0}

    monkeypatch.setattr(hp, "warm_start", warm_start)
    monkeypatch.setattr(hp, "run_once", run_once)
    return trained


def test_finished_runs_are_saved_beside_the_page_and_pair_only_with_identical_warm_starts(monkeypatch, tmp_path):
    """A seed's methods take longer than a session and the scratch (--runs) may not outlive it: each finished run
    is saved in --results under its warm starts' weight digests. A new checkout (no scratch) reuses the saved runs
    and the first seed's saved pre-check without rebuilding anything, trains only a missing method, from warm
    starts rebuilt bit for bit; rebuilt weights that differ, or another setting, are refused before anything
    trains."""
    weights = {"add": b"add-weights", "sub": b"sub-weights"}
    trained = _fake_training(monkeypatch, weights)
    gated = []
    monkeypatch.setattr(hp, "precheck", lambda models, items, args: gated.append(1) or {"passed": True})
    monkeypatch.setattr(hp, "precheck_lines", lambda result: [])
    monkeypatch.setattr(hp, "markdown", lambda *a: "")
    out, runs, results = tmp_path / "out", tmp_path / "runs", tmp_path / "out_runs"

    def main(*flags):
        monkeypatch.setattr("sys.argv", ["hacpo_pair.py", "--seeds", "0", "1", "--out", str(out), "--runs", str(runs), *flags])
        hp.main()
        return json.loads(out.with_suffix(".json").read_text())

    first = main("--methods", "hacpo", "gspo")
    assert sorted(trained) == ["seed0-gspo", "seed0-hacpo", "seed1-gspo", "seed1-hacpo"] and gated == [1]
    saved = json.loads((results / "seed1-hacpo.json").read_text())
    assert saved["warm"]["add"] == hashlib.sha256(b"model.safetensors" + b"add-weights\x01").hexdigest()
    assert saved["job"]["team"]["agents"]["add"]["model"]["name"] == f"sha256:{saved['warm']['add']}"

    shutil.rmtree(runs)  # a new checkout: no warm starts, no run dirs
    trained.clear()
    assert main("--methods", "hacpo", "gspo")["runs"] == first["runs"]
    assert trained == [] and not runs.exists() and gated == [1]  # no warm start rebuilt, the pre-check reused
    again = main("--methods", "hacpo", "gspo", "gspox2")
    assert sorted(trained) == ["seed0-gspox2", "seed1-gspox2"]  # rebuilt warm starts, identical: paired
    assert again["runs"]["seed1-hacpo"] == first["runs"]["seed1-hacpo"]

    shutil.rmtree(runs)
    trained.clear()
    weights["sub"] = b"other-weights"  # a rebuild that does not reproduce the lost warm start
    (results / "seed0-naive.json").unlink(missing_ok=True)
    with pytest.raises(SystemExit, match="not the weights its saved runs"):
        main("--methods", "hacpo", "naive")
    assert trained == []
    with pytest.raises(SystemExit, match="another job"):
        main("--methods", "hacpo", "--lr", "2e-5")
    assert trained == []


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([0.05, 0.06, 0.055], hp.Verdict.REPRODUCED),  # HACPO ahead on every seed, tightly
        ([0.001, -0.002, 0.0], hp.Verdict.NOT_REPRODUCED),  # a planted no-effect: HACPO = GSPOx2 up to noise
        ([-0.04, -0.05, -0.045], hp.Verdict.NOT_REPRODUCED),  # HACPO worse
        ([0.05, -0.03, 0.02], hp.Verdict.NOT_RESOLVABLE),  # seed-to-seed spread wider than the effect
    ],
)
def test_the_verdict_follows_the_rule_written_before_the_runs(diffs, expected):
    v = hp.verdict(diffs)
    mean = sum(diffs) / 3
    sd = (sum((d - mean) ** 2 for d in diffs) / 2) ** 0.5
    half = 4.302652729911275 * sd / 3**0.5  # t(0.975, 2)
    assert v["verdict"] == expected.value and v["n"] == 3
    assert v["ci95"] == pytest.approx([mean - half, mean + half])
    assert v["sd"] == pytest.approx(sd) and v["sd_upper80"] > v["sd"]
    assert v["power_at_sd_upper80"] < v["power"] and hp.paired_power(v["sd"], v["detectable_80"], 3) == pytest.approx(0.8)
    for sd, n in ((v["sd"], v["seeds_for_80"]), (v["sd_upper80"], v["seeds_for_80_at_sd_upper80"])):
        assert n >= hp.SEEDS_MOST or hp.paired_power(sd, 0.03, n) >= 0.8
        assert n == 2 or hp.paired_power(sd, 0.03, n - 1) < 0.8  # the fewest: 2 is the least a t interval takes
    assert hp.Verdict(v["verdict"]).value in "\n".join(hp.verdict_lines(v))


def test_one_seed_or_no_spread_gives_no_verdict_but_says_why():
    assert hp.verdict([0.05])["verdict"] == hp.Verdict.NOT_RESOLVABLE.value
    assert "no interval" in hp.verdict([0.02, 0.02])["why"]


def test_the_comparison_has_the_mean_over_agents_per_seed():
    runs = {(s, m): {"after": {"add": a, "sub": b}} for s, m, a, b in
            [(0, "hacpo", 0.9, 0.8), (0, "gspox2", 0.8, 0.8), (1, "hacpo", 0.7, 0.6), (1, "gspox2", 0.7, 0.5)]}
    out = hp.compare(runs, ["add", "sub"], [0, 1], ["hacpo", "gspox2"])
    assert out["hacpo - gspox2 / mean"]["diffs"] == pytest.approx([0.05, 0.05])
    assert out["hacpo - gspox2 / add"]["diffs"] == pytest.approx([0.1, 0.0])


def test_report_only_reports_every_saved_run_pairs_what_ran_together_and_trains_nothing(monkeypatch, tmp_path):
    """A session that ends mid-seed commits what finished; a later one (or a reader) builds the page from the
    saved runs alone: each comparison pairs the seeds where both of its methods ran, a method still to run on
    a seed is named, the ranking uses only seeds with every method, and nothing trains."""
    trained = _fake_training(monkeypatch, {"add": b"add", "sub": b"sub"})
    monkeypatch.setattr(hp, "precheck", lambda models, items, args: {"passed": True})
    monkeypatch.setattr(hp, "precheck_lines", lambda result: [])
    out, runs = tmp_path / "out", tmp_path / "runs"

    def main(*flags):
        monkeypatch.setattr("sys.argv", ["hacpo_pair.py", "--out", str(out), "--runs", str(runs), *flags])
        hp.main()
        return json.loads(out.with_suffix(".json").read_text())

    with pytest.raises(SystemExit, match="no pre-check saved"):
        main("--seeds", "0", "--methods", "hacpo", "gspox2", "--report-only")
    main("--seeds", "0", "1", "--methods", "hacpo", "gspox2")
    main("--seeds", "0", "2", "--methods", "hacpo", "hacpo-alpha0")  # an ablation on seeds 0 and 2, seed 2 without gspox2
    trained.clear()
    report = main("--seeds", "0", "1", "2", "--methods", "hacpo", "gspox2", "hacpo-alpha0", "--report-only")
    assert trained == [] and report["seeds"] == [0, 1, 2]
    assert report["left_out"] == {"1": ["hacpo-alpha0"], "2": ["gspox2"]}
    primary, ablation = report["comparisons"]["hacpo - gspox2 / mean"], report["comparisons"]["hacpo - hacpo-alpha0 / mean"]
    assert primary["seeds"] == [0, 1] and report["verdict"]["n"] == 2 and ablation["seeds"] == [0, 2]
    assert report["complete_seeds"] == [0] and report["ordering"].startswith("hacpo-alpha0")  # trained last on seed 0
    assert out.with_suffix(".png").stat().st_size > 0
    page = (tmp_path / "out_results.md").read_text()
    assert "Not run yet: seed 1: hacpo-alpha0; seed 2: gspox2" in page and "**Verdict:" in page
    assert "| hacpo - hacpo-alpha0 / mean | 0, 2 |" in page and "| hacpo-alpha0 | 0, 2 |" in page
    one = main("--seeds", "0", "1", "--methods", "hacpo", "hacpo-alpha0", "--report-only")["comparisons"]
    assert one["hacpo - hacpo-alpha0 / add"]["ci95"] is None and one["hacpo - hacpo-alpha0 / add"]["seeds"] == [0]
    assert main("--seeds", "0", "1", "--methods", "hacpo", "gspo", "--report-only")["ordering"] is None  # no gspo yet
    assert "Ordering (mean over agents): none yet, no seed has every method" in (tmp_path / "out_results.md").read_text()
    with pytest.raises(SystemExit, match="no pre-check saved"):
        main("--seeds", "2", "--methods", "hacpo", "gspox2", "--report-only")


def test_a_seed_count_beyond_the_search_is_said_as_such():
    v = hp.verdict([0.03, -0.037])  # seeds 0-1's primary differences: sd 0.047 from one df, upper bound 0.19
    assert v["seeds_for_80_at_sd_upper80"] == hp.SEEDS_MOST
    assert f"more than {hp.SEEDS_MOST - 1} at its upper bound" in "\n".join(hp.verdict_lines(v))
