"""`swarm train`: one command that trains a built-in task end to end.

It starts a real swarm server as a subprocess on a free loopback port, configures it from the job config,
measures held-out greedy accuracy, runs task episodes (B tasks x N repeats per step) until the server
has taken `max_steps` training steps, measures accuracy again, and writes `summary.json`. A rerun with
the same run dir resumes: the server reloads its checkpoint and the client skips the data already used.

Two variants share the job config:
- cocktail (`mix: {task: share}`): one server, several tasks mixed by share. Each task runs as its own
  client, and the server's per-client throttle (`pool.client_share`, mapped here from the shares) holds
  every batch to the mix; per-task rewards (`reward/<task>`) and held-out accuracies
  (`eval_accuracy/<task>`) land in the metrics.
- team (`team:`): several models, one server each (engine.teams).

A task whose roles are their own episodes even on one model (`episodes_per_role`, e.g. werewolf: a
zero-sum game in one episode would always score the same) plays every item as an episode group on the
one server, one task id per role, so each role forms its own GRPO groups: a step's B tasks are then
B / len(roles) items, and held-out accuracy is logged per role (`eval_accuracy/<role>`) beside the mean.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from rich.console import Console

from engine.client import RunnerResult, SwarmClient, run_episodes, run_groups
from engine.config import SwarmConfig
from engine.errors import ConfigError, EvaluationIncomplete, ServerExited, ServerLost
from engine.fsutil import log_tail
from engine.tasks import get_task
from engine.tasks.base import HELD_OUT_SEED, split_items
from engine.teams.config import TeamConfig, TeamMethod
from engine.training.checkpoint import checkpoints_dir
from engine.training.eval_cache import evaluate_step0
from engine.training.metrics import MetricsLog, read_run_metrics

console = Console(stderr=True)


class TrainJob(BaseModel):
    """A training run of a built-in task: the server config plus what the client side does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str = Field("arithmetic", description="Built-in task: arithmetic, countdown, calculator, solve_check, judged_summary (graded by an LLM judge), werewolf.")
    swarm: SwarmConfig = SwarmConfig()
    seed: int = Field(
        0,
        description="Seeds which training problems are drawn and in what order. Each episode's sampling stream "
        "is keyed by swarm.model.seed and its task id (step, position, problem), so runs with different seeds "
        "sample differently and runs with the same seed share problems and streams (arms paired on seeds).",
    )
    eval_size: int = Field(
        64, ge=0, description="Held-out items for greedy accuracy before and after (0: skip)."
    )
    eval_every: int = Field(0, ge=0, description="Also evaluate every k steps (0: only before and after).")
    eval0_cache: bool = Field(
        True,
        description="Reuse the untrained model's held-out result from the step-0 cache when an earlier run "
        "measured it under the same model, items, settings, code and thread count (engine.training.eval_cache); "
        "false: always measure it.",
    )
    eval_seed: int = Field(
        HELD_OUT_SEED,
        description="Seed of the held-out set: the same problems for every run and seed, none of them ever trained on.",
    )
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of training episodes.")
    max_tokens: int = Field(32, ge=1, description="Reply budget per LLM call.")
    concurrency: int = Field(16, ge=1, description="Episodes in flight at once (the server batches them).")
    mix: dict[str, float] = Field(
        default_factory=dict,
        description="Cocktail training: task -> share of every batch (shares sum to 1), e.g. "
        "{arithmetic: 0.5, countdown: 0.5}. Replaces `task`; shares are rounded to whole tasks per batch.",
    )
    team: TeamConfig | None = Field(
        None, description="Several models, one server each: non-shared multi-model or HACPO-style groups."
    )
    max_server_restarts: int = Field(
        3,
        ge=0,
        description="How often the job restarts a server that died (killed, out of memory) before giving up; "
        "each restart resumes from the last checkpoint, retraining the steps after it. Single-server jobs "
        "(a task or a mix); a team stops with the agent's log instead.",
    )
    keep_final_checkpoint: bool = Field(
        True,
        description="Keep the checkpoints once the job reaches max_steps. False deletes them when the job "
        "succeeds (metrics, summary and logs stay): a sweep of many runs would otherwise keep 1.6 GB per "
        "SmolLM2 run (weights + AdamW state, last two checkpoints).",
    )

    @model_validator(mode="after")
    def _check(self) -> TrainJob:
        for name in self.mix or [self.task]:
            get_task(name)  # raises with the valid names
        if self.mix:
            if self.team is not None:
                raise ConfigError("a job is either a cocktail (mix) or a team; split it into two jobs")
            if any(v <= 0 for v in self.mix.values()) or abs(sum(self.mix.values()) - 1.0) > 1e-6:
                raise ConfigError(f"mix shares must be positive and sum to 1, got {self.mix}")
            if len(self.mix) > self.swarm.pool.batch_size:
                raise ConfigError(
                    f"{len(self.mix)} tasks cannot share a batch of {self.swarm.pool.batch_size} tasks; "
                    "raise swarm.pool.batch_size to at least the number of tasks"
                )
            if self.swarm.pool.client_share:
                raise ConfigError("mix sets swarm.pool.client_share from the shares; remove client_share")
        per_role = [t for t in self.mix or [self.task] if episodes_per_role(get_task(t))]
        if per_role and self.mix:
            raise ConfigError(f"task {per_role[0]!r} plays each role as its own episodes and cannot join a mix")
        if per_role and self.team is None and self.swarm.pool.batch_size % len(get_task(self.task).roles):
            roles = get_task(self.task).roles
            raise ConfigError(
                f"task {self.task!r} makes {len(roles)} GRPO groups per item (roles {list(roles)}), so "
                f"swarm.pool.batch_size must be a multiple of {len(roles)}, got {self.swarm.pool.batch_size}"
            )
        if per_role and self.team is not None and self.team.method is not TeamMethod.INDEPENDENT:
            raise ConfigError(
                f"task {self.task!r} is a multi-role game with no single-agent episode; "
                f"team.method must be independent, got {self.team.method.value!r}"
            )
        if self.team is not None:
            roles = getattr(get_task(self.task), "roles", None)
            if self.team.method is TeamMethod.INDEPENDENT and set(roles or ()) != set(self.team.agents):
                raise ConfigError(
                    f"an independent team plays a multi-role task with one agent per role; task {self.task!r} "
                    f"has roles {list(roles or [])} but the agents are {list(self.team.agents)}"
                )
        return self

    def tasks_per_batch(self) -> dict[str, int]:
        """Tasks of each mixed task in one batch of B (largest remainder, every task at least one)."""
        if not self.mix:
            return {self.task: self.swarm.pool.batch_size}
        B = self.swarm.pool.batch_size
        counts = {t: int(share * B) for t, share in self.mix.items()}
        by_remainder = sorted(self.mix, key=lambda t: self.mix[t] * B - counts[t], reverse=True)
        for t in by_remainder[: B - sum(counts.values())]:
            counts[t] += 1
        for t in [t for t, n in counts.items() if n == 0]:  # every task in every batch (len(mix) <= B)
            counts[max(counts, key=counts.get)] -= 1
            counts[t] = 1
        return counts

    def server_config(self, run_dir: Path) -> SwarmConfig:
        """The one mapping of a single-server job to its server: run dir, and the mix as client shares."""
        update: dict = {"run_dir": str(run_dir)}
        if not self.keep_final_checkpoint:  # deleted when the job succeeds: not worth writing
            update["training"] = self.swarm.training.model_copy(update={"final_checkpoint": False})
        if self.mix:
            B = self.swarm.pool.batch_size
            shares = {t: n / B for t, n in self.tasks_per_batch().items()}
            update["pool"] = self.swarm.pool.model_copy(update={"client_share": shares})
        return self.swarm.model_copy(update=update)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainJob:
        return cls.model_validate(read_job_yaml(path))


