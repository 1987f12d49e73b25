"""The LLM policy: any OpenAI-compatible chat endpoint (openai SDK) with schema-validated JSON answers.

Requests go through `a3r.leader.endpoint.JsonChat`: one JSON object per answer, parsed into a pydantic
schema, then checked against the project's rules (known variables, valid values, the run budget);
invalid answers are fed back, up to `max_attempts` times. If the endpoint still gives nothing usable (or
fails), the offline policy answers instead, `echo` says so, and the decision or design records it (`author="offline (LLM fallback:
...)"`), so a long campaign never dies of a bad reply.

With a failed run (`revise_failed`), the LLM sees the classified failure and the log tail and may change
knobs for the retry; `a3r.leader.recovery.check_changes` validates the answer.

The LLM chooses *what to run* and writes prose. It never supplies results: seed numbers are assigned
here, stage designs are rebuilt from validated arm values, and the report prints only store numbers
(prose is vetted by `a3r.report.vet_prose`). The project's skills (skills/*/SKILL.md) are the context.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import openai
from pydantic import BaseModel, ConfigDict, Field

from a3r.analysis import Evidence, fmt
from a3r.leader.design import Arm, ResearchBudget, StageDesign, arm_label, grid
from a3r.leader.endpoint import Endpoint, JsonChat, LLMOutputError
from a3r.leader.goal_llm import read_goal
from a3r.leader.goals import Goal
from a3r.leader.knobs import KNOBS, get_dotted
from a3r.leader.policy import Decision, OfflinePolicy
from a3r.leader.recovery import FailedRun, check_changes

__all__ = ["LLMOutputError", "LLMPolicy", "load_skills"]

T = TypeVar("T")
SKILLS_DIR = Path(__file__).resolve().parents[2] / "skills"


# -- answer schemas -------------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArmSpec(_Strict):
    x: Any
    level: Any = None
    n_seeds: int = Field(ge=1)
    why: str = Field(min_length=1)


class StageSpec(_Strict):
    action: Literal["continue", "finish"]
    reason: str = Field(min_length=1)
    purpose: str = ""
    hypothesis: str = ""
    arms: list[ArmSpec] = Field(default_factory=list)


class ProseSpec(_Strict):
    sections: dict[str, str] = Field(description='Section name ("summary", "stage-1", ...) -> one paragraph.')


class RevisionSpec(_Strict):
    changes: dict[str, Any] = Field(
        description="TrainJob key of a variable -> its new value for the retry; {} when no setting is to blame."
    )


def load_skills(directory: Path = SKILLS_DIR) -> str:
    """Every skills/*/SKILL.md, concatenated (empty when the directory is absent, e.g. a wheel install)."""
    if not directory.is_dir():
        return ""
    return "\n\n".join(p.read_text() for p in sorted(directory.glob("*/SKILL.md")))


def _catalogue() -> str:
    lines = []
    for k in KNOBS:
        extra = (
            f"choices {list(k.valid_choices())}"
            if k.kind == "choice"
            else f"{k.kind}, {k.scale} scale, default range {k.default_range}"
        )
        lines.append(f"- {k.key} ({k.name}): {extra}")
    return "\n".join(lines)


def _say(msg: str) -> None:
    print(f"[a3r] {msg}", flush=True)


