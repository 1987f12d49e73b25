"""`vibe new`: a client folder from a prompt, by an LLM endpoint (vibe.generate), an offline template, or the
user's examples (`--examples`, vibe.examples)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.errors import ConfigError
from engine.rewards.judge_config import JudgeConfig
from vibe.answer_match import DESCRIPTIONS, Matcher
from vibe.config import VibeJob
from vibe.data_writer import write_data
from vibe.examples import check_matcher, client_files, pick_matcher, read_examples
from vibe.exceptions import LayoutError, NoEndpointError, VibeError
from vibe.layout import CONFIG_FILE, ClientDir
from vibe.loop_probes import gold_budget
from vibe.templates import Family, catalogue, copy_template, describe, match_family

__all__ = ["default_out", "new_from_examples", "new_from_template", "prepare_out"]

ANSWER_SLACK_TOKENS = 8


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


def set_judge_from_env(cd: ClientDir) -> None:
    """Point the client's judge at the endpoint SWARM_JUDGE_* names (JudgeConfig.from_env, as the engine's
    `judged_summary` task reads it), keeping the template's rubric unless SWARM_JUDGE_RUBRIC is set; without
    those variables the template's placeholder stays, and the note says what to edit."""
    job = VibeJob.load(cd.path(CONFIG_FILE))
    try:
        env = JudgeConfig.from_env()
    except ConfigError:
        print(f"[vibe] no SWARM_JUDGE_BASE_URL/SWARM_JUDGE_SWARM_URL and SWARM_JUDGE_MODEL: set the judge's endpoint "
              f"in {cd.path(CONFIG_FILE)} (judge:) before vibe check")
        return
    set_fields = env.model_dump(exclude_unset=True)
    if "rubric" not in set_fields and job.judge is not None:
        env = env.model_copy(update={"rubric": job.judge.rubric})
    cd.path(CONFIG_FILE).write_text(job.model_copy(update={"judge": env}).to_yaml())


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
    if family is Family.SUMMARY:
        set_judge_from_env(cd)
    write_data(cd)
    print(f"[vibe] offline template {family.value!r}: {describe(family)} -> {cd.root}")
    return family


def new_from_examples(prompt: str, examples_path: Path, out: Path) -> Matcher:
    """A QA client for `prompt` from the user's examples: the qa template's client with the examples as
    its data and the answer matcher they call for (vibe.examples); VibeError, writing nothing, when the
    examples are malformed, too few, or fail the matcher (a leaked answer, an answer that cannot match)."""
    examples = read_examples(examples_path)
    matcher, choices = pick_matcher(examples)
    problems = check_matcher(matcher, choices, examples)
    if problems:
        raise VibeError(f"the {matcher.value} answer matcher ({DESCRIPTIONS[matcher]}) fails on {len(problems)} of "
                        f"{len(examples)} examples in {examples_path}: " + "; ".join(problems[:3])
                        + "; fix those examples (or their answers) and run vibe new again")
    cd = ClientDir.open(prepare_out(out))
    copy_template(Family.QA, cd.root)
    for rel, text in client_files(prompt, examples, matcher, choices, Path(examples_path).name).items():
        cd.path(rel).write_text(text)
    set_identity(cd, prompt)
    job = VibeJob.load(cd.path(CONFIG_FILE))
    budgets, _ = gold_budget([e.answer for e in examples], job.swarm.model.name, job.max_tokens)
    # room for the longest answer and a few words around it; the check's token-budget probe holds it to this
    need = max(b.tokens for b in budgets) + ANSWER_SLACK_TOKENS
    if need > job.max_tokens:
        cd.path(CONFIG_FILE).write_text(job.model_copy(update={"max_tokens": need}).to_yaml())
    write_data(cd)
    print(f"[vibe] QA client from {len(examples)} examples, matcher {matcher.value!r} ({DESCRIPTIONS[matcher]}) -> {cd.root}")
    return matcher
