"""The A3R leader: a LangGraph StateGraph that turns a research goal into adaptive stages of experiments.

    from a3r.api import Workspace
    from a3r.leader import LeaderConfig, make_policy, run_campaign
    ws = Workspace("campaigns/bs")
    run_campaign(ws, make_policy(), LeaderConfig(campaign="bs", goal="find the smallest batch size ..."))

Modules: `goals` (question shapes and the offline parser), `knobs` (variables -> engine config keys),
`design` (grids, narrowing, seeds, budgets), `blueprints` (arms -> engine TrainJobs), `policy` / `llm`
(offline and LLM policies), `graph` (the StateGraph), `runner` (park/wake loop, resume), `observe` (runs
read back from the store).
"""

from a3r.leader.design import ResearchBudget, StageDesign, first_stage, next_stage
from a3r.leader.factory import make_policy
from a3r.leader.goals import Goal, GoalParseError, parse_goal
from a3r.leader.graph import build_graph
from a3r.leader.policy import Decision, OfflinePolicy, Policy
from a3r.leader.runner import CampaignError, checkpoint_path, resume_campaign, run_campaign
from a3r.leader.state import LeaderConfig

__all__ = [
    "CampaignError",
    "Decision",
    "Goal",
    "GoalParseError",
    "LeaderConfig",
    "OfflinePolicy",
    "Policy",
    "ResearchBudget",
    "StageDesign",
    "build_graph",
    "checkpoint_path",
    "first_stage",
    "make_policy",
    "next_stage",
    "parse_goal",
    "resume_campaign",
    "run_campaign",
]