def episodes_per_role(task) -> bool:
    """Whether `task` plays each role as its own episode even when one model plays them all."""
    return getattr(task, "episodes_per_role", False)


def items_per_batch(task, tasks_in_batch: int) -> int:
    """Items behind a batch's tasks (GRPO groups): one group per role and item for per-role tasks."""
    return tasks_in_batch // len(task.roles) if episodes_per_role(task) else tasks_in_batch


def role_workflow(task, sampling: dict):
    """A multi-role task's game on an episode group: each role talks to its own episode."""
    return lambda g, item: task.run_roles({r: (g[r].openai(max_retries=0), g[r].model) for r in task.roles}, item, sampling)


def run_items(
    client: SwarmClient, task, items: list, item_of, sampling: dict, task_id, index=None, **kw,
) -> RunnerResult:
    """One episode per item on `client`, or for a per-role task one episode group per item on it (task
    id `<id>:<role>` per role). `item_of(x)` is the task item behind entry x of `items`."""
    if episodes_per_role(task):
        play = role_workflow(task, sampling)
        return run_groups(
            {r: client for r in task.roles}, items, lambda g, x: play(g, item_of(x)),
            task_id=lambda x: {r: f"{task_id(x)}:{r}" for r in task.roles}, index=index, **kw,
        )
    return run_episodes(
        client, items, lambda ep, x: task.run(ep.openai(max_retries=0), ep.model, item_of(x), sampling),
        task_id=task_id, index=index, **kw,
    )


