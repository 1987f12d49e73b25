"""The skills cannot drift from the code: front matter is valid, every `python runnable` block runs against
real local servers (tiny model), every `yaml runnable:<Model>` block validates, and every `vibe`/`swarm`
subcommand a skill names exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests_support import ADMIN_TOKEN

from engine.jobs import TrainJob
from vibe.config import VibeJob

SKILLS = sorted((Path(__file__).resolve().parents[2] / "skills").glob("*/SKILL.md"))
BLOCK = re.compile(r"^```(\w+) runnable(?::(\w+))?\n(.*?)^```", re.M | re.S)
MODELS = {"TrainJob": TrainJob, "VibeJob": VibeJob}


def blocks(lang: str) -> list:
    """pytest params (skill, model, text) of every `<lang> runnable[:<model>]` block, named by skill."""
    return [pytest.param(p.parent.name, m.group(2), m.group(3), id=f"{p.parent.name}-{i}")
            for p in SKILLS for i, m in enumerate(BLOCK.finditer(p.read_text())) if m.group(1) == lang]


def test_every_skill_has_front_matter_naming_its_folder():
    assert {"write-swarm-client", "write-multi-agent-client", "debug-with-tmux", "swarm-configuration"} <= {
        p.parent.name for p in SKILLS}
    for p in SKILLS:
        head = p.read_text().split("---\n")[1]
        meta = yaml.safe_load(head)
        assert meta["name"] == p.parent.name and len(meta["description"]) > 40, p


@pytest.mark.parametrize(("skill", "model", "text"), blocks("yaml"))
def test_yaml_blocks_validate_against_their_model(skill, model, text):
    MODELS[model].model_validate(yaml.safe_load(text))


def test_subcommands_named_in_skills_exist():
    from engine.cli import main as swarm_main
    from vibe.cli import build_parser

    vibe_cmds = set(build_parser()._subparsers._group_actions[0].choices)
    text = "\n".join(p.read_text() for p in SKILLS)
    for cmd in set(re.findall(r"`vibe ([a-z]+)", text)):
        assert cmd in vibe_cmds, f"skills mention `vibe {cmd}`"
    for cmd in set(re.findall(r"`swarm ([a-z]+)", text)):
        with pytest.raises(SystemExit) as e:
            swarm_main([cmd, "--help"])
        assert e.value.code == 0, f"skills mention `swarm {cmd}`"


@pytest.mark.slow
@pytest.mark.parametrize(("skill", "model", "code"), blocks("python"))
def test_python_blocks_run_against_local_servers(skill, model, code, live_server, tmp_path, capfd):
    one, two = live_server(start=False), live_server(start=False)
    env = {**os.environ, "SWARM_URL": one.url, "SWARM_URL_2": two.url, "SWARM_ADMIN_TOKEN": ADMIN_TOKEN,
           "OMP_NUM_THREADS": "1"}
    script = tmp_path / "block.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 1" in proc.stdout
