"""What every benchmark script records and reports the same way: the machine, its load, ratios over repeats.

A figure is only comparable with its rerun if the JSON says what the machine was doing: versions, thread
settings, the load before and after, and the commit. A speed ratio is reported over interleaved repeats as
its median and spread (min, max), never from one run.

Also the small helpers several scripts shared as copies: CPU seconds of a process, an OpenAI client
wrapper that counts calls and finish reasons, one timed run of an inference engine's workload, and child
runs in slots of a few threads each, several at once, as A3R runs them on a CPU host (`run_in_slots`).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Thread settings that change CPU figures; recorded so a rerun can use the same ones.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_NUM_THREADS", "SWARM_TORCH_THREADS")


def git(*args: str) -> str:
    """`git args` in the repository, stripped; '' when git is unavailable (a copied tree)."""
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def loadavg() -> list[float]:
    """1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_record(load_before: list[float] | None = None) -> dict[str, Any]:
    """Machine, versions, thread settings, load (before when given, and now) and commit, for a result JSON."""
    import torch

    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": tf_version,
        "torch_threads": torch.get_num_threads(),
        "thread_env": {k: os.environ[k] for k in THREAD_VARS if k in os.environ},
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain")),
    }


def spread(values: list[float]) -> dict[str, Any]:
    """Median, min, max and n of repeated measurements (a ratio's spread over repeats)."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "values": list(values),
    }


def fmt_spread(s: dict[str, Any], digits: int = 2, unit: str = "x") -> str:
    """'1.52x (1.48-1.60, n=3)'."""
    if not s["n"]:
        return "n/a"
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'])}{unit} ({f.format(s['min'])}-{f.format(s['max'])}, n={s['n']})"


def rotated(items: list[Any] | tuple[Any, ...], k: int) -> list[Any]:
    """`items` rotated left by k: the order of repeat k, so no item always runs first (interleaving)."""
    items = list(items)
    k %= len(items)
    return items[k:] + items[:k]


def timed_engine_run(
    engine: Any, warm_up: Callable[[Any], Awaitable[Any]], workload: Callable[[Any], Awaitable[Any]]
) -> tuple[Any, float, float]:
    """Run `warm_up(engine)` (first-call allocations and kernel selection, left out of the figures), reset the
    engine's stats, then time `workload(engine)`: (its result, wall seconds, CPU seconds of this process).
    The engine is closed either way; its stats then count the workload alone."""
    try:
        asyncio.run(warm_up(engine))
        engine.stats.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        result = asyncio.run(workload(engine))
        return result, time.perf_counter() - t0, time.process_time() - c0
    finally:
        engine.close()


def cpu_seconds(proc: Any) -> float:
    """User + system CPU seconds of a psutil.Process, all its threads."""
    t = proc.cpu_times()
    return t.user + t.system


class CountingLLM:
    """Wraps an openai client: `llm.chat.completions.create` counts calls, tool calls and finish reasons."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.chat = self
        self.completions = self
        self.calls = 0
        self.tool_calls = 0
        self.finish: list[str] = []

    def create(self, **kw: Any) -> Any:
        out = self._llm.chat.completions.create(**kw)
        self.calls += 1
        choice = out.choices[0]
        self.tool_calls += len(choice.message.tool_calls or [])
        self.finish.append(choice.finish_reason)
        return out


@contextmanager
def worktree_at(rev: str) -> Iterator[Path]:
    """A detached git worktree of `rev` (a baseline tree to put on a child's PYTHONPATH), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="bench-tree-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), rev], cwd=REPO, check=True, capture_output=True
    )
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, capture_output=True)


def write_report(out: str | Path, result: dict[str, Any], page: Callable[[dict[str, Any]], str],
                 plot: Callable[[dict[str, Any], Path], None] | None = None) -> str:
    """Write a benchmark's `out`.json (the whole result), `out`.md (`page(result)`) and, with `plot`, its
    `out`.png; returns the page, which scripts also print."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    text = page(result)
    out.with_suffix(".md").write_text(text)
    if plot is not None:
        plot(result, out.with_suffix(".png"))
    return text


# -- child runs in slots, as A3R runs them on a CPU host --------------------------------------------------
def slot_env(threads: int | None, pythonpath: Path | None = None) -> dict[str, str]:
    """This process's environment for a child run in a slot of `threads` CPU threads, set exactly as an A3R
    slot sets them (`a3r.config.SlotSpec.job_env`: OMP_NUM_THREADS / MKL_NUM_THREADS; None leaves the
    libraries' default, all cores). A3R_METRICS_FILE is dropped: a benchmark run inside an A3R run must not
    write its children's metrics into the enclosing run's file."""
    from a3r.config import SlotSpec

    env = {k: v for k, v in os.environ.items() if k != "A3R_METRICS_FILE"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(SlotSpec(name="bench", threads=threads).job_env())
    return env


def host_slots(slots: int | None = None) -> tuple[int, int | None]:
    """(slots, threads per slot) of the host A3R gives a new campaign here (`a3r.config.local_host`): by
    default one 1-thread slot per core on a CPU host, one all-cores slot on a GPU host; `slots` = N: N slots
    of cores // N threads."""
    from a3r.config import local_host

    host = local_host(slots)
    return len(host.slots), host.slots[0].threads


@dataclass(frozen=True)
class SlotJob:
    """One child process to run in a slot: its name in progress lines, its command and its log file (stdout
    and stderr together: files, not pipes, so a chatty child never blocks on a full pipe)."""

    name: str
    argv: list[str]
    log: Path


@dataclass(frozen=True)
class SlotResult:
    job: SlotJob
    returncode: int
    wall_s: float  # spawn to exit

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the child's log (where a failing child's message is)."""
        try:
            return self.job.log.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return ""


def run_in_slots(
    jobs: list[SlotJob],
    slots: int,
    threads: int | None,
    *,
    cwd: Path = REPO,
    pythonpath: Path | None = REPO,
    poll_s: float = 0.2,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> list[SlotResult]:
    """Run `jobs` as child processes, at most `slots` at once, each with `threads` CPU threads
    (`slot_env`), started in order as slots come free (A3R's FIFO dispatch, which
    `a3r.leader.costs.schedule_seconds` prices). A failing child does not stop the others; results come
    back in the jobs' order. `say` gets a line when each starts and ends."""
    env = slot_env(threads, pythonpath)
    todo = list(enumerate(jobs))
    running: dict[int, tuple[subprocess.Popen, float, Any]] = {}
    results: dict[int, SlotResult] = {}
    try:
        while todo or running:
            while todo and len(running) < max(1, slots):
                i, job = todo.pop(0)
                job.log.parent.mkdir(parents=True, exist_ok=True)
                log = job.log.open("w")
                # its own session, so that an interrupted sweep can end the child and the server it started
                proc = subprocess.Popen(
                    job.argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
                running[i] = (proc, time.perf_counter(), log)
                say(f"started {job.name} ({threads or 'all'} thread(s); {len(running)} running, {len(todo)} waiting)")
            for i, (proc, t0, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[i]
                results[i] = SlotResult(jobs[i], proc.returncode, time.perf_counter() - t0)
                left = len(todo) + len(running)
                state = "finished" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                say(f"{state} {jobs[i].name} in {results[i].wall_s:.0f} s; {left} left")
            if running:
                time.sleep(poll_s)
    finally:  # interrupted (Ctrl-C): no child outlives the parent
        for proc, _t0, log in running.values():
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.close()
    return [results[i] for i in range(len(jobs))]