def read_job_yaml(path: str | Path) -> dict:
    """A job config file's data, not yet validated (the command line may still override fields)."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read job config {path}: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"job config {path} must be a mapping of TrainJob fields, got {type(data).__name__}")
    return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long a starting server may take to answer /health. A server that exits is noticed at once; this
# only bounds one that hangs before answering. On a loaded 2-core machine (load 20+) importing torch alone
# took over 60 s, the old limit, and `swarm train` died with a traceback while its server was coming up.
SERVER_BOOT_TIMEOUT_S = 600.0


class ServerProcess:
    """A `swarm serve` subprocess on loopback with a fresh admin token.

    The constructor returns once the server answers /health; if it does not within `health_timeout_s`
    (or exits first), the process is stopped before the error is raised, so a failed start leaves no
    server behind.
    """

    def __init__(
        self,
        run_dir: Path | None,
        log_path: Path | None = None,
        port: int | None = None,
        health_timeout_s: float = SERVER_BOOT_TIMEOUT_S,
        a3r_metrics: bool = True,
    ) -> None:
        self.port = port or free_port()
        self.token = "sk-admin-" + secrets.token_urlsafe(24)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(self.port)]
        if run_dir is not None:
            cmd += ["--run-dir", str(run_dir)]
        # The server exits when this process does, even on SIGKILL (see engine.server.serve.exit_with_parent).
        env = {**os.environ, "SWARM_ADMIN_TOKEN": self.token, "SWARM_EXIT_WITH_PARENT": str(os.getpid())}
        if not a3r_metrics:  # several servers of one job: the job writes A3R's metrics, labelled per agent
            env.pop("A3R_METRICS_FILE", None)
        if log_path is None:
            self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        else:
            with open(log_path, "ab") as out:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            self._wait_healthy(health_timeout_s)
        except BaseException:  # also Ctrl-C while waiting: never leave the server running
            self.stop()
            raise

    def _wait_healthy(self, timeout: float) -> None:
        import httpx

        see_log = f"; see {self.log_path}" if self.log_path else ""

        def tail() -> str:  # why it failed (a refused config, a missing model) without opening the file
            return f"; its log ends:\n{log_tail(self.log_path, 2000)}" if self.log_path else ""

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerExited(
                    f"swarm server exited with code {self.proc.returncode} before becoming healthy{see_log}{tail()}",
                    self.proc.returncode,
                )
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"swarm server did not answer /health within {timeout:g} s{see_log}{tail()}")

    def client(self, client_id: str = "trainer") -> SwarmClient:
        return SwarmClient(self.url, admin_token=self.token, client_id=client_id)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and reap it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def eval_concurrency(concurrency: int, server_rows: int | None, n_items: int, episodes_per_item: int = 1) -> int:
    """Items in flight at once in an evaluation: enough to fill the server's decode batch.

    Held-out items are independent and every one is scored, so the server may batch all it can hold:
    `server_rows` (its /health `max_batch_rows`) rows, one per episode of an item, where the job's
    `concurrency` (sized for training episodes) left most of a 1-thread server's batch empty (A3R's 32
    against the torch engine's 64). Never fewer than `concurrency`, never more than there are items;
    a server that reports no bound gets `concurrency`.
    """
    fill = (server_rows or 0) // max(episodes_per_item, 1)
    return max(1, min(n_items, max(concurrency, fill)))


def evaluate(
    client: SwarmClient, job: TrainJob, items, label: str, step: int, log: MetricsLog,
    task_name: str | None = None, key: str = "eval_accuracy",
) -> float:
    """Greedy accuracy on the held-out items, printed and logged as `key` at `step`, with the number of
    items scored beside it (`eval_items`, or `eval_items/<task>` in a mix).

    Raises `EvaluationIncomplete`, logging nothing, when an item could not be scored (its episode failed
    every retry, e.g. the server died under it): an accuracy over the items that happened to finish is
    not the held-out accuracy, and a row of it would pass for one.
    """
    task = get_task(task_name or job.task)
    greedy = {"temperature": 0.0, "max_tokens": job.max_tokens}
    rows = client.health().get("inference", {}).get("max_batch_rows")
    per_item = len(task.roles) if episodes_per_role(task) else 1  # a per-role task plays every role at once
    res = run_items(
        client, task, items, lambda it: it, greedy, lambda it: "eval:" + it.id,
        concurrency=eval_concurrency(job.concurrency, rows, len(items), per_item), is_eval=True, show_progress=True,
    )
    scored = sum(r is not None for r in res.rewards)
    if scored < len(items):
        raise EvaluationIncomplete(
            f"the {label!r} evaluation ({key}) scored {scored} of {len(items)} held-out items, so it was not "
            f"recorded; first failure: {res.failures[0] if res.failures else 'unknown'}"
        )
    acc = res.mean_reward
    console.print(f"[bold]{label}[/] greedy accuracy ({key}) on {len(items)} held-out items: {acc:.3f}")
    for role, role_acc in res.mean_by_role().items():  # per-role tasks: each role's win rate
        log.write({"step": step, f"{key}/{role}": role_acc})
    log.write_eval_scores(step, key, [it.id for it in items], [float(r) for r in res.rewards])
    log.write({"step": step, key: acc, eval_items_key(key): len(items)})
    return acc


def eval_items_key(accuracy_key: str) -> str:
    """The metric that counts the items behind an accuracy: eval_accuracy/x -> eval_items/x."""
    return accuracy_key.replace("eval_accuracy", "eval_items", 1)


def _evaluate_mix(clients: dict[str, SwarmClient], job: TrainJob, held_out: dict, label: str, step: int, log: MetricsLog) -> float:
    """Held-out accuracy of every task (`eval_accuracy/<task>` in a mix) and their share-weighted mean."""
    if not job.mix:
        return evaluate(clients[job.task], job, held_out[job.task], label, step, log)
    accs = {t: evaluate(clients[t], job, held_out[t], label, step, log, t, f"eval_accuracy/{t}") for t in job.mix}
    acc = sum(job.mix[t] * a for t, a in accs.items())
    log.write({"step": step, "eval_accuracy": acc, "eval_items": sum(len(held_out[t]) for t in job.mix)})
    return acc


def _evaluate_on(server: ServerProcess, *args) -> float:
    """`_evaluate_mix`, where an evaluation cut short by the server's death is a lost server: `train`
    restarts it and the evaluation is measured again, in full, after the resume."""
    try:
        return _evaluate_mix(*args)
    except EvaluationIncomplete as e:
        code = _exit_code(server)
        if code is None:
            raise
        raise httpx.TransportError(f"the server exited with code {code} during an evaluation: {e}") from e


def _finished_summary(run_dir: Path, max_steps: int) -> dict | None:
    """The summary of a run dir that already trained to `max_steps` and evaluated, else None."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("max_steps") == max_steps else None


