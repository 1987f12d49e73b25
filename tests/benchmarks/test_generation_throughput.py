"""benchmarks/generation_throughput.py's tree comparison runs end to end on the tiny model: both trees in
child processes, each importing its own engine. Checks structure, never speed."""

from __future__ import annotations

import json

import pytest
from tests_support import load_benchmark

gt = load_benchmark("generation_throughput")


def test_prompts_arrive_as_groups_of_identical_calls():
    from engine.config import ModelConfig
    from engine.models import load_model

    tok = load_model(ModelConfig(name="tiny", seed=0), device="cpu").tokenizer
    prompts = gt.make_prompts(tok, 6, group_size=4)
    assert len(prompts) == 6
    assert all(p == prompts[0] for p in prompts[:4]) and prompts[4] == prompts[5] != prompts[0]
    assert gt.make_prompts(tok, 3) == gt.make_prompts(tok, 3, group_size=1)
    assert len({tuple(p) for p in gt.make_prompts(tok, 3)}) == 3


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s in a suite beside a 2-slot sweep on 2 cores; 300 s cut one
def test_baseline_commit_runs_both_trees_in_children_interleaved(tmp_path):
    out = tmp_path / "gen.json"
    argv = ["--model", "tiny", "--concurrency", "4", "--group-size", "2", "--new-tokens", "4", "--threads", "1"]
    assert gt.main([*argv, "--baseline-commit", "HEAD", "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [(r["repeat"], r["mode"]) for r in rows] == [
        (0, "current"), (0, "baseline"), (1, "baseline"), (1, "current")
    ]
    engines = {r["mode"]: r["engine"] for r in rows}
    assert engines["current"] == str(gt.REPO) and engines["baseline"] != str(gt.REPO)  # the worktree's
    assert all(r["tokens"] == 16 and r["forward_passes"] == 4 for r in rows)  # 4 tokens: prefill + 3 decodes
    for key in ("tokens_per_s", "tokens_per_cpu_s"):
        assert report["current_over_baseline"]["4"][key]["n"] == 2
