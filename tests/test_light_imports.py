"""Processes that only validate configs and drive servers start without torch or transformers.

The swarm client (`swarm train`'s job process), job launch, the `a3r` CLI and its worker, and A3R's knobs
compute nothing; importing torch cost them most of their start-up (about a second a process at one thread),
and the suite starts hundreds of them. Each probe runs in a fresh interpreter, because this test process
has long imported torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("torch", "transformers")

# What each probe does before the heavy modules are looked up; the last line of each uses what it imported.
PROBES = {
    "engine.jobs": "import engine.jobs",
    "engine.launch": "import engine.launch",
    "engine.cli": "import engine.cli",
    "swarm train --help": (
        "import contextlib, io, sys\n"
        "from engine.cli import main\n"
        "sys.argv = ['swarm', 'train', '--help']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"
    ),
    "a3r worker entry": "import a3r.cli, a3r.worker.runner, a3r.worker.sinks, a3r.worker.spec",
    "a3r knobs": "from a3r.leader.knobs import _advantages, _policy_losses\n_advantages(), _policy_losses()",
    # Validation takes a loss's registered defaults and rejects unknown names with the valid list.
    "engine.config validation": (
        "from engine.config import SwarmConfig\n"
        "from engine.errors import ConfigError\n"
        "cfg = SwarmConfig.model_validate({'algorithm': {'policy_loss': 'gspo', 'advantage': 'rloo'}})\n"
        "assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (3e-4, 4e-4), cfg.algorithm\n"
        "try:\n"
        "    SwarmConfig.model_validate({'algorithm': {'policy_loss': 'ppo'}})\n"
        "except (ConfigError, ValueError) as e:\n"
        "    assert 'valid: dapo, gspo, nll, ppo_clip' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('unknown loss accepted')"
    ),
}


def heavy_modules_after(code: str, names: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules of `names` a fresh interpreter holds after running `code` in this tree (`-c` puts the
    working directory first on sys.path)."""
    script = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("probe", PROBES)
def test_process_that_never_computes_imports_no_torch(probe):
    assert heavy_modules_after(PROBES[probe]) == []


def test_probe_sees_torch_when_it_is_imported():
    """The probe itself can fail: a process that looks a loss function up does import torch."""
    assert heavy_modules_after("from engine.algorithms import get_policy_loss\nget_policy_loss('gspo')") == ["torch"]


def _swarm(*argv: str) -> str:
    return (
        "import contextlib, io, sys\n"
        "from engine.cli import main\n"
        f"sys.argv = ['swarm', *{list(argv)!r}]\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"
    )


def test_swarm_serve_loads_no_plugin_command():
    """Every server is a `swarm serve` process, and loading the `swarm.commands` entry points there imported
    the whole dashboard (its app, queries and plotting: 1.4 s of a tiny server's 3.3 s to /health). The
    engine's own commands load no plugin; `swarm --help` does, so the probe can see one."""
    plugin = ("a3r.dashboard.swarm_command",)
    assert heavy_modules_after(_swarm("serve", "--help"), plugin) == []
    assert heavy_modules_after(_swarm("train", "--help"), plugin) == []
    assert heavy_modules_after(_swarm("--help"), plugin) == list(plugin)