class LLMPolicy:
    """A policy backed by an OpenAI-compatible chat endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        max_attempts: int = 3,
        timeout_s: float = 120.0,
        skills: str | None = None,
        echo: Callable[[str], None] = _say,
    ):
        """`echo` reports what the caller should know (the leader's own output by default): an endpoint
        that rejects JSON mode, and every answer the offline policy gave in the LLM's place."""
        self.model = model
        self.name = f"llm:{model}"
        self.base_url = base_url
        self.echo = echo
        self.offline = OfflinePolicy()
        system = (
            "You are the leader of A3R, an autonomous research system that plans RL-training experiments on the "
            "swarm engine. Reply with exactly one JSON object and nothing else. Numbers you write are never "
            "reported as results: results come only from the run store.\n\nVariables (TrainJob keys):\n"
            f"{_catalogue()}\n\nProject skills:\n{load_skills() if skills is None else skills}"
        )
        self.chat = JsonChat(
            Endpoint(base_url, api_key, model), system, echo=echo, max_attempts=max_attempts, timeout_s=timeout_s
        )

    def ask(self, prompt: str, schema: type[BaseModel], check: Callable[[Any], T]) -> T:
        """Ask until the reply parses as `schema` and passes `check`; the errors are fed back."""
        return self.chat.ask(prompt, schema, check)

    def _fallback(self, what: str, e: Exception) -> str:
        """Report that the offline policy answers `what` instead; returns the short cause for records."""
        cause = str(e)[:200]
        self.echo(f"{self.name} gave no usable {what} ({cause}); the offline policy's answer is used")
        return cause

    # -- Policy -------------------------------------------------------------------------------------------
    def understand(self, text: str) -> Goal:
        return read_goal(
            self.ask,
            text,
            self.offline.understand,
            (LLMOutputError, openai.APIError),
            lambda e: self._fallback("reading of the goal", e),
        )

    def plan_stage(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence | None
    ) -> StageDesign | None:
        return self.decide(goal, budget, stages, evidence).next_stage if stages else self._first(goal, budget)

    def _first(self, goal: Goal, budget: ResearchBudget) -> StageDesign:
        reference = self.offline.plan_stage(goal, budget, [], None)
        prompt = (
            self._context(goal, budget, [], None, reference) + "\nDesign stage 1 (action must be continue)."
        )
        try:
            return self.ask(prompt, StageSpec, lambda spec: self._design(goal, budget, [], spec))
        except (LLMOutputError, openai.APIError) as e:
            cause = self._fallback("design of stage 1", e)
            return reference.model_copy(update={"author": f"offline (LLM fallback: {cause})"})

    def decide(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence
    ) -> Decision:
        reference = self.offline.decide(goal, budget, stages, evidence)
        if reference.next_stage is not None and reference.next_stage.kind == "confirm":
            # the confirmation carries the error control (fresh seeds, sized for power, one look): it is
            # the deterministic rule's, never an LLM's; the LLM steers exploration only
            return reference
        prompt = self._context(goal, budget, stages, evidence, reference.next_stage) + (
            f"\nThe deterministic policy would {reference.action}: {reference.reason}\n"
            "Decide: continue with a next stage (arms: new values to narrow, or more seeds where intervals "
            "overlap) or finish."
        )

        def check(spec: StageSpec) -> Decision:
            if spec.action == "finish":
                return Decision(action="finish", reason=spec.reason, author=self.name)
            return Decision(
                action="continue",
                reason=spec.reason,
                next_stage=self._design(goal, budget, stages, spec),
                author=self.name,
            )

        try:
            return self.ask(prompt, StageSpec, check)
        except (LLMOutputError, openai.APIError) as e:
            cause = self._fallback("decision", e)
            return reference.model_copy(update={"author": f"offline (LLM fallback: {cause})"})

    def narrate(self, goal: Goal, evidence: Evidence, decisions: list[Decision]) -> dict[str, str]:
        prompt = (
            f"Goal: {goal.describe()}\nEvidence (computed from the store): {evidence.answer}\n"
            + "".join(f"Stage {i}: {d.action}: {d.reason}\n" for i, d in enumerate(decisions, 1))
            + 'Write short prose for the report as {"sections": {"summary": ..., "stage-1": ...}}. Interpret; do '
            "not introduce numbers that are not in the evidence."
        )
        try:
            return self.ask(prompt, ProseSpec, lambda spec: spec.sections)
        except (LLMOutputError, openai.APIError) as e:
            self._fallback("report prose", e)
            return {}

    def revise_failed(self, goal: Goal, run: FailedRun) -> dict[str, Any] | None:
        try:
            changes = self.ask(
                self._failure_prompt(goal, run),
                RevisionSpec,
                lambda spec: check_changes(goal, run, spec.changes),
            )
        except (LLMOutputError, openai.APIError) as e:
            self._fallback(f"revision of failed run {run.name}", e)
            return None
        return changes or None

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def _failure_prompt(goal: Goal, run: FailedRun) -> str:
        studied = [goal.factor.key] + ([goal.secondary.key] if goal.secondary is not None else [])
        values = ", ".join(
            f"{k.key}={v!r}" for k in KNOBS if (v := get_dotted(run.config, k.key)) is not None
        )
        return "\n".join(
            [
                f"Goal: {goal.describe()}",
                f"Run {run.name} (arm {run.arm}, seed {run.seed}) failed on attempt {run.attempt}; the "
                "scheduler will not retry it.",
                f"Failure kind (classified from the exit status and the log): {run.failure_kind.value}",
                f"Reason: {run.reason}",
                f"Scheduler: {run.scheduler_note}",
                f"Rule fix the scheduler suggests: {run.suggested_fix or 'none applies'}",
                f"Fixes already tried: {'; '.join(run.fixes_tried) or 'none'}",
                f"Its variables: {values}",
                f"Never change the studied variables ({', '.join(studied)}): they define the arm.",
                f"Log tail:\n{run.log_tail}",
                "If new values of some variables (TrainJob keys above) remove the cause, give them; if no "
                "setting is to blame (a bug, a broken host), give no changes.",
                f"Answer with this JSON schema: {json.dumps(RevisionSpec.model_json_schema())}",
            ]
        )

    def _context(self, goal, budget, stages, evidence, reference: StageDesign | None) -> str:
        used = sum(s.n_runs for s in stages)
        parts = [
            f"Goal: {goal.describe()}",
            f"Budget: stages {len(stages)} of {budget.max_stages} used, runs {used} of {budget.max_runs} used, "
            f"{budget.seeds} seeds per new arm, at most {budget.max_seeds} seeds per arm, {budget.steps} steps per run.",
        ]
        if evidence is not None:
            parts.append(f"Evidence so far (from the store): {evidence.answer}")
            for le in evidence.levels:
                for a in le.arms:
                    parts.append(
                        f"  arm {a.label}: n={a.n} mean {fmt(a.interval.mean)} CI [{fmt(a.interval.lo)}, {fmt(a.interval.hi)}]"
                    )
        if reference is not None:
            arms = [
                {"x": a.x, "level": a.level, "n_seeds": len(a.seeds), "why": a.why} for a in reference.arms
            ]
            parts.append(f"The deterministic design proposes: {json.dumps(arms)}")
        parts.append(f"Answer with this JSON schema: {json.dumps(StageSpec.model_json_schema())}")
        return "\n".join(parts)

    def _design(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], spec: StageSpec
    ) -> StageDesign:
        """A StageDesign from the LLM's arms, with seeds assigned here and the budget enforced."""
        if spec.action != "continue" or not spec.arms:
            raise ValueError("a stage needs action 'continue' and at least one arm")
        index = len(stages) + 1
        if index > budget.max_stages:
            raise ValueError(f"the campaign allows {budget.max_stages} stages; answer with action 'finish'")
        used: dict[tuple[Any, Any], list[int]] = {}
        for st in stages:
            for a in st.arms:
                used.setdefault((a.level, a.x), []).extend(a.seeds)
        levels = grid(goal.secondary, budget.secondary_levels) if goal.secondary else [None]
        arms = []
        for a in spec.arms:
            x = goal.factor.knob.coerce(a.x)
            if goal.factor.values is not None and not goal.refine and x not in goal.factor.values:
                raise ValueError(f"{x!r} is not among the studied values {goal.factor.values} the goal names")
            level = goal.secondary.knob.coerce(a.level) if goal.secondary is not None else None
            if goal.secondary is not None and level not in levels:
                raise ValueError(f"level {level!r} is not one of the secondary levels {levels}")
            seen = used.get((level, x), [])
            if len(seen) + a.n_seeds > budget.max_seeds:
                raise ValueError(f"arm {arm_label(goal, x, level)} would exceed max_seeds={budget.max_seeds}")
            start = max(seen, default=-1) + 1
            arms.append(Arm(x=x, level=level, seeds=list(range(start, start + a.n_seeds)), why=a.why))
        n = sum(len(a.seeds) for a in arms)
        left = budget.max_runs - sum(s.n_runs for s in stages)
        if n > left:
            raise ValueError(f"the stage needs {n} runs but only {left} are left in the budget")
        return StageDesign(
            index=index,
            kind="grid" if index == 1 else "refine",
            purpose=spec.purpose or f"Stage {index}: {spec.reason}",
            hypothesis=spec.hypothesis or "See the purpose.",
            arms=arms,
            steps=budget.steps,
            rationale=[spec.reason],
            author=self.name,
        )
