"""Seconds one engine checkpoint takes: full weights + AdamW state, written and fsynced the way the torch
backend does it (`engine.training.checkpoint.commit_checkpoint`), for the cost model's `per_checkpoint`
(a3r/leader/costs.py). Every step checkpoints by default (`checkpoint_every: 1`).

    python benchmarks/checkpoint_cost.py smollm2-135m 4
    python benchmarks/checkpoint_cost.py tiny 4

Prints each save's seconds; the machine's load changes them (say what it was when you quote them).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.models.builtins import smollm2_dir, tiny_dir
from engine.training.checkpoint import commit_checkpoint


def main(model: str, saves: int) -> list[float]:
    directory = smollm2_dir() if model == "smollm2-135m" else tiny_dir(0)
    lm = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(directory)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-5)
    for p in lm.parameters():  # one step, so the optimizer holds both moments as a trained run does
        p.grad = torch.zeros_like(p)
    opt.step()
    run = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))

    def write(tmp: Path) -> None:
        lm.save_pretrained(tmp / "model", safe_serialization=True)
        tok.save_pretrained(tmp / "model")
        torch.save(opt.state_dict(), tmp / "optimizer.pt")

    times = []
    try:
        for step in range(1, saves + 1):
            t = time.perf_counter()
            commit_checkpoint(run, step, write, {"model": model})
            times.append(time.perf_counter() - t)
    finally:
        shutil.rmtree(run, ignore_errors=True)
    return times


if __name__ == "__main__":
    name, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4
    print(f"{name}: checkpoint seconds {[round(x, 2) for x in main(name, n)]}")
