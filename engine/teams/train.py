"""A team job end to end (`swarm train` with `team:`): one swarm server per agent, one client workflow.

Per step t (B prompts of the task, G responses each):
- independent: each prompt runs the multi-role workflow G times as episode groups (role -> its agent's
  server) committed on every server or none; each server trains on its own samples when its pool fires.
- hacpo / naive / gspo / gspox2: every agent answers every prompt G times (2G for gspox2) on its own
  server, under the same task id on every server; hacpo and naive then exchange the samples
  (engine.client.exchange); each server is told to train (agree policy) once its samples are in.
- lockstep: the client waits until every server has taken step t before step t+1 starts. free (independent
  only): it never waits; a server busy training makes new episodes wait, nothing else.

Held-out greedy accuracy per agent (`eval_accuracy/<agent>`) and their mean (`eval_accuracy`) are logged
before and after into the job's metrics, with every server's step metrics labelled `agent`; an agent's
step-0 result comes from the step-0 cache when an earlier run measured the same agent model the same way. Each server
keeps its own run dir under `agents/<name>/`; a rerun with the same run dir resumes every server.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from engine.client import SwarmClient, run_episodes, run_groups
from engine.client.exchange import exchange_samples
from engine.errors import ConfigError, EvaluationIncomplete, SwarmError
from engine.jobs import ServerProcess, TrainJob, console, evaluate, role_workflow
from engine.tasks import get_task
from engine.tasks.base import split_items
from engine.teams.config import SyncMode, TeamMethod, agent_config
from engine.training.checkpoint import checkpoints_dir
from engine.training.eval_cache import evaluate_step0
from engine.training.metrics import MetricsLog


def _parallel(fn, names: list[str]) -> dict[str, Any]:
    with ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(fn, names), strict=True))


class AgentServer(Protocol):
    """What a team job needs of an agent's server: clients of it, and a way to stop it."""

    def client(self, client_id: str) -> SwarmClient: ...

    def stop(self) -> None: ...


# agent run dir -> a started (healthy, not yet configured) server
ServerFactory = Callable[[Path], AgentServer]


def _server_process(agent_dir: Path) -> AgentServer:
    return ServerProcess(agent_dir, log_path=agent_dir / "server.log", a3r_metrics=False)


def _start_servers(names: list[str], agent_dirs: dict[str, Path], factory: ServerFactory) -> dict[str, AgentServer]:
    """One server per agent, started in parallel; if any fails, the others are stopped and it is named."""
    with ThreadPoolExecutor(len(names)) as pool:
        futures = {n: pool.submit(factory, agent_dirs[n]) for n in names}
    failed = {n: f.exception() for n, f in futures.items() if f.exception() is not None}
    if failed:
        for f in futures.values():
            if f.exception() is None:
                f.result().stop()
        n, e = next(iter(failed.items()))
        raise SwarmError(f"the server of agent {n!r} did not start (its log: {agent_dirs[n] / 'server.log'}): {e}")
    return {n: f.result() for n, f in futures.items()}


def _start(client: SwarmClient, agent: str) -> int:
    try:
        return client.start(wait=True)["global_step"]
    except SwarmError as e:
        raise SwarmError(f"agent {agent!r}: {e}") from e


def _evaluate_agent(
    client: SwarmClient, job: TrainJob, held_out, name: str, label: str, step: int, log: MetricsLog, cache_notes: dict | None,
) -> float:
    """One agent's greedy held-out accuracy on its own server. Before training (`cache_notes` given) it goes
    through the step-0 cache under that agent's own server config, so the methods and seeds of a comparison
    that start from the same agent models measure each agent once (engine.training.eval_cache); what the
    cache did is noted in `cache_notes[name]`."""
    def measure(lg) -> float:
        return evaluate(client, job, held_out, f"{label} {name}", step, lg, key=f"eval_accuracy/{name}")

    if cache_notes is None:
        return measure(log)
    agent_job = job.model_copy(update={"swarm": agent_config(job.swarm, job.team, name, None)})
    note: dict = {}
    acc = evaluate_step0(measure, agent_job, {job.task: held_out}, client.health, log, note, console.print)
    if "eval0_cache" in note:
        cache_notes[name] = note["eval0_cache"]
    return acc


def _evaluate_team(
    clients: dict[str, SwarmClient], job: TrainJob, held_out, label: str, step: int, log: MetricsLog,
    cache_notes: dict | None = None,
) -> dict[str, float]:
    """Per-agent held-out accuracy (a role's reward in independent teams) and their mean. With `cache_notes`
    (the step-0 evaluation) each agent's own evaluation may come from the step-0 cache; an independent
    team's joint role evaluation is measured every time."""
    team = job.team
    if team.method is TeamMethod.INDEPENDENT:
        task = get_task(job.task)
        greedy = {"temperature": 0.0, "max_tokens": job.max_tokens}
        res = run_groups(
            clients, held_out, role_workflow(task, greedy), task_id=lambda it: "eval:" + it.id,
            concurrency=job.concurrency, is_eval=True,
        )
        scored = sum(r is not None for r in res.rewards)
        if scored < len(held_out):  # as engine.jobs.evaluate: a partial accuracy is not recorded
            raise EvaluationIncomplete(f"the {label!r} evaluation scored {scored} of {len(held_out)} held-out items, so it was not recorded")
        accs = res.mean_by_role()
        for name, acc in accs.items():
            log.write({"step": step, f"eval_accuracy/{name}": acc, f"eval_items/{name}": scored})
    else:
        accs = _parallel(lambda n: _evaluate_agent(clients[n], job, held_out, n, label, step, log, cache_notes), list(clients))
    mean = sum(accs.values()) / len(accs)
    log.write({"step": step, "eval_accuracy": mean, "eval_items": len(held_out)})
    console.print(f"[bold]{label}[/] held-out accuracy " + " ".join(f"{n} {a:.3f}" for n, a in accs.items()))
    return accs


