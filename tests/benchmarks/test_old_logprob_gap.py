"""benchmarks/old_logprob_gap.py: the gap arithmetic by hand, and the tiny model end to end through the
engine's own sampling and training forward (float32 agrees to float rounding, bfloat16 does not)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tests_support import load_benchmark

og = load_benchmark("old_logprob_gap")


def test_gaps_are_per_trainable_token_and_per_sequence_mean():
    logp = torch.tensor([[-1.0, -2.3, -3.0], [-0.4, -0.6, 9.0]])
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 2's last token is not trainable
    tokens, seqs = og.gaps(logp, old, mask)
    assert tokens == pytest.approx([0.0, 0.3, 0.0, 0.1, 0.1], abs=1e-6)
    assert seqs == pytest.approx([-0.1, 0.0], abs=1e-6)  # row 1: -0.3 / 3; row 2's +0.1 and -0.1 cancel
    s = og.summarise(tokens, seqs)
    assert s["seq_max_abs"] == pytest.approx(0.1, abs=1e-6) and s["seq_share_over"] == {"0.003": 0.5, "0.0003": 0.5}
    assert s["token_share_over_ppo_clip"] == pytest.approx(1 / 5)  # 0.3 > ln 1.2 = 0.182
    assert og.TOKEN_CLIP == pytest.approx(math.log(1.2))


def test_a_tiny_run_measures_both_dtypes_on_the_engines_paths(tmp_path):
    out = tmp_path / "gap"
    result = og.main(["--model", "tiny", "--prompts", "2", "--samples", "2", "--max-tokens", "8", "--out", str(out)])
    saved = json.loads(out.with_suffix(".json").read_text())["by_dtype"]
    assert saved == json.loads(json.dumps(result["by_dtype"]))
    fp32, bf16 = saved["float32"], saved["bfloat16"]
    assert fp32["sequences"] == bf16["sequences"] == 4 and fp32["tokens"] > 0
    # float32: the same quantity by other kernels, a few float32 spacings of log-probs near -6 (5e-7 each)
    assert fp32["token_max_abs"] < 1e-5
    assert bf16["token_max_abs"] > 10 * fp32["token_max_abs"]  # bfloat16 rounding is 2^16 times coarser
    assert "| bfloat16 |" in out.with_suffix(".md").read_text()
