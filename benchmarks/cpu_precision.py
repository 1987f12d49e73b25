"""float32 against bfloat16 on this CPU: is bf16 a throughput lever for the torch backend, and at what cost in
numbers?

Every CPU figure of this project (a HACPO run 60-80 min, a werewolf run ~1 h 45 min) is float32 matmul work
on the model. CPUs with AMX or AVX512-BF16 run bfloat16 matmuls at several times the float32 rate. The
engine has no mixed-precision option yet; this measures, on the model's own forward, before one is built:

- **train**: a forward and backward of `--rows` rows of `--tokens` tokens (a micro-batch of merged samples),
  the loss the log-prob sum of the tokens;
- **decode**: `--batch` prompts of `--prompt` tokens, `--new` greedy tokens each with the KV cache
  (transformers' `generate`, not the engine's scheduler: the matmul cost, not the serving path).

Modes: `fp32` (the engine today); `autocast` (float32 weights, `torch.autocast("cpu", bfloat16)`: the sound
way to train, the optimizer keeps float32 master weights); `bf16` (weights cast to bfloat16; decode only,
an inference server's option). Per repeat every mode runs once, order rotated, after one warm-up call each.
Reported: each mode's median seconds, its speed-up over fp32 per repeat as median (min-max), and what it
changes in the numbers: the per-token log-prob's mean and max absolute difference from fp32, the difference
of a row's mean log-prob (what PPO ratios and HACPO's s are made of), and the share of greedy tokens equal
to fp32's.

    python benchmarks/cpu_precision.py                     # SmolLM2-135M, 3 repeats; alone on a quiet machine
    python benchmarks/cpu_precision.py --model tiny --repeats 1 --tokens 32 --prompt 16 --new 4   # plumbing
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.common import fmt_spread, loadavg, machine_record, rotated, spread, write_report  # noqa: E402
from engine.config import ModelConfig  # noqa: E402
from engine.models import load_model  # noqa: E402

TRAIN_MODES = ("fp32", "autocast")
DECODE_MODES = ("fp32", "autocast", "bf16")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=4, help="train: rows per forward and backward")
    ap.add_argument("--tokens", type=int, default=384, help="train: tokens per row")
    ap.add_argument("--batch", type=int, default=8, help="decode: prompts generated together")
    ap.add_argument("--prompt", type=int, default=256, help="decode: tokens per prompt")
    ap.add_argument("--new", type=int, default=32, help="decode: greedy tokens per prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/benchmarks/cpu_precision", help="writes OUT.json and OUT.md")
    return ap.parse_args(argv)


def precision(mode: str) -> contextlib.AbstractContextManager:
    """The autocast context of a mode (`autocast`), else none: fp32 and bf16 run in their weights' dtype."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else contextlib.nullcontext()


def token_logprobs(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """Log-prob of each token after the first, in float32 (rows x tokens-1)."""
    logits = model(input_ids=ids).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def train_call(model: Any, ids: torch.Tensor, mode: str) -> tuple[float, torch.Tensor]:
    """Seconds for one forward and backward, and the forward's per-token log-probs (detached)."""
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    with precision(mode):
        lp = token_logprobs(model, ids)
    lp.sum().backward()
    return time.perf_counter() - t0, lp.detach()


def decode_call(model: Any, prompts: torch.Tensor, new: int, mode: str) -> tuple[float, torch.Tensor]:
    """Seconds for `new` greedy tokens of every prompt, and those tokens."""
    t0 = time.perf_counter()
    with torch.no_grad(), precision(mode):
        out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new,
                             min_new_tokens=new, do_sample=False, pad_token_id=0)
    return time.perf_counter() - t0, out[:, prompts.shape[1]:]


