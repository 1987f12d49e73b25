"""`vibe data`: write a client's data/ files from its make_data.generate(seed), in the sandbox; and the
check that they are still what make_data.py generates (not edited by hand, not stale)."""

from __future__ import annotations

import json

from vibe.config import CheckConfig, VibeJob
from vibe.exceptions import LayoutError, VibeError
from vibe.layout import CONFIG_FILE, DATA_FILES, ClientDir
from vibe.sandbox import SandboxLimits, limits_note, run_sandboxed

__all__ = ["stale_data", "write_data"]

SEED_FILE = "data.json"  # in .vibe/: the seed `vibe data` last used


def _limits(cd: ClientDir) -> SandboxLimits:
    check = VibeJob.load(cd.path(CONFIG_FILE)).check if cd.path(CONFIG_FILE).is_file() else CheckConfig()
    return SandboxLimits(check.timeout_s, check.memory_mb)


def _generate(cd: ClientDir, seed: int, name: str, out: list[str]) -> dict:
    limits = _limits(cd)
    try:
        res = run_sandboxed("vibe.children.generate_data", [str(cd.root), "--seed", str(seed), *out], root=cd.root,
                            name=name, limits=limits)
    except RuntimeError as e:  # no sandbox here: client code does not run outside one
        raise VibeError(f"cannot run make_data.py: {e}") from e
    if res.result is None:
        why = "timed out" if res.timed_out else f"exit {res.returncode}"
        raise LayoutError(f"make_data.py could not write the dataset ({why}; {limits_note(limits)}):\n{res.log_tail}")
    return res.result


def write_data(cd: ClientDir, seed: int = 0) -> dict[str, int]:
    """{split: task count}; raises LayoutError with the log tail when generate fails."""
    counts = _generate(cd, seed, "data", [])
    (cd.state_dir / SEED_FILE).write_text(json.dumps({"seed": seed}))
    return counts


def stale_data(cd: ClientDir) -> str | None:
    """None when data/ is exactly what make_data.py generates with the seed `vibe data` last used (0 when
    it never ran); else which file differs and the command that fixes it."""
    seed_file = cd.state_dir / SEED_FILE
    seed = json.loads(seed_file.read_text()).get("seed", 0) if seed_file.is_file() else 0
    scratch = cd.state_dir / "sandbox" / "data-compare"
    _generate(cd, seed, "data-compare", ["--out", str(scratch)])
    for rel in DATA_FILES:
        if (scratch / rel).read_text() != cd.path(rel).read_text():
            return (f"{rel} is not what make_data.py generates (seed {seed}): it was edited, or make_data.py changed "
                    f"since it was written, or generate(seed) is not deterministic; run `vibe data {cd.root}` (or make make_data.py produce the data you want)")
    return None
