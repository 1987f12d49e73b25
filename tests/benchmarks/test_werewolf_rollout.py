"""benchmarks/werewolf_rollout.py runs end to end on the tiny model and reports each cache budget's seconds,
the uncached / cached ratio per repeat and whether the games' winners matched; it refuses a comparison without
the uncached arm. Checks structure, never speed."""

from __future__ import annotations

import json

import pytest
from tests_support import load_benchmark

wr = load_benchmark("werewolf_rollout")


@pytest.mark.slow
def test_both_arms_play_the_same_deals_and_the_ratio_is_reported(tmp_path, in_process):
    out = tmp_path / "rollout"
    result = wr.main(["--smoke", "--repeats", "1", "--cache-mib", "0", "64", "--work", str(tmp_path / "runs"),
                      "--out", str(out)], in_process)
    assert json.loads(out.with_suffix(".json").read_text())["game"]["model"] == "tiny"
    assert set(result["seconds"]) == {"0", "64"} and all(v["n"] == 1 for v in result["seconds"].values())
    ratio = result["uncached_over_cached"]["64"]
    assert ratio["n"] == 1 and ratio["median"] == result["seconds"]["0"]["median"] / result["seconds"]["64"]["median"]
    assert isinstance(result["same_winners_as_uncached"]["64"], bool)
    assert "| 64 MiB |" in out.with_suffix(".md").read_text()


def test_a_comparison_without_the_uncached_arm_is_refused():
    with pytest.raises(SystemExit):
        wr.parse_args(["--cache-mib", "256", "2048"])
