"""A stand-in training job for A3R tests: real process, real files, seconds long.

It honours the A3R contract: appends {"step", "reward", "loss"} lines to A3R_METRICS_FILE, saves its step
to A3R_CHECKPOINT_DIR/step.txt and resumes from it, reads config.yaml from its run dir. Failure modes
are chosen by flags so each test can inject exactly one fault, on chosen attempts only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import yaml

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--sleep", type=float, default=0.1)
p.add_argument("--first-attempt-sleep", type=float, default=None, help="per-step sleep of attempt 1 only")
p.add_argument("--fail", choices=["none", "code", "nan", "infra", "exit137"], default="none")
p.add_argument("--fail-at", type=int, default=2)
p.add_argument("--fail-attempts", default="", help="comma list of attempt numbers that fail (default all)")
p.add_argument(
    "--oom-above", type=int, default=-1, help="fail with CUDA OOM when training.micro_batch_size exceeds this"
)
p.add_argument("--corrupt", action="store_true", help="write garbage metric lines among good ones")
p.add_argument("--hold-file", default=None, help="after the last step, wait until this file exists before exiting")
args = p.parse_args()

attempt = int(os.environ["A3R_ATTEMPT"])
failing = args.fail_attempts == "" or str(attempt) in args.fail_attempts.split(",")
ckpt = Path(os.environ["A3R_CHECKPOINT_DIR"]) / "step.txt"
metrics = Path(os.environ["A3R_METRICS_FILE"])
start = int(ckpt.read_text()) if ckpt.exists() else 0
if attempt == 1 and args.first_attempt_sleep is not None:
    args.sleep = args.first_attempt_sleep
print(
    f"fake job run={os.environ['A3R_RUN_ID']} attempt={attempt} seed={os.environ['A3R_SEED']} cuda={os.environ.get('CUDA_VISIBLE_DEVICES', '-')} threads={os.environ.get('OMP_NUM_THREADS', '-')} resuming at step {start}"
)

cfg = yaml.safe_load(Path("config.yaml").read_text()) or {}
mbs = cfg.get("training", {}).get("micro_batch_size", 1)
if args.oom_above >= 0 and mbs > args.oom_above:
    print('Traceback (most recent call last):\n  File "train.py", line 1, in <module>')
    print(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (micro_batch_size={mbs})")
    sys.exit(1)

with open(metrics, "a") as m:
    if args.corrupt:
        m.write("this is not json\n")
        m.write('{"no_step": 1}\n')
        m.write("\x00\xff garbage \x01\n")
        m.write('{"step": "three", "reward": 1}\n')
        m.write("[1, 2, 3]\n")
        m.flush()
    for step in range(start, args.steps):
        time.sleep(args.sleep)
        if failing and step == args.fail_at and args.fail != "none":
            if args.fail == "code":
                raise ValueError("reward function returned a string")
            if args.fail == "nan":
                m.write(json.dumps({"step": step, "loss": float("nan"), "reward": 0.0}) + "\n")
                m.flush()
                print("loss became nan, stopping")
                sys.exit(1)
            if args.fail == "infra":
                print("RuntimeError: NCCL error: unhandled system error, Connection reset by peer")
                sys.exit(1)
            if args.fail == "exit137":
                os.kill(os.getpid(), 9)
        m.write(
            json.dumps(
                {
                    "step": step,
                    "reward": step / args.steps,
                    "loss": 1.0 / (step + 1),
                    "seed": int(os.environ["A3R_SEED"]),
                    "note": "text is ignored",
                }
            )
            + "\n"
        )
        m.flush()
        # atomic, like any real checkpoint: a job killed mid-write must not leave a torn checkpoint
        tmp = ckpt.with_suffix(".tmp")
        tmp.write_text(str(step + 1))
        os.replace(tmp, ckpt)
    if args.corrupt:
        m.write('{"step": 999, "reward": 0.5')  # torn last line, no newline
# A test that must act while the job is still running releases it by creating the file, whatever the speed.
while args.hold_file and not Path(args.hold_file).exists():
    time.sleep(0.05)
print("done")
