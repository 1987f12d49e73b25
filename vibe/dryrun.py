"""The dry run of `vibe check`: N tasks x K episodes of the client against a local debug swarm server on
the tiny model, then the one training step those episodes trigger, checked to change the weights (with a
small entropy bonus, so the check holds even when random weights earn every episode the same reward).

The server is a real `swarm serve` subprocess on loopback (engine.jobs.ServerProcess); the client code
runs in a sandboxed subprocess (vibe.children.play_episodes). The check always uses `tiny` with full weights, whatever
vibe.yaml trains, so it is fast and its weights can be compared with the initial ones.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from engine.config import SwarmConfig
from engine.errors import SwarmError
from engine.jobs import ServerProcess
from vibe.config import VibeJob
from vibe.flags import Report, Severity, Stage
from vibe.layout import ClientDir
from vibe.netbridge import UnixToTcp
from vibe.play import split_roles
from vibe.private import write_private
from vibe.sandbox import SandboxLimits, limits_note, run_sandboxed
from vibe.stats import FlatCause, component_stats, flat_cause, group_spreads

__all__ = ["check_config", "dry_run", "flat_message", "weights_changed"]


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
    """Add DRY_RUN and TRAIN_STEP flags (and reward statistics) to `report`. A client with
    `second_server_roles` gets a second debug server for those roles (adversarial training)."""
    roles = report.stats.get("roles", [])
    try:
        sides = split_roles(roles, job.second_server_roles)
    except ValueError as e:
        report.add(Stage.DRY_RUN, "unknown_role", Severity.ERROR, str(e))
        return
    root_dir = cd.state_dir / "check-run"
    shutil.rmtree(root_dir, ignore_errors=True)
    servers: list[ServerProcess] = []
    try:
        with ExitStack() as stack:
            admins = []
            for i, side in enumerate(sides):
                run_dir = root_dir if i == 0 else root_dir / f"server-{i + 1}"
                run_dir.mkdir(parents=True)
                try:
                    servers.append(ServerProcess(run_dir, log_path=run_dir / "server.log"))
                    write_private(run_dir / "admin_token", servers[-1].token)
                    admin = stack.enter_context(servers[-1].client("vibe-check-admin"))
                    admin.configure(check_config(job, run_dir, max(1, len(side))))
                    admin.start(wait=True, timeout=job.check.timeout_s)
                except (RuntimeError, SwarmError, TimeoutError, httpx.HTTPError) as e:
                    report.add(Stage.DRY_RUN, "server_failed", Severity.ERROR,
                               f"debug server {i + 1} did not reach ROLLING: {e}; log: {run_dir / 'server.log'}")
                    return
                admins.append((admin, run_dir))
            # the sandbox has no network: each server's port reaches it over a unix socket (vibe.netbridge),
            # in a short folder of its own (socket paths are limited to ~100 bytes)
            bridges = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vibe-bridge-")))
            args = [str(cd.root)]
            for i, (_, run_dir) in enumerate(admins):
                sock = bridges / f"server-{i + 1}.sock"
                stack.enter_context(UnixToTcp(sock, urlsplit(servers[i].url).port))
                args += [f"--url-{i + 1}", servers[i].url, f"--token-file-{i + 1}", str(run_dir / "admin_token"),
                         f"--bridge-{i + 1}", str(sock)]
            # a hung play is named before the sandbox's own limit ends the whole process
            args += ["--episode-timeout", str(min(job.episode_timeout_s, 0.75 * job.check.timeout_s))]
            limits = SandboxLimits(job.check.timeout_s, job.check.memory_mb)
            res = run_sandboxed("vibe.children.play_episodes", args, root=cd.root, name="episodes", limits=limits,
                                readable=[bridges])
            if not _episode_flags(res, job, report, limits):
                return
            report.stages_run.append(Stage.TRAIN_STEP)
            for i, (admin, run_dir) in enumerate(admins):
                _check_step(admin, run_dir, job, report, server=i + 1, episodes=len(res.result["episodes"]))
    finally:
        for server in servers:
            server.stop()
        for ckpts in root_dir.rglob("checkpoints"):
            shutil.rmtree(ckpts, ignore_errors=True)


def _check_step(admin, run_dir: Path, job: VibeJob, report: Report, *, server: int, episodes: int) -> None:
    """Wait for the debug server's training step and check that it changed the weights."""
    from engine.training.checkpoint import latest_checkpoint

    suffix = "" if server == 1 else f"_{server}"
    try:
        st = admin.wait_for_step(1, timeout=job.check.timeout_s)
    except TimeoutError:
        report.add(Stage.TRAIN_STEP, "no_training_step", Severity.ERROR,
                   f"all {episodes} episodes ended but debug server {server} took no training step within "
                   f"{job.check.timeout_s}s; server log: {run_dir / 'server.log'}")
        return
    report.stats["train_step" + suffix] = st.get("last_metrics") or {}
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        report.add(Stage.TRAIN_STEP, "no_checkpoint", Severity.ERROR, f"debug server {server}'s step wrote no checkpoint")
        return
    delta = weights_changed(st["config"]["model"]["seed"], ckpt)
    report.stats["max_weight_change" + suffix] = delta
    if delta == 0.0:
        report.add(Stage.TRAIN_STEP, "weights_unchanged", Severity.ERROR,
                   f"debug server {server}'s training step left every weight unchanged: the episodes' recorded tokens "
                   f"carried no gradient (do the LLM calls go through the episode's client?); log: {run_dir / 'server.log'}")


