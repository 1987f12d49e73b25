"""Render a blueprint into a run directory: `blueprint.md`, `config.yaml` and `run.sh` (jinja2).

Rendering is pure (`render_files` returns name -> text) so the same code serves local run dirs and the
staging copy shipped to ssh hosts, whose paths differ. `write_files` replaces each file atomically, so a
reader (or a crash) never sees half a script. Paths in `run.sh` go through `shlex.quote`; the launch
command itself is shell by design and is written verbatim.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined

from a3r.blueprints.schema import Blueprint

__all__ = ["RUN_FILES", "render_files", "write_files"]

RUN_FILES = ("blueprint.md", "config.yaml", "run.sh")

_env = Environment(
    loader=PackageLoader("a3r.blueprints", "templates"),
    undefined=StrictUndefined,  # a typo in a template fails loudly instead of rendering ""
    keep_trailing_newline=True,
    autoescape=False,  # Markdown, YAML and shell, never HTML
)
_env.filters["q"] = lambda s: shlex.quote(str(s))


def render_files(
    bp: Blueprint,
    *,
    run_id: int,
    seed: int,
    run_dir: str,
    overrides: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The three run files for `run_id`, with paths as the job will see them (`run_dir` on its host)."""
    config = bp.effective_config(seed, overrides)
    config_yaml = yaml.safe_dump(config, sort_keys=False) if config else "{}\n"
    ctx = {
        "bp": bp,
        "run_id": run_id,
        "seed": seed,
        "run_dir": run_dir,
        "checkpoint_dir": f"{run_dir}/checkpoints",
        "blueprint_hash": bp.content_hash(),
        "config_yaml": config_yaml,
        "overrides": overrides or {},
        "overrides_json": json.dumps(overrides or {}, indent=2, sort_keys=True),
    }
    return {name: _env.get_template(f"{name}.j2").render(ctx) for name in RUN_FILES}


def write_files(directory: str | Path, files: dict[str, str]) -> None:
    """Write each file atomically (temp file + rename) into `directory`; run.sh is made executable."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        tmp = directory / f".{name}.tmp"
        tmp.write_text(text)
        if name.endswith(".sh"):
            tmp.chmod(0o755)
        os.replace(tmp, directory / name)
