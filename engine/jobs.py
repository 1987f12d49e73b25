"""`swarm train`: one command that trains a built-in task end to end.

It starts a real swarm server as a subprocess on a free loopback port, configures it from the job config,
measures held-out greedy accuracy, runs task episodes (B tasks x N repeats per step) until the server
has taken `max_steps` training steps, measures accuracy again, and writes `summary.json`. A rerun with
the same run dir resumes: the server reloads its checkpoint and the client skips the data already used.
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
from pathlib import Path

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from engine.client import SwarmClient, run_episodes
from engine.config import SwarmConfig
from engine.errors import ConfigError, ServerLost
from engine.tasks import get_task
from engine.tasks.base import HELD_OUT_SEED, split_items
from engine.training.checkpoint import checkpoints_dir
from engine.training.metrics import MetricsLog

console = Console(stderr=True)


class TrainJob(BaseModel):
    """A training run of a built-in task: the server config plus what the client side does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str = Field("arithmetic", description="Built-in task: arithmetic, countdown, calculator.")
    swarm: SwarmConfig = SwarmConfig()
    seed: int = Field(
        0, description="Seeds the training data order (and the model, through swarm.model.seed)."
    )
    eval_size: int = Field(
        64, ge=0, description="Held-out items for greedy accuracy before and after (0: skip)."
    )
    eval_every: int = Field(0, ge=0, description="Also evaluate every k steps (0: only before and after).")
    eval_seed: int = Field(
        HELD_OUT_SEED,
        description="Seed of the held-out set: the same problems for every run and seed, none of them ever trained on.",
    )
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of training episodes.")
    max_tokens: int = Field(32, ge=1, description="Reply budget per LLM call.")
    concurrency: int = Field(16, ge=1, description="Episodes in flight at once (the server batches them).")
    max_server_restarts: int = Field(
        3,
        ge=0,
        description="How often the job restarts a server that died (killed, out of memory) before giving up; "
        "each restart resumes from the last checkpoint, retraining the steps after it.",
    )
    keep_final_checkpoint: bool = Field(
        True,
        description="Keep the checkpoints once the job reaches max_steps. False deletes them when the job "
        "succeeds (metrics, summary and logs stay): a sweep of many runs would otherwise keep 1.6 GB per "
        "SmolLM2 run (weights + AdamW state, last two checkpoints).",
    )

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainJob:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read job config {path}: {e}") from e
        return cls.model_validate(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        health_timeout_s: float = 60.0,
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"swarm server exited with code {self.proc.returncode} before becoming healthy{see_log}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"swarm server did not answer /health within {timeout:g} s{see_log}")

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


def evaluate(client: SwarmClient, job: TrainJob, items, label: str, step: int, log: MetricsLog) -> float:
    """Greedy accuracy on the held-out items, printed and logged as `eval_accuracy` at `step`."""
    task = get_task(job.task)
    greedy = {"temperature": 0.0, "max_tokens": job.max_tokens}
    res = run_episodes(
        client,
        items,
        lambda ep, it: task.run(ep.openai(max_retries=0), ep.model, it, greedy),
        task_id=lambda it: "eval:" + it.id,
        concurrency=job.concurrency,
        is_eval=True,
        show_progress=True,
    )
    acc = res.mean_reward
    console.print(f"[bold]{label}[/] greedy accuracy on {len(items)} held-out items: {acc:.3f}")
    log.write({"step": step, "eval_accuracy": acc})
    return acc


def train(job: TrainJob, run_dir: Path) -> dict:
    """Run the job to `swarm.training.max_steps` and return the summary (also written to run_dir).

    The job owns its server: one that dies is restarted, up to `job.max_server_restarts` times, and
    resumes from its last checkpoint (the server reloads it, the job continues at the server's step, the
    metrics of retrained steps are superseded); then `ServerLost` says what happened and how to resume.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    max_steps = job.swarm.training.max_steps
    if max_steps is None:
        raise ConfigError("swarm train needs swarm.training.max_steps (how many optimizer steps to run)")
    cfg = job.swarm.model_copy(update={"run_dir": str(run_dir)})
    summary: dict = {"task": job.task, "model": cfg.model.name, "max_steps": max_steps, "evals": []}
    log_path = run_dir / "server.log"
    restarts = 0
    while True:
        server = ServerProcess(run_dir, log_path=log_path)
        try:
            _drive(server, job, cfg, run_dir, summary)
            break
        except httpx.TransportError as e:
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
    task = get_task(job.task)
    B, N = cfg.pool.batch_size, cfg.pool.group_size
    train_items, held_out = split_items(task, B * max_steps, job.eval_size, job.seed, job.eval_seed)
    # Held-out accuracy goes where the server's per-step metrics go (run dir, and A3R's metrics file).
    log = MetricsLog(run_dir)
    sampling = {"temperature": job.temperature, "max_tokens": job.max_tokens}
    with server.client() as client:
        client.configure(cfg)
        st = client.start(wait=True)
        step = st["global_step"]
        console.print(f"server ROLLING at step {step} ({cfg.model.name}, {cfg.algorithm.policy_loss})")
        # After a restart, evaluations past the resumed step belong to steps that are trained again.
        summary["evals"] = [e for e in summary["evals"] if e["step"] <= step]
        if job.eval_size and step == 0 and "accuracy_before" not in summary:  # not again after a restart
            summary["accuracy_before"] = evaluate(client, job, held_out, "before", 0, log)
        while step < max_steps:
            batch = train_items[step * B : (step + 1) * B]
            # A task is (step, position): a problem drawn twice in one step is two GRPO groups of N,
            # not one group of 2N that the pool would never see complete.
            episodes = [(k, it) for k, it in enumerate(batch) for _ in range(N)]
            res = run_episodes(
                client,
                episodes,
                lambda ep, pair: task.run(ep.openai(max_retries=0), ep.model, pair[1], sampling),
                task_id=lambda pair, step=step: f"s{step}:{pair[0]}:{pair[1].id}",
                concurrency=job.concurrency,
                show_progress=True,
            )
            st = client.wait_for_step(step + 1, timeout=3600)
            step = st["global_step"]
            m = st.get("last_metrics") or {}
            console.print(
                f"step {step}/{max_steps} reward {res.mean_reward:.3f} loss {m.get('pg_loss', float('nan')):.4f} "
                f"step time {m.get('step_time_s', float('nan')):.1f}s"
            )
            if job.eval_every and step % job.eval_every == 0 and step < max_steps:
                acc = evaluate(client, job, held_out, f"step {step}", step, log)
                summary["evals"].append({"step": step, "accuracy": acc})
        if job.eval_size:
            summary["accuracy_after"] = evaluate(client, job, held_out, "after", step, log)
        summary["final_status"] = client.status()
