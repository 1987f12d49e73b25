"""Write a client's data/ files from its make_data.generate(seed), in the sandbox."""

from __future__ import annotations

from vibe.config import VibeJob
from vibe.exceptions import LayoutError
from vibe.layout import CONFIG_FILE, ClientDir
from vibe.sandbox import run_sandboxed

__all__ = ["write_data"]


def write_data(cd: ClientDir, seed: int = 0) -> dict[str, int]:
    """{split: task count}; raises LayoutError with the log tail when generate fails."""
    limits = VibeJob.load(cd.path(CONFIG_FILE)).check if cd.path(CONFIG_FILE).is_file() else None
    res = run_sandboxed("vibe.children.generate_data", [str(cd.root), "--seed", str(seed)], cwd=cd.root,
                        result_file=cd.state_dir / "data.json",
                        timeout_s=limits.timeout_s if limits else 120.0, memory_mb=limits.memory_mb if limits else 8192)
    if res.result is None:
        raise LayoutError(f"make_data.py could not write the dataset (exit {res.returncode}):\n{res.log_tail}")
    return res.result
