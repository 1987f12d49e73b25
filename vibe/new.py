"""`vibe new`: a client folder from a prompt, by an LLM endpoint (vibe.generate) or an offline template."""

from __future__ import annotations

import re
from pathlib import Path

from vibe.config import VibeJob
from vibe.data_writer import write_data
from vibe.exceptions import LayoutError, NoEndpointError
from vibe.layout import CONFIG_FILE, ClientDir
from vibe.templates import Family, catalogue, copy_template, describe, match_family

__all__ = ["default_out", "new_from_template", "prepare_out"]


def default_out(prompt: str) -> Path:
    slug = "-".join(re.findall(r"[a-z0-9]+", prompt.lower())[:4]) or "client"
    return Path(f"vibe-{slug}")


def prepare_out(out: Path) -> Path:
    """Create `out`, refusing to write into a non-empty folder (a client would be silently mixed)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise LayoutError(f"{out} exists and is not empty; pass --out with a new folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def set_identity(cd: ClientDir, prompt: str) -> None:
    """Name the job after its folder and record the prompt it was made from."""
    job = VibeJob.load(cd.path(CONFIG_FILE))
    name = re.sub(r"[^a-z0-9-]+", "-", cd.root.name.lower()).strip("-") or job.name
    cd.path(CONFIG_FILE).write_text(job.model_copy(update={"name": name, "description": prompt}).to_yaml())


def new_from_template(prompt: str, out: Path, family: Family | None = None) -> Family:
    """Copy the matching template into `out` and write its data; NoEndpointError when none matches."""
    family = family or match_family(prompt)
    if family is None:
        raise NoEndpointError(
            "no offline template trains this task, and building one for another task would be wrong. The "
            f"templates train:\n{catalogue()}\nConfigure an LLM endpoint (--llm-base-url/--llm-model or "
            "A3R_LLM_BASE_URL/A3R_LLM_MODEL), or pass --template NAME if one of them is what you want"
        )
    cd = ClientDir.open(prepare_out(out))
    copy_template(family, cd.root)
    set_identity(cd, prompt)
    write_data(cd)
    print(f"[vibe] offline template {family.value!r}: {describe(family)} -> {cd.root}")
    return family
