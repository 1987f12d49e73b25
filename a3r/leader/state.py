"""The leader's configuration and the graph state the checkpointer persists.

The state holds only plain data (dicts, lists, numbers, strings), so any checkpointer serialises it and a
resumed leader needs nothing but the checkpoint file and the run store. It records what the leader
*decided* (goal, stage designs, blueprints, run ids, decisions); what the runs *measured* stays in the
store and is re-read whenever it is needed.
"""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from a3r.leader.blueprints import DEFAULT_BASE_JOB
from a3r.leader.design import ResearchBudget

__all__ = ["CAMPAIGN_NAME", "LeaderConfig", "LeaderState", "StageRecord", "check_campaign_name"]

# A campaign name becomes a directory (campaigns/<name>, <reports_dir>/<name>) and a tmux socket name: one
# path component, so `../x` or `a/b` cannot put a workspace or a report elsewhere.
CAMPAIGN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


def check_campaign_name(name: str) -> str:
    """`name` if it is a valid campaign name, else ValueError saying what one looks like."""
    import re

    if not re.fullmatch(CAMPAIGN_NAME, name or ""):
        raise ValueError(
            f"campaign name {name!r} is not allowed: use letters, digits, '-', '_' and '.', starting with a "
            "letter or digit (at most 100 characters), e.g. --campaign batch-size-study"
        )
    return name


class LeaderConfig(BaseModel):
    """One campaign's leader settings (stored in the first checkpoint; a resume reuses them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign: str = Field(
        min_length=1,
        pattern=CAMPAIGN_NAME,
        description="Campaign name: the store's campaign, the graph's thread id and a directory name.",
    )
    goal: str = Field(min_length=1, description="The research goal, verbatim.")
    budget: ResearchBudget = ResearchBudget()
    base_job: dict[str, Any] = Field(
        default_factory=lambda: dict(DEFAULT_BASE_JOB),
        description="TrainJob data every arm starts from (model, eval, concurrency...); the goal's settings go on top.",
    )
    metric: str | None = Field(None, description="Override the per-step metric the analysis scores.")
    reports_dir: str = Field("reports", description="The report goes to <reports_dir>/<campaign>/.")
    poll_s: float | None = Field(
        None, gt=0, description="How often a parked leader checks its runs; default the scheduler tick."
    )
    bootstrap_seed: int = Field(
        0,
        description="Kept for stored campaigns; the analysis is deterministic (t intervals) and ignores it.",
    )


class StageRecord(TypedDict, total=False):
    index: int  # 1-based
    design: dict[str, Any]  # StageDesign
    stage_id: int  # store id
    run_ids: list[int]
    arms: dict[str, list[int]]  # arm label -> run ids (successive halving cancels per arm)
    rung_done: bool  # the early-stop check ran (or the stage has none)
    dropped: dict[str, str]  # arm label -> why it was stopped early
    verdict: str  # evidence text after this stage (built from store numbers)
    eta_s: float | None  # wall seconds estimated when the stage was planned (None: no measured cost yet)
    decision: dict[str, Any]  # Decision (action, reason, author)


class LeaderState(TypedDict, total=False):
    config: dict[str, Any]  # LeaderConfig
    campaign_id: int
    goal: dict[str, Any]  # Goal
    provenance: dict[str, Any]
    stages: list[StageRecord]
    pending: (
        dict[str, Any] | None
    )  # {"design": ..., "blueprints": [...], "eta_s": ...} planned, not yet dispatched
    calibration: list[dict[str, Any]]  # Calibration per pilot stage
    budget: dict[str, Any]  # ResearchBudget as sized by the calibration
    started_at: float  # when the campaign planned its first stage (the wall budget counts from here)
    waiting: bool  # the wait node found unfinished runs
    report: dict[str, Any]  # paths of the written report
    status: str  # planning | running | done
    continued: list[dict[str, Any]]  # each continuation with a larger budget: {"at": time, "budget": overrides}
