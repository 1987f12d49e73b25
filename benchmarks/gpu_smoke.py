"""GPU smoke test of the GPU backends: a few steps of arithmetic each, then a resume.

For each backend asked for (default: vllm and verl), a real `engine.launch.train` run (swarm server
subprocess + arithmetic client) on this CUDA machine:
1. trains `--steps` optimizer steps with checkpoints every step;
2. checks that every step recorded a reward (metrics.jsonl has reward_mean) and that the trained weights
   differ from the initial ones (full weights: the checkpoint's safetensors against the base model's;
   LoRA: the adapter's B matrices, which peft initialises to zero);
3. runs the same job again with `--steps + 2` on the same run dir and checks it resumed from the last
   checkpoint (the new steps are numbered after the old ones; no step ran twice);
4. writes tokens/s (trainer tokens over trainer time) and the mean step time to `--out`.json/.md, beside
   the CPU figures in docs/benchmarks.

Without CUDA it exits with status 2 and says so; it never falls back to CPU. It has not been run on a GPU
yet (see docs/engine.md, GPU backends). For `backend: verl` (a one-node Ray cluster started by the server)
the weights check reads no tensors: verl keeps sharded FSDP state that only its workers load, so it checks
that the model shards of the two newest verl checkpoints (two consecutive steps) differ byte for byte.

    python benchmarks/gpu_smoke.py --backends vllm --model /path/to/hf-model --out docs/benchmarks/gpu_smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import loadavg, machine_record  # noqa: E402


def _weights_changed(run_dir: Path, base_dir: Path, lora: bool) -> bool:
    from safetensors.torch import load_file

    from engine.training.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise AssertionError(f"no checkpoint in {run_dir}")
    if lora:
        adapter = load_file(str(next((ckpt / "adapter").glob("*.safetensors"))))
        return any(float(t.abs().max()) > 0 for k, t in adapter.items() if "lora_B" in k)
    trained: dict = {}
    for f in sorted((ckpt / "model").glob("*.safetensors")):
        trained.update(load_file(str(f)))
    for f in sorted(base_dir.glob("*.safetensors")):
        for k, t in load_file(str(f)).items():
            if k in trained and not trained[k].to(t.dtype).equal(t):
                return True
    return False


def _verl_weights_changed(run_dir: Path) -> bool:
    """Whether the rank-0 model shards of the two newest verl checkpoints (consecutive steps with
    checkpoint_every 1) differ: verl's FSDP state is saved per rank with torch.save and read back only by
    verl's workers, so the bytes are compared rather than the tensors."""
    import hashlib

    steps = sorted((run_dir / "verl").glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    if len(steps) < 2:
        raise AssertionError(f"fewer than two verl checkpoints under {run_dir / 'verl'}")
    digests = []
    for step in steps[-2:]:
        shard = next((step / "actor").glob("model_world_size_*_rank_0.pt"), None)
        if shard is None:
            raise AssertionError(f"no rank-0 model shard in {step / 'actor'}")
        digests.append(hashlib.sha256(shard.read_bytes()).hexdigest())
    return digests[0] != digests[1]


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [r for r in rows if "reward_mean" in r and not r.get("superseded")]


def smoke(backend: str, args: argparse.Namespace, root: Path) -> dict:
    from engine.config import SwarmConfig
    from engine.jobs import TrainJob
    from engine.launch import train
    from engine.models.loader import resolve_model_dir

    run_dir = root / backend
    swarm = SwarmConfig(
        backend=backend,
        model={"name": args.model, "dtype": "bfloat16"},
        lora={"enabled": args.lora},
        pool={"policy": "task_count", "batch_size": args.batch, "group_size": args.group},
        training={"lr": args.lr, "mini_batch_size": args.batch * args.group, "micro_batch_size": args.group,
                  "checkpoint_every": 1, "max_steps": args.steps},
    )  # fmt: skip
    job = TrainJob(task="arithmetic", swarm=swarm, eval_size=0, max_tokens=32,
                   concurrency=args.batch * args.group, max_server_restarts=0)  # fmt: skip
    out: dict = {"backend": backend, "ok": False}
    t0 = time.perf_counter()
    try:
        train(job, run_dir)
        first = _metrics(run_dir)
        assert len(first) == args.steps, f"{len(first)} steps recorded, expected {args.steps}"
        assert all(isinstance(r["reward_mean"], float) for r in first), "a step recorded no reward"
        if backend == "verl":
            assert _verl_weights_changed(run_dir), "the last two verl checkpoints hold the same weights"
        else:
            base = resolve_model_dir(args.model)
            assert _weights_changed(run_dir, base, args.lora), "the trained weights equal the initial ones"
        resumed = job.model_copy(update={"swarm": swarm.model_copy(update={
            "training": swarm.training.model_copy(update={"max_steps": args.steps + 2})})})  # fmt: skip
        train(resumed, run_dir)
        steps = [int(r["step"]) for r in _metrics(run_dir)]
        assert steps == list(range(1, args.steps + 3)), f"resume did not continue the steps: {steps}"
        rows = _metrics(run_dir)
        tokens = sum(r.get("tokens", 0.0) for r in rows)
        train_s = sum(r.get("train_time_s", 0.0) for r in rows)
        out.update(
            ok=True,
            steps=len(rows),
            reward_mean_first=rows[0]["reward_mean"],
            reward_mean_last=rows[-1]["reward_mean"],
            train_tokens_per_s=tokens / train_s if train_s else None,
            mean_train_step_s=train_s / len(rows),
            mean_weight_sync_s=sum(r.get("weight_sync_s", 0.0) for r in rows) / len(rows),
        )
    except Exception as e:  # report every backend, then fail the script
        out["error"] = f"{type(e).__name__}: {e}"
    out["wall_s"] = time.perf_counter() - t0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["vllm", "verl"], choices=["vllm", "verl"])
    ap.add_argument("--model", default="smollm2-135m", help="built-in name or a local HF directory")
    ap.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of full weights")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--run-root", default="runs/gpu_smoke")
    ap.add_argument("--out", default="docs/benchmarks/gpu_smoke")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(
            "gpu_smoke: no CUDA device on this machine (torch.cuda.is_available() is False); the GPU backends "
            "cannot run here. Run it on a CUDA machine after `pip install -e '.[gpu]'`.",
            file=sys.stderr,
        )
        return 2
    root = Path(args.run_root)
    load_before = loadavg()
    results = [smoke(b, args, root) for b in args.backends]
    report = {
        "device": torch.cuda.get_device_name(0),
        "machine": machine_record(load_before),
        "model": args.model,
        "lora": args.lora,
        "batch": args.batch,
        "group": args.group,
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    lines = [f"# GPU smoke ({report['device']}, {args.model}, {'LoRA' if args.lora else 'full weights'})", "",
             "| backend | ok | steps | train tokens/s | step s | weight sync s | note |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        tps = f"{r['train_tokens_per_s']:.0f}" if r.get("train_tokens_per_s") else "-"
        step = f"{r['mean_train_step_s']:.2f}" if r.get("mean_train_step_s") else "-"
        sync = f"{r['mean_weight_sync_s']:.2f}" if r.get("ok") else "-"
        lines.append(f"| {r['backend']} | {r['ok']} | {r.get('steps', '-')} | {tps} | {step} | {sync} | {r.get('error', '')} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
