"""The leader's pluggable brain: understand the goal, plan a stage, decide what follows the evidence.

`Policy` is the protocol the graph depends on. `OfflinePolicy` is the deterministic one (goal parser +
experimental design + the analysis verdicts); `a3r.leader.llm.LLMPolicy` asks an OpenAI-compatible
endpoint and validates every answer. `a3r.leader.factory.make_policy` picks the LLM when an endpoint is configured.

Whatever the policy, the evidence (`a3r.analysis.Evidence`) is computed from the store by the graph, and
the report prints only those numbers: a policy chooses what to run and writes prose, never results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from a3r.analysis import Evidence
from a3r.leader.design import ResearchBudget, StageDesign, first_stage, next_stage
from a3r.leader.goals import Goal, parse_goal

if TYPE_CHECKING:
    from a3r.leader.failed_run import FailedRun

__all__ = ["Decision", "OfflinePolicy", "Policy"]


class Decision(BaseModel):
    """What follows a stage: another stage (with its design) or the final report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["continue", "finish"]
    reason: str = Field(description="Why, in words; numbers in it come from the evidence text.")
    next_stage: StageDesign | None = None
    author: str = Field("offline", description="Who decided: offline, or llm:<model> (or its fallback).")


class Policy(Protocol):
    """What the leader graph needs from a policy. Every method must be safe to call again after a crash."""

    name: str

    def understand(self, text: str) -> Goal:
        """The goal as data; raises ValueError (e.g. GoalParseError) with what it understood otherwise."""
        ...

    def plan_stage(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence | None
    ) -> StageDesign | None:
        """The next stage's design (the first when `stages` is empty), or None when nothing is worth running."""
        ...

    def decide(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence
    ) -> Decision:
        """Continue (with the next design) or finish, given the pooled evidence of all stages so far."""
        ...

    def narrate(self, goal: Goal, evidence: Evidence, decisions: list[Decision]) -> dict[str, str]:
        """Optional prose for the report, by section ("summary", "stage-1", ...). Never the numbers."""
        ...

    def revise_failed(self, goal: Goal, run: FailedRun) -> dict[str, Any] | None:
        """New knob values (knob key -> value) for a retry of a run the scheduler gave up on, or None to
        leave it failed. `a3r.leader.recovery` checks the answer and re-queues the run."""
        ...


class OfflinePolicy:
    """Deterministic: the regex goal parser, `a3r.leader.design` and the analysis verdicts."""

    name = "offline"

    def understand(self, text: str) -> Goal:
        return parse_goal(text)

    def plan_stage(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence | None
    ) -> StageDesign | None:
        if all(s.kind == "calibration" for s in stages):
            first = first_stage(goal, budget, prior=stages)
            if first is not None or evidence is None:
                return first
            # the calibration piloted every value of the grid (the reference did not train alone): its
            # runs are the grid's, and the next stage follows from their evidence
        if evidence is None:
            raise ValueError("planning a later stage needs the evidence of the earlier ones")
        return next_stage(goal, budget, stages, evidence)

    def decide(
        self, goal: Goal, budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence
    ) -> Decision:
        nxt = self.plan_stage(goal, budget, stages, evidence)
        if nxt is not None:
            return Decision(action="continue", reason=" ".join(nxt.rationale) or nxt.purpose, next_stage=nxt)
        return Decision(action="finish", reason=finish_reason(budget, stages, evidence))

    def narrate(self, goal: Goal, evidence: Evidence, decisions: list[Decision]) -> dict[str, str]:
        return {}

    def revise_failed(self, goal: Goal, run: FailedRun) -> dict[str, Any] | None:
        return None  # the scheduler's rule fixes (a3r.fixes) are all the offline policy knows


def finish_reason(budget: ResearchBudget, stages: list[StageDesign], evidence: Evidence) -> str:
    """Why the campaign stops here, in words."""
    used = sum(s.n_runs for s in stages)
    if len(stages) >= budget.max_stages:
        why = f"Reached the stage limit ({budget.max_stages})."
    elif used >= budget.max_runs:
        why = f"The run budget is spent ({used} of {budget.max_runs} runs)."
    else:
        why = "Nothing left to resolve within the budget: no bracket to narrow, no interval that more seeds could separate."
    return f"{why} {evidence.answer}"
