"""How far the log-probs recorded at sampling time are from the trainer's own forward, per dtype: what
`training.old_logprobs: auto` decides on.

The policy ratio divides the trainer's probability of each sampled token by the old policy's. With
`old_logprobs: sampled` the old policy's are the ones the inference engine recorded while sampling; they
are the same quantity (log_softmax of the untempered logits, same weights) computed by other kernels in
other batch shapes. This measures the gap on the engine's own paths: the torch inference engine samples
`--prompts` x `--samples` answers of the task at temperature 1 and records their log-probs, then the
torch trainer's forward (`TorchTrainer.forward`, the micro-batches a step would cut) scores the same
tokens. Reported per dtype: the per-token absolute gap (mean, max), a sequence's mean gap (median and max
of its absolute value: what a GSPO sequence ratio or HACPO's s is made of), and the share of sequences a
GSPO clip would treat as off-policy before any update (|mean gap| above 3e-3, the hacpo_pair setting, and
above 3e-4, the engine's GSPO default), and the share of tokens past a PPO clip of 0.2 (|gap| > ln 1.2).

    python benchmarks/old_logprob_gap.py                              # SmolLM2-135M, float32 and bfloat16
    python benchmarks/old_logprob_gap.py --model tiny --prompts 2 --samples 2 --max-tokens 8   # plumbing

Deterministic for a given machine and seed (no timing): it runs anywhere, no quiet machine needed.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.common import loadavg, machine_record, write_report  # noqa: E402
from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.torch.inference import TorchInferenceEngine  # noqa: E402
from engine.backends.torch.trainer import TorchTrainer  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.models import load_model  # noqa: E402
from engine.tasks import get_task  # noqa: E402
from engine.tasks.base import split_items  # noqa: E402
from engine.training.batch import chunks, collate, prompt_then_length  # noqa: E402
from engine.types import Author, Block, Sample, Timeline  # noqa: E402

SEQ_CLIPS = (3e-3, 3e-4)  # hacpo_pair's GSPO clip; the engine's GSPO default
TOKEN_CLIP = math.log(1.2)  # PPO's 0.2, as a log-ratio


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--task", default="column_arithmetic")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4, help="answers per prompt (n)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/benchmarks/old_logprob_gap", help="writes OUT.json and OUT.md")
    return ap.parse_args(argv)


def gaps(logp_BT: torch.Tensor, old_BT: torch.Tensor, mask_BT: torch.Tensor) -> tuple[list[float], list[float]]:
    """(|gap| of every trainable token, the mean gap of every sequence with a trainable token)."""
    m = mask_BT > 0
    d = (logp_BT.double() - old_BT.double()) * m
    n = m.sum(-1)
    tokens = d[m].abs().tolist()
    seqs = (d.sum(-1)[n > 0] / n[n > 0]).tolist()
    return tokens, seqs


def summarise(tokens: list[float], seqs: list[float]) -> dict[str, Any]:
    a = [abs(x) for x in seqs]
    return {
        "sequences": len(seqs), "tokens": len(tokens),
        "token_mean_abs": statistics.fmean(tokens), "token_max_abs": max(tokens),
        "seq_median_abs": statistics.median(a), "seq_max_abs": max(a),
        "seq_share_over": {f"{c:g}": sum(x > c for x in a) / len(a) for c in SEQ_CLIPS},
        "token_share_over_ppo_clip": sum(x > TOKEN_CLIP for x in tokens) / len(tokens),
    }


def sample_answers(loaded, items, args) -> list[Sample]:
    """The inference engine's answers with their recorded log-probs, as one-turn samples."""
    tok = loaded.tokenizer
    engine = TorchInferenceEngine.from_loaded(loaded, max_batch_rows=args.prompts * args.samples)
    prompts = [
        tok(tok.apply_chat_template([{"role": "user", "content": it.prompt}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False)["input_ids"]
        for it in items
    ]

    async def all_answers():
        params = [SamplingParams(max_new_tokens=args.max_tokens, temperature=1.0, n=args.samples, seed=args.seed * 1000 + k)
                  for k in range(len(prompts))]
        return await asyncio.gather(*[engine.generate(p, sp) for p, sp in zip(prompts, params, strict=True)])

    try:
        answers = asyncio.run(all_answers())
    finally:
        engine.close()
    return [
        Sample(Timeline([Block(Author.USER, "", p), Block(Author.LLM, c.text, c.token_ids, c.logprobs, True)]),
               f"e{k}-{i}", f"p{k}", 0.0, 1.0)
        for k, (p, comps) in enumerate(zip(prompts, answers, strict=True)) for i, c in enumerate(comps)
    ]


def measure(args, dtype: str) -> dict[str, Any]:
    cfg = SwarmConfig(model={"name": args.model, "dtype": dtype, "seed": args.seed})
    loaded = load_model(cfg.model, device="cpu")
    items = split_items(get_task(args.task), args.prompts, 0, args.seed)[0]
    samples = sorted(sample_answers(loaded, items, args), key=prompt_then_length)  # as a training step orders them
    for p in loaded.model.parameters():
        p.requires_grad_(True)
    trainer = TorchTrainer(loaded.model, loaded.tokenizer.pad_token_id, cfg)
    tokens: list[float] = []
    seqs: list[float] = []
    with torch.no_grad():
        for mini in chunks(len(samples), cfg.training.mini_batch_size):
            for micro in chunks(len(samples[mini]), cfg.training.micro_batch_size):
                c = collate(samples[mini][micro], trainer.pad_id)
                fw = trainer.forward(c, need_ref=False)
                t, s = gaps(fw.logp_BT, c.old_logp_BT[:, fw.start :], fw.mask_BT)
                tokens += t
                seqs += s
    return summarise(tokens, seqs)


def page(result: dict[str, Any]) -> str:
    lines = [
        "# Sampling-time log-probs against the trainer's forward, per dtype (generated)", "",
        f"Command: `{result['command']}`", "",
        f"Model {result['args']['model']}, task {result['args']['task']}: {result['args']['prompts']} prompts x "
        f"{result['args']['samples']} answers at temperature 1, at most {result['args']['max_tokens']} tokens; the torch "
        "inference engine samples and records, the torch trainer's forward scores the same tokens.", "",
        "| dtype | per-token gap: mean / max (nats) | a sequence's mean gap: median / max | sequences past a GSPO clip of 3e-3 / 3e-4 | tokens past a PPO clip of 0.2 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for dtype, s in result["by_dtype"].items():
        over = s["seq_share_over"]
        lines.append(f"| {dtype} | {s['token_mean_abs']:.2e} / {s['token_max_abs']:.2e} | {s['seq_median_abs']:.2e} / "
                     f"{s['seq_max_abs']:.2e} | {over['0.003']:.0%} / {over['0.0003']:.0%} | {s['token_share_over_ppo_clip']:.1%} |")
    lines += ["", f"({s['sequences']} sequences, {s['tokens']} trainable tokens per dtype.) A share past a clip is the "
              "share of samples whose ratio the clip would treat as off-policy before any update, if the ratio took "
              "the recorded log-probs (`training.old_logprobs: sampled`); with `recomputed` every ratio starts at 1.", "",
              f"Machine: {result['machine']['platform']}, {result['machine']['cpu_count']} CPUs, torch {result['machine']['torch']}; "
              f"wall {result['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    t0, load_before = time.time(), loadavg()
    by_dtype = {d: measure(args, d) for d in args.dtypes}
    result = {
        "command": shlex.join(["python", "benchmarks/old_logprob_gap.py", *(argv if argv is not None else sys.argv[1:])]),
        "args": vars(args), "by_dtype": by_dtype, "machine": machine_record(load_before), "wall_s": time.time() - t0,
    }
    print(write_report(args.out, result, page))
    return result


if __name__ == "__main__":
    main()