def recorded_accuracy(run_dir: Path, step: int) -> float | None:
    """The held-out accuracy a run dir's metrics already hold for `step`, if any. Only a complete
    evaluation is ever logged, and a restart drops the rows of steps it trains again, so a row found
    here measured the weights the server holds at `step` now."""
    rows = [r["eval_accuracy"] for r in read_run_metrics(run_dir) if r.get("step") == step and "eval_accuracy" in r]
    return rows[-1] if rows else None


def _measure_before(
    server: ServerProcess, clients, job: TrainJob, held_out: dict, st: dict, run_dir: Path, summary: dict,
    log: MetricsLog,
) -> None:
    """Held-out accuracy of the untrained model, once per run dir.

    A resumed job reuses the value an earlier process of it recorded; a new one reuses the step-0 cache's
    (`engine.training.eval_cache`) when an earlier run measured the same thing. It measures only a server at step 0
    that is ROLLING: one that replayed a complete batch from its journal is already training it (and
    inference waits for the new weights), so what it would measure is no longer the untrained model.
    """
    recorded = recorded_accuracy(run_dir, 0)
    if recorded is not None:
        summary["accuracy_before"] = recorded
    elif st["global_step"] == 0 and st["state"] == "ROLLING":
        summary["accuracy_before"] = evaluate_step0(
            lambda lg: _evaluate_on(server, clients, job, held_out, "before", 0, lg),
            job, held_out, next(iter(clients.values())).health, log, summary, console.print,
        )
    else:
        console.print(
            "[yellow]no accuracy before training: the run was interrupted before it was measured, and the "
            "server has trained since; summary.json leaves accuracy_before out"
        )


