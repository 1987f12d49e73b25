"""benchmarks/cpu_precision.py on the tiny model: every mode measured and reported, the numerics are real
differences (fp32 against itself is exactly 0, autocast is not). Checks structure and numbers, never
speed."""

from __future__ import annotations

import json

import torch
from tests_support import load_benchmark

cp = load_benchmark("cpu_precision")


def test_differences_are_computed_per_token_and_per_row_mean():
    ref = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    lp = torch.tensor([[-1.0, -2.3, -3.0], [-0.4, -0.6, -0.5]])  # row 2's errors cancel in its mean
    d = cp.differences(lp, ref)
    assert abs(d["token_mean_abs"] - 0.5 / 6) < 1e-6 and abs(d["token_max_abs"] - 0.3) < 1e-6
    assert abs(d["row_mean_max_abs"] - 0.1) < 1e-6  # row 1: 0.3 / 3; row 2: 0


def test_the_precision_context_is_autocast_only_for_autocast():
    with cp.precision("autocast"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    for mode in ("fp32", "bf16"):
        with cp.precision(mode):
            assert not torch.is_autocast_enabled("cpu")


def test_a_tiny_run_reports_every_mode_with_real_numerics(tmp_path):
    out = tmp_path / "prec"
    result = cp.main(["--model", "tiny", "--repeats", "2", "--rows", "2", "--tokens", "24", "--batch", "2",
                      "--prompt", "8", "--new", "3", "--out", str(out)])
    s = json.loads(out.with_suffix(".json").read_text())["summary"]
    assert s == json.loads(json.dumps(result["summary"]))
    assert set(s["seconds"]["train"]) == set(cp.TRAIN_MODES) and set(s["seconds"]["decode"]) == set(cp.DECODE_MODES)
    assert all(v["n"] == 2 for w in s["seconds"].values() for v in w.values())
    assert set(s["speedup_over_fp32"]["decode"]) == {"autocast", "bf16"}
    fp32 = s["numerics"]["train"]["fp32"]
    assert fp32 == {"token_mean_abs": 0.0, "token_max_abs": 0.0, "row_mean_max_abs": 0.0}
    # bf16 keeps 8 bits of mantissa: the log-probs move, by much less than a nat per token on average
    assert 0 < s["numerics"]["train"]["autocast"]["token_mean_abs"] < 1.0
    assert s["numerics"]["decode"]["fp32"]["greedy_tokens_equal"] == 1.0
    page = out.with_suffix(".md").read_text()
    assert "| decode | bf16 |" in page and "| train | autocast |" in page and "(decode only)" in page