WARM_START_HINT = ("RL has no signal when every reward is equal (every advantage is zero); a supervised warm start on "
                   "the gold answers first can give the model some right answers: `vibe train DIR --warm-start N`")


def flat_message(flat: tuple[FlatCause, float, float], job: VibeJob) -> str:
    """The dry run's warning when every group had equal rewards, with the cause."""
    cause, lo, hi = flat
    base = job.swarm.model.name
    if cause is FlatCause.NO_REWARD:
        if base.strip().lower() == "tiny":  # the dry run played the base model itself
            return (f"the base model (tiny) earned {lo:.3g} (reward_min) on every dry-run task: {WARM_START_HINT}")
        return (f"every dry-run episode earned {lo:.3g} (reward_min): the dry run plays `tiny` with random weights, "
                f"which gets nothing right, so this does not show whether {base} earns any reward; if `vibe train` "
                f"flags no_reward_variance, {WARM_START_HINT}")
    if cause is FlatCause.SAME_REWARD:
        return (f"every dry-run episode earned the same reward {lo:.3g}, above reward_min: a reward that pays every "
                "reply alike gives RL no signal (check what reward.py pays for)")
    return (f"each task's episodes earned equal rewards though tasks differed ({lo:.3g} to {hi:.3g}): the replies do "
            f"not vary within a task (temperature {job.temperature:g} in vibe.yaml; at 0 every sample is the same)")


def _episode_flags(res, job: VibeJob, report: Report, limits: SandboxLimits) -> bool:
    """Flags of the episodes themselves; True when every episode ended and training can be checked."""
    if res.timed_out:
        report.add(Stage.DRY_RUN, "episodes_timeout", Severity.ERROR,
                   f"the client's episodes did not finish within {job.check.timeout_s}s ({limits_note(limits)}); log tail:\n{res.log_tail}")
        return False
    if res.result is None:
        report.add(Stage.DRY_RUN, "client_crashed", Severity.ERROR,
                   f"the client process exited with code {res.returncode} before reporting ({limits_note(limits)}); log tail:\n{res.log_tail}")
        return False
    episodes = res.result["episodes"]
    hung = [e for e in episodes if e.get("timed_out")]
    if hung:
        report.add(Stage.DRY_RUN, "episode_timeout", Severity.ERROR,
                   f"{len(hung)} of {len(episodes)} plays did not end in time; first: task {hung[0]['task_id']!r}: "
                   f"{hung[0]['error']}; log tail:\n{res.log_tail or '(empty)'}")
        return False
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
    flat = flat_cause(episodes, job.reward_min)
    if flat is not None:
        report.add(Stage.DRY_RUN, "groups_all_equal", Severity.WARNING, flat_message(flat, job), cause=flat[0].value)
    accepted = sum(1 for e in episodes if e.get("accepted"))
    if accepted != len(episodes):
        report.add(Stage.DRY_RUN, "episodes_rejected", Severity.ERROR,
                   f"the server accepted {accepted} of {len(episodes)} ended episodes")
    return not report.errors