def train_single(job: TrainJob, run_dir: Path) -> dict:
    """Run a single-server job to `swarm.training.max_steps` and return the summary (also written to run_dir).

    The job owns its server: one that dies is restarted, up to `job.max_server_restarts` times, and resumes
    from its last checkpoint (the server reloads it, the job continues at the server's step, the metrics of
    retrained steps are superseded); then `ServerLost` says what happened and how to resume. A team's job
    goes to `engine.teams.train` instead (`engine.launch.train` chooses).
    """
    if job.team is not None:
        raise ConfigError("a team's job trains through engine.launch.train (engine.teams), not on one server")
    run_dir.mkdir(parents=True, exist_ok=True)
    max_steps = job.swarm.training.max_steps
    if max_steps is None:
        raise ConfigError("swarm train needs swarm.training.max_steps (how many optimizer steps to run)")
    done = _finished_summary(run_dir, max_steps)
    if done is not None:
        # Running it again would evaluate again and append a second final row to its metrics.
        console.print(f"[yellow]{run_dir} already finished its {max_steps} steps; its summary: {run_dir / 'summary.json'}")
        return done
    cfg = job.server_config(run_dir)
    per_batch = job.tasks_per_batch()
    name = "+".join(per_batch) if job.mix else job.task
    summary: dict = {"task": name, "model": cfg.model.name, "max_steps": max_steps, "evals": []}
    if job.mix:
        summary["mix"] = per_batch
    log_path = run_dir / "server.log"
    restarts = 0
    while True:
        server = None
        try:
            server = ServerProcess(run_dir, log_path=log_path)
            _drive(server, job, cfg, run_dir, summary)
            break
        except (httpx.TransportError, ServerExited) as e:
            if isinstance(e, ServerExited):
                # Killed while starting (a signal: negative code) is a lost server like any other; one
                # that exits by itself before it is healthy (a bad config, a missing model) fails again.
                if e.code >= 0:
                    raise
                code = e.code
            else:
                code = _exit_code(server)
            if code is None:
                raise  # the server is alive but unreachable: not something a restart fixes
            restarts += 1
            if restarts > job.max_server_restarts:
                raise ServerLost(
                    f"the training server exited with code {code} ({type(e).__name__}: {e}) and was already "
                    f"restarted {job.max_server_restarts} time(s); its log: {log_path}. Rerun the same command "
                    f"with --run-dir {run_dir} to resume from the last checkpoint."
                ) from e
            console.print(
                f"[yellow]the training server exited with code {code}; restarting it from the last checkpoint "
                f"(restart {restarts} of at most {job.max_server_restarts}; its log: {log_path})"
            )
        finally:
            if server is not None:
                server.stop()
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if not job.keep_final_checkpoint:
        shutil.rmtree(checkpoints_dir(run_dir), ignore_errors=True)
    return summary


