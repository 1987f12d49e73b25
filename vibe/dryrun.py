"""The dry run of `vibe check`: N tasks x K episodes of the client against a local debug swarm server on
the tiny model, then the one training step those episodes trigger, checked to change the weights (with a
small entropy bonus, so the check holds even when random weights earn every episode the same reward).

The server is a real `swarm serve` subprocess on loopback (engine.jobs.ServerProcess); the client code
runs in a sandboxed subprocess (vibe._episodes). The check always uses `tiny` with full weights, whatever
vibe.yaml trains, so it is fast and its weights can be compared with the initial ones.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import httpx

from engine.config import SwarmConfig
from engine.errors import SwarmError
from engine.jobs import ServerProcess
from vibe.config import VibeJob
from vibe.flags import Report, Severity, Stage
from vibe.layout import ClientDir
from vibe.private import write_private
from vibe.sandbox import run_sandboxed
from vibe.stats import component_stats, group_spreads

__all__ = ["check_config", "dry_run", "weights_changed"]


def check_config(job: VibeJob, run_dir: Path, roles: int = 1) -> SwarmConfig:
    """The debug server's config: tiny, full weights, one step as soon as N tasks x K episodes (per
    role: each role of a task is its own group) are in."""
    n, k = job.check.tasks * roles, job.check.episodes
    data = job.swarm.model_dump(mode="json")
    data["model"] = {**data["model"], "name": "tiny"}
    data["lora"] = {**data["lora"], "enabled": False}
    data["pool"] = {**data["pool"], "policy": "task_count", "batch_size": n, "group_size": k, "client_share": {}}
    micro = min(data["training"]["micro_batch_size"], n * k)
    data["training"] = {**data["training"], "max_steps": 1, "checkpoint_every": 1, "mini_batch_size": n * k,
                        "micro_batch_size": micro, "lr": max(data["training"]["lr"], 1e-4)}
    # A small entropy bonus gives the step a gradient even when every group's rewards are equal (zero
    # advantages, common on random weights), so "the weights changed" proves the recorded tokens reached
    # the loss, whatever the rewards were.
    data["algorithm"] = {**data["algorithm"], "entropy_coef": max(data["algorithm"]["entropy_coef"], 0.01)}
    data["run_dir"] = str(run_dir)
    return SwarmConfig.model_validate(data)


def weights_changed(seed: int, checkpoint: Path) -> float:
    """Largest absolute change of any parameter between the initial tiny weights and `checkpoint`."""
    from safetensors.torch import load_file

    from engine.models.loader import resolve_model_dir

    before: dict = {}
    for f in sorted(resolve_model_dir("tiny", seed=seed).glob("*.safetensors")):
        before |= load_file(f)
    after: dict = {}
    for f in sorted((checkpoint / "model").glob("*.safetensors")):
        after |= load_file(f)
    shared = before.keys() & after.keys()
    if not shared:
        raise ValueError(f"no parameter names in common between the initial model and {checkpoint}")
    return max(float((after[k].float() - before[k].float()).abs().max()) for k in shared)


def dry_run(cd: ClientDir, job: VibeJob, report: Report) -> None:
    """Add DRY_RUN and TRAIN_STEP flags (and reward statistics) to `report`."""
    from engine.training.checkpoint import latest_checkpoint

    run_dir = cd.state_dir / "check-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    try:
        server = ServerProcess(run_dir, log_path=run_dir / "server.log")
    except (RuntimeError, TimeoutError) as e:
        report.add(Stage.DRY_RUN, "server_failed", Severity.ERROR, f"the debug server did not start: {e}")
        return
    try:
        token_file = run_dir / "admin_token"
        write_private(token_file, server.token)
        cfg = check_config(job, run_dir, max(1, len(report.stats.get("roles", []))))
        with server.client("vibe-check-admin") as admin:
            try:
                admin.configure(cfg)
                admin.start(wait=True, timeout=job.check.timeout_s)
            except (SwarmError, TimeoutError, httpx.HTTPError) as e:
                report.add(Stage.DRY_RUN, "server_failed", Severity.ERROR,
                           f"the debug server did not reach ROLLING: {e}; log: {run_dir / 'server.log'}")
                return
            res = run_sandboxed(
                "vibe._episodes", [str(cd.root), "--url", server.url, "--token-file", str(token_file)],
                cwd=cd.root, result_file=run_dir / "episodes.json",
                timeout_s=job.check.timeout_s, memory_mb=job.check.memory_mb,
            )
            if not _episode_flags(res, job, report):
                return
            report.stages_run.append(Stage.TRAIN_STEP)
            try:
                st = admin.wait_for_step(1, timeout=job.check.timeout_s)
            except TimeoutError:
                report.add(Stage.TRAIN_STEP, "no_training_step", Severity.ERROR,
                           f"all {len(res.result['episodes'])} episodes ended but the server took no training step "
                           f"within {job.check.timeout_s}s; server log tail in {run_dir / 'server.log'}")
                return
            report.stats["train_step"] = st.get("last_metrics") or {}
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            report.add(Stage.TRAIN_STEP, "no_checkpoint", Severity.ERROR, "the training step wrote no checkpoint")
            return
        delta = weights_changed(cfg.model.seed, ckpt)
        report.stats["max_weight_change"] = delta
        if delta == 0.0:
            report.add(Stage.TRAIN_STEP, "weights_unchanged", Severity.ERROR,
                       "the training step left every weight unchanged: the episodes' recorded tokens carried no "
                       f"gradient (do the LLM calls go through the episode's client?); server log: {run_dir / 'server.log'}")
    finally:
        server.stop()
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)


def _episode_flags(res, job: VibeJob, report: Report) -> bool:
    """Flags of the episodes themselves; True when every episode ended and training can be checked."""
    if res.timed_out:
        report.add(Stage.DRY_RUN, "episodes_timeout", Severity.ERROR,
                   f"the client's episodes did not finish within {job.check.timeout_s}s (check.timeout_s); log tail:\n{res.log_tail}")
        return False
    if res.result is None:
        report.add(Stage.DRY_RUN, "client_crashed", Severity.ERROR,
                   f"the client process exited with code {res.returncode} before reporting; log tail:\n{res.log_tail}")
        return False
    episodes = res.result["episodes"]
    failed = [e for e in episodes if "error" in e]
    if failed:
        first = failed[0]
        report.add(Stage.DRY_RUN, "episode_failed", Severity.ERROR,
                   f"{len(failed)} of {len(episodes)} episodes raised; first (task {first['task_id']!r}): {first['error']}",
                   traceback=first.get("traceback", ""))
        return False
    totals = [math.fsum(e["components"].values()) for e in episodes]
    out = [r for r in totals if not job.reward_min <= r <= job.reward_max]
    if out:
        report.add(Stage.DRY_RUN, "reward_out_of_range", Severity.ERROR,
                   f"{len(out)} episode reward(s) outside [{job.reward_min}, {job.reward_max}] (e.g. {out[0]}); "
                   "fix reward.py or the range in vibe.yaml")
    report.stats["components"] = component_stats(episodes)
    spreads = group_spreads(episodes)
    report.stats["groups"] = len(spreads)
    report.stats["flat_groups"] = sum(1 for s in spreads.values() if s == 0.0)
    if spreads and all(s == 0.0 for s in spreads.values()):
        report.add(Stage.DRY_RUN, "groups_all_equal", Severity.WARNING,
                   f"every group of the dry run had equal rewards ({totals[0]:.3g}); with random tiny weights this "
                   "is common, but if it persists in training there is no learning signal (see vibe status)")
    accepted = sum(1 for e in episodes if e.get("accepted"))
    if accepted != len(episodes):
        report.add(Stage.DRY_RUN, "episodes_rejected", Severity.ERROR,
                   f"the server accepted {accepted} of {len(episodes)} ended episodes")
    return not report.errors