def _run_step(clients: dict[str, SwarmClient], job: TrainJob, batch, step: int, sampling: dict) -> dict[str, float]:
    """One step's episodes on every server; returns each agent's mean training reward."""
    team, task = job.team, get_task(job.task)
    G = job.swarm.pool.group_size * team.group_multiplier
    episodes = [(k, it) for k, it in enumerate(batch) for _ in range(G)]

    def task_id(pair) -> str:  # the same on every server: a prompt's group spans the agents
        return f"s{step}:{pair[0]}:{pair[1].id}"

    if team.method is TeamMethod.INDEPENDENT:
        play_roles = role_workflow(task, sampling)
        res = run_groups(
            clients, episodes, lambda g, pair: play_roles(g, pair[1]), task_id=task_id, concurrency=job.concurrency
        )
        return res.mean_by_role()

    def play(name: str) -> float:
        res = run_episodes(
            clients[name], episodes,
            lambda ep, pair: task.run(ep.openai(max_retries=0), ep.model, pair[1], sampling),
            task_id=task_id, concurrency=max(1, job.concurrency // len(clients)),
        )
        return res.mean_reward

    rewards = _parallel(play, list(clients))
    if team.method.collab.exchanges:
        report = exchange_samples(clients)
        console.print("exchange " + " ".join(f"{n}: +{r['imported']} (dropped {r['dropped_empty']})" for n, r in report.items()))
    for c in clients.values():
        c.agree()  # the agree policy: this step's samples are all in, train now
    return rewards


def train_team(job: TrainJob, run_dir: Path, server_factory: ServerFactory = _server_process) -> dict:
    """Run a team job to `swarm.training.max_steps` on every server; returns the summary (also written).

    `server_factory` starts an agent's server (default: a `swarm serve` subprocess on loopback).
    """
    team = job.team
    if team is None:
        raise ConfigError("train_team needs a job with `team:`")
    max_steps = job.swarm.training.max_steps
    if max_steps is None:
        raise ConfigError("swarm train needs swarm.training.max_steps (how many optimizer steps to run)")
    run_dir.mkdir(parents=True, exist_ok=True)
    names = list(team.agents)
    task = get_task(job.task)
    B = job.swarm.pool.batch_size
    train_items, held_out = split_items(task, B * max_steps, job.eval_size, job.seed, job.eval_seed)
    log = MetricsLog(run_dir)
    sampling = {"temperature": job.temperature, "max_tokens": job.max_tokens}
    agent_dirs = {n: run_dir / "agents" / n for n in names}
    for d in agent_dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    servers = _start_servers(names, agent_dirs, server_factory)
    clients = {n: servers[n].client(n) for n in names}
    summary: dict = {
        "task": job.task, "team": {n: a.model.name for n, a in team.agents.items()},
        "method": team.method.value, "sync": team.sync.value, "max_steps": max_steps,
    }
    try:
        for n in names:
            clients[n].configure(agent_config(job.swarm, team, n, str(agent_dirs[n])))
        steps = _parallel(lambda n: _start(clients[n], n), names)
        step = min(steps.values())
        console.print(f"team of {len(names)} ROLLING at steps {steps} ({team.method.value}, {team.sync.value})")
        if job.eval_size and step == 0:
            notes: dict = {}
            summary["accuracy_before"] = _evaluate_team(clients, job, held_out, "before", 0, log, notes)
            if notes:
                summary["eval0_cache"] = notes
        while step < max_steps:
            rewards = _run_step(clients, job, train_items[step * B : (step + 1) * B], step, sampling)
            step += 1
            line = " ".join(f"{n} {r:.3f}" for n, r in rewards.items())
            if team.sync is SyncMode.LOCKSTEP:
                statuses = _parallel(lambda n, s=step: clients[n].wait_for_step(s, timeout=3600), names)
                for n, st in statuses.items():
                    log.write({**(st.get("last_metrics") or {}), "step": step, "agent": n})
                console.print(f"step {step}/{max_steps} reward {line}")
            else:
                console.print(f"sent step {step}/{max_steps} reward {line}")
        statuses = _parallel(lambda n: clients[n].wait_for_step(max_steps, timeout=3600), names)
        if job.eval_size:
            summary["accuracy_after"] = _evaluate_team(clients, job, held_out, "after", step, log)
        summary["final_status"] = statuses
    finally:
        for n in names:
            clients[n].close()
            servers[n].stop()
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if not job.keep_final_checkpoint:
        for d in agent_dirs.values():
            shutil.rmtree(checkpoints_dir(d), ignore_errors=True)
    return summary
