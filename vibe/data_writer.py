"""Write a client's data/ files from its make_data.generate(seed), in the sandbox."""

from __future__ import annotations

from vibe.config import CheckConfig, VibeJob
from vibe.exceptions import LayoutError, VibeError
from vibe.layout import CONFIG_FILE, ClientDir
from vibe.sandbox import SandboxLimits, limits_note, run_sandboxed

__all__ = ["write_data"]


def write_data(cd: ClientDir, seed: int = 0) -> dict[str, int]:
    """{split: task count}; raises LayoutError with the log tail when generate fails."""
    check = VibeJob.load(cd.path(CONFIG_FILE)).check if cd.path(CONFIG_FILE).is_file() else CheckConfig()
    limits = SandboxLimits(check.timeout_s, check.memory_mb)
    try:
        res = run_sandboxed("vibe.children.generate_data", [str(cd.root), "--seed", str(seed)], root=cd.root,
                            name="data", limits=limits)
    except RuntimeError as e:  # no sandbox here: client code does not run outside one
        raise VibeError(f"cannot run make_data.py: {e}") from e
    if res.result is None:
        why = "timed out" if res.timed_out else f"exit {res.returncode}"
        raise LayoutError(f"make_data.py could not write the dataset ({why}; {limits_note(limits)}):\n{res.log_tail}")
    return res.result