def differences(lp: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """How far a mode's per-token log-probs are from fp32's: per token and per row mean."""
    d = (lp - ref).abs()
    return {"token_mean_abs": d.mean().item(), "token_max_abs": d.max().item(),
            "row_mean_max_abs": (lp.mean(-1) - ref.mean(-1)).abs().max().item()}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    lm = load_model(ModelConfig(name=args.model), device="cpu")
    model = lm.model
    vocab = model.config.vocab_size
    train_ids = torch.randint(0, vocab, (args.rows, args.tokens))
    prompts = torch.randint(0, vocab, (args.batch, args.prompt))
    bf16_model = None
    times: dict[str, dict[str, list[float]]] = {"train": {m: [] for m in TRAIN_MODES},
                                                 "decode": {m: [] for m in DECODE_MODES}}
    numerics: dict[str, Any] = {"train": {}, "decode": {}}

    def decode_model(mode: str) -> Any:
        nonlocal bf16_model
        if mode != "bf16":
            return model
        if bf16_model is None:
            import copy

            bf16_model = copy.deepcopy(model).to(torch.bfloat16)
        return bf16_model

    model.train()
    ref_lp = None
    for mode in TRAIN_MODES:  # warm-up, and the numbers each mode computes
        _, lp = train_call(model, train_ids, mode)
        ref_lp = lp if mode == "fp32" else ref_lp
        numerics["train"][mode] = differences(lp, ref_lp)
    model.eval()
    ref_tokens = None
    for mode in DECODE_MODES:
        _, toks = decode_call(decode_model(mode), prompts, args.new, mode)
        ref_tokens = toks if mode == "fp32" else ref_tokens
        numerics["decode"][mode] = {"greedy_tokens_equal": (toks == ref_tokens).float().mean().item()}

    for r in range(args.repeats):
        model.train()
        for mode in rotated(TRAIN_MODES, r):
            times["train"][mode].append(train_call(model, train_ids, mode)[0])
        model.eval()
        for mode in rotated(DECODE_MODES, r):
            times["decode"][mode].append(decode_call(decode_model(mode), prompts, args.new, mode)[0])
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{w} {m} {v[-1]:.2f} s" for w, ms in times.items() for m, v in ms.items()), file=sys.stderr)

    speedup = {w: {m: spread([f / x for f, x in zip(ms["fp32"], v, strict=True)])
                   for m, v in ms.items() if m != "fp32"} for w, ms in times.items()}
    return {"seconds": {w: {m: spread(v) for m, v in ms.items()} for w, ms in times.items()},
            "speedup_over_fp32": speedup, "numerics": numerics}


def page(result: dict[str, Any]) -> str:
    a, s = result["args"], result["summary"]
    lines = [
        "# float32 against bfloat16 on this CPU (the model's own forward, not yet an engine option)", "",
        f"Command: `{result['command']}`", "",
        f"Model {a['model']}; train: {a['rows']} rows x {a['tokens']} tokens, forward and backward; decode: "
        f"{a['batch']} prompts x {a['prompt']} tokens, {a['new']} greedy tokens each; {a['repeats']} repeats, "
        "order rotated.", "",
        "| work | mode | median seconds | speed-up over fp32 (median, min-max over repeats) |",
        "| --- | --- | --- | --- |",
    ]
    for work, modes in s["seconds"].items():
        for mode, sec in modes.items():
            up = "1 (reference)" if mode == "fp32" else fmt_spread(s["speedup_over_fp32"][work][mode])
            lines.append(f"| {work} | {mode} | {sec['median']:.2f} | {up} |")
    lines += ["", "What bf16 changes in the numbers (against fp32, same inputs):", "",
              "| mode | per-token log-prob: mean / max abs difference (nats) | a row's mean log-prob: max abs "
              "difference | greedy tokens equal to fp32's |", "| --- | --- | --- | --- |"]
    for mode in DECODE_MODES:
        t = s["numerics"]["train"].get(mode)
        tok = f"{t['token_mean_abs']:.4f} / {t['token_max_abs']:.4f}" if t else "(decode only)"
        row = f"{t['row_mean_max_abs']:.4f}" if t else "-"
        lines.append(f"| {mode} | {tok} | {row} | {s['numerics']['decode'][mode]['greedy_tokens_equal']:.3f} |")
    m = result["machine"]
    lines += ["", f"Machine: {m['platform']}, {m['cpu_count']} CPUs, torch {m['torch']}, load before "
              f"{m['loadavg_before']}, after {m['loadavg_after']}; wall {result['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    load_before, t0 = loadavg(), time.monotonic()
    summary = measure(args)
    command = shlex.join(["python", "benchmarks/cpu_precision.py", *(argv if argv is not None else sys.argv[1:])])
    result = {"command": command,
              "args": vars(args), "summary": summary, "wall_s": time.monotonic() - t0,
              "machine": machine_record(load_before)}
    write_report(args.out, result, page)
    print(json.dumps(summary["speedup_over_fp32"], indent=1))
    return result


if __name__ == "__main__":
    main()