def _exit_code(server: ServerProcess, grace_s: float = 5.0) -> int | None:
    """The server's exit code, waiting briefly for a dying one; None if it is still running."""
    try:
        return server.proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        return None


def _drive(server: ServerProcess, job: TrainJob, cfg: SwarmConfig, run_dir: Path, summary: dict) -> None:
    """Train from the server's current step to max_steps, evaluating as the job asks (fills `summary`)."""
    max_steps = cfg.training.max_steps
    per_batch = job.tasks_per_batch()
    N = cfg.pool.group_size
    data = {
        t: split_items(get_task(t), items_per_batch(get_task(t), n) * max_steps, job.eval_size, job.seed, job.eval_seed)
        for t, n in per_batch.items()
    }
    held_out = {t: d[1] for t, d in data.items()}
    # Held-out accuracy goes where the server's per-step metrics go (run dir, and A3R's metrics file).
    log = MetricsLog(run_dir)
    sampling = {"temperature": job.temperature, "max_tokens": job.max_tokens}
    # In a mix each task is its own client: the server's per-client throttle keeps every batch to the mix.
    clients = {t: server.client(_client_id(job, t)) for t in per_batch}
    try:
        client = next(iter(clients.values()))
        client.configure(cfg)
        st = client.start(wait=True)
        step = st["global_step"]
        # Episodes the server already holds (replayed from its journal after a crash) train as they are:
        # running them again would train a step's prompts twice and the next step's never.
        held = held_episodes(st["pool"].get("held", {}))
        # the server's own thread count, as its environment (an A3R slot's OMP_NUM_THREADS) set it
        summary["torch_threads"] = httpx.get(server.url + "/health", timeout=10).json().get("torch_threads")
        console.print(
            f"server ROLLING at step {step} ({cfg.model.name}, {cfg.algorithm.policy_loss}, "
            f"{summary['torch_threads']} torch thread(s))"
            + (f"; it holds {len(held)} episodes from before a restart, which are not run again" if held else "")
        )
        # After a restart, evaluations past the resumed step belong to steps that are trained again.
        summary["evals"] = [e for e in summary["evals"] if e["step"] <= step]
        if job.eval_size and "accuracy_before" not in summary:  # not again after a restart
            _measure_before(server, clients, job, held_out, st, run_dir, summary, log)
        while step < max_steps:
            rewards = _run_mixed_step(clients, job, data, per_batch, step, N, sampling, held)
            st = client.wait_for_step(step + 1, timeout=3600)
            step = st["global_step"]
            m = st.get("last_metrics") or {}
            rewards = step_rewards(job, m, rewards)
            mixed = "".join(f" {t} {r:.3f}" for t, r in rewards.items()) if job.mix else f" {rewards[job.task]:.3f}"
            console.print(
                f"step {step}/{max_steps} reward{mixed} loss {m.get('pg_loss', float('nan')):.4f} "
                f"step time {m.get('step_time_s', float('nan')):.1f}s"
            )
            if job.eval_every and step % job.eval_every == 0 and step < max_steps:
                acc = _evaluate_on(server, clients, job, held_out, f"step {step}", step, log)
                summary["evals"].append({"step": step, "accuracy": acc})
        if job.eval_size:
            # A job killed after its final evaluation was recorded but before summary.json was written
            # has nothing left to measure: evaluating again would log a second final row.
            after = recorded_accuracy(run_dir, step)
            if after is None:
                after = _evaluate_on(server, clients, job, held_out, "after", step, log)
            else:
                console.print(f"after: the accuracy at step {step} was recorded before an interruption: {after:.3f}")
            summary["accuracy_after"] = after
        summary["final_status"] = client.status()
    finally:
        for c in clients.values():
            c.close()


