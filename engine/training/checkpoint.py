"""Checkpoint layout in a run directory, written so a crash at any instant leaves a loadable state.

    run_dir/checkpoints/step-000012/   weights (HF safetensors dir) or LoRA adapter (peft dir),
                                       optimizer.pt, state.json {"global_step": 12, "optimizer": true, ...}

The checkpoint at max_steps holds no optimizer.pt (`"optimizer": false`): training is over, so nothing
resumes from its AdamW moments, and they are two thirds of a full fine-tune's bytes.
    run_dir/checkpoints/latest         name of the newest complete checkpoint

A checkpoint is written into a temporary directory, fsynced and renamed; `latest` is replaced atomically
last, so `latest` only ever names a complete checkpoint. Older checkpoints beyond `keep` are pruned.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def latest_checkpoint(run_dir: str | Path | None) -> Path | None:
    if run_dir is None:
        return None
    pointer = checkpoints_dir(run_dir) / "latest"
    if not pointer.exists():
        return None
    path = checkpoints_dir(run_dir) / pointer.read_text().strip()
    return path if (path / "state.json").exists() else None


def checkpoint_due(
    step: int,
    *,
    every_steps: int,
    every_s: float,
    seconds_since_last: float,
    max_steps: int | None,
    final: bool,
) -> bool:
    """Whether the step that just ended is written. Step basis: every `every_steps`-th step (0: never).
    Time basis (`every_s` > 0): of those, only one ending at least `every_s` seconds after the last write.
    The step reaching `max_steps` is written iff `final` (and checkpoints are on at all)."""
    if every_steps == 0:
        return False
    if max_steps is not None and step >= max_steps:
        return final
    return step % every_steps == 0 and seconds_since_last >= every_s


def read_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "state.json").read_text())


def _fsync_tree(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def commit_checkpoint(run_dir: str | Path, step: int, write: Any, state: dict[str, Any], keep: int = 2) -> Path:
    """Create `step-<n>` by calling `write(tmp_dir)`, then publish it atomically and prune old ones."""
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    tmp = root / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    (tmp / "state.json").write_text(json.dumps({"global_step": step, **state}))
    _fsync_tree(tmp)
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer_tmp = root / ".latest.tmp"
    pointer_tmp.write_text(name)
    with open(pointer_tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(pointer_tmp, root / "latest")
    done = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final