def _client_id(job: TrainJob, task: str) -> str:
    """The client a job runs `task`'s episodes as: in a mix each task is its own client."""
    return task if job.mix else "trainer"


def step_rewards(job: TrainJob, metrics: dict, ran: dict[str, float]) -> dict[str, float]:
    """Each task's reward in a trained step's line: the server's mean over the step's batch
    (`reward/<client>` in its step metrics), else `ran`, the job's own mean over the episodes it ran.
    The job's own is not the step's after a restart: NaN for a step whose every episode the server
    replayed from its journal (the job ran none of them), partial for one it replayed some of."""
    return {t: float(metrics.get(f"reward/{_client_id(job, t)}", r)) for t, r in ran.items()}


def held_episodes(held: dict[str, list[int | None]]) -> set[tuple[str, int]]:
    """(task id, episode index) of the episodes a server reports it holds (pool info's `held`)."""
    return {(task_id, i) for task_id, indices in held.items() for i in indices if i is not None}


def step_episodes(task: str, items: list, step: int, N: int, mixed: bool) -> list[tuple[str, int, object]]:
    """Every episode of one task's share of a step: (task id, index in its group, item), N per item.

    A task is (step, position): a problem drawn twice in one step is two GRPO groups of N, not one group
    of 2N that the pool would never see complete. The step in the id is what lets a resumed job tell the
    episodes the server already holds from the ones still to run.
    """
    prefix = f"{task}:" if mixed else ""
    return [(f"{prefix}s{step}:{k}:{it.id}", r, it) for k, it in enumerate(items) for r in range(N)]


def _run_mixed_step(
    clients, job: TrainJob, data, per_batch: dict[str, int], step: int, N: int, sampling,
    held: set[tuple[str, int]] = frozenset(),
) -> dict[str, float]:
    """One step's episodes: each task's share of the batch (B tasks x N repeats), the tasks concurrently.

    Episodes in `held` (already in the server's pool or in training) are not run again (a per-role task's
    game when its first role's episode is held: a group lands on its one server whole or not at all); a
    task whose every episode is held reports its mean reward as NaN (the server's step metrics have it).
    """

    def run_task(t: str) -> float:
        task = get_task(t)
        n = items_per_batch(task, per_batch[t])
        batch = data[t][0][step * n : (step + 1) * n]
        first = f":{task.roles[0]}" if episodes_per_role(task) else ""
        episodes = [e for e in step_episodes(t, batch, step, N, bool(job.mix)) if (e[0] + first, e[1]) not in held]
        res = run_items(
            clients[t], task, episodes, lambda e: e[2], sampling, lambda e: e[0], index=lambda i: episodes[i][1],
            concurrency=max(1, job.concurrency // len(per_batch)), show_progress=True,
        )
        return res.mean_reward

    with ThreadPoolExecutor(len(per_batch)) as pool:
        return dict(zip(per_batch, pool.map(run_task, per_batch), strict=True))
