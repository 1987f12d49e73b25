"""`a3r submit "<goal>"` (alias `a3r research`), `a3r resume <campaign>` and `a3r demo`: the leader's
command-line entry points.

`add_leader_commands(subparsers)` registers them on the `a3r` parser, whose global `--workspace/--db`
options they honour. When `--workspace` is left at its default, a campaign gets its own workspace,
`campaigns/<campaign>/` (one tmux socket and one store per campaign); the report goes to
`<reports-dir>/<campaign>/report.md` and `report.html`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from a3r.cli_values import parse_value

__all__ = ["DEMO_GOAL", "add_leader_commands", "cmd_demo", "cmd_research", "cmd_resume"]

# The reference case study (AgentJet appendix B) scaled to a 2-core CPU and SmolLM2-135M: a run is 1-2
# minutes there, stage 1 (3 batch sizes x 2 reply budgets x 2 seeds) about 18, the campaign about 36.
DEMO_GOAL = (
    "find the minimum batch size that still trains arithmetic efficiently (1 to 4), "
    "and whether max response length (16 to 64) changes that"
)


DEMO_SETTINGS = ("swarm.training.lr=2e-5", "temperature=0.8")


def _say(msg: str) -> None:
    print(f"[a3r] {msg}", flush=True)


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words[:6]) or "campaign"


def _budget_overrides(items: list[str]) -> dict[str, Any]:
    """`--budget max_runs=24,wall_time_s=900` (repeatable) as ResearchBudget fields; unknown keys fail."""
    from a3r.leader.design import ResearchBudget

    out: dict[str, Any] = {}
    for item in items:
        for part in filter(None, (x.strip() for x in item.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in ResearchBudget.model_fields:
                known = ", ".join(ResearchBudget.model_fields)
                raise ValueError(f"--budget takes KEY=VALUE with KEY one of: {known}; got {part!r}")
            out[key] = parse_value(value)
    return out


def _hosts_config(path: str):
    """The WorkspaceConfig of a `--hosts` file: a whole a3r.yaml, or a YAML list of hosts."""
    from a3r.config import WorkspaceConfig

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"--hosts {path}: cannot read it ({e.strerror})") from e
    except yaml.YAMLError as e:
        raise ValueError(f"--hosts {path}: not valid YAML ({e})") from e
    if isinstance(data, list):
        data = {"hosts": data}
    return WorkspaceConfig.parse(data, source=path)


def _workspace(args: argparse.Namespace, campaign: str):
    from a3r.api import Workspace
    from a3r.config import CONFIG_FILE, HostSpec, WorkspaceConfig

    default = args.workspace in (None, ".") and not os.environ.get("A3R_WORKSPACE")
    root = Path("campaigns") / campaign if default else Path(args.workspace)
    hosts = getattr(args, "hosts", None)
    if not (root / CONFIG_FILE).exists():
        if hosts:
            config = _hosts_config(hosts)
        else:
            config = WorkspaceConfig(hosts=[HostSpec(name="local", slots=args.slots)])
        return Workspace.create(root, config, db_path=args.db)
    if hosts:
        raise ValueError(
            f"--hosts applies to a new workspace, but {root / CONFIG_FILE} exists: edit it, or pick a new "
            "--campaign name"
        )
    return Workspace(root, db_path=args.db)


def _policy(args: argparse.Namespace):
    from a3r.leader.policy import make_policy

    return make_policy(base_url=args.llm_base_url, model=args.llm_model, offline=args.offline)


def _base_job(args: argparse.Namespace) -> dict[str, Any]:
    from a3r.blueprints import deep_merge
    from a3r.leader.blueprints import DEFAULT_BASE_JOB
    from a3r.leader.knobs import set_dotted

    job = deep_merge(DEFAULT_BASE_JOB, {})
    if args.model:
        set_dotted(job, "swarm.model.name", args.model)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY.PATH=VALUE, got {item!r}")
        set_dotted(job, key.strip(), parse_value(value))
    return job


def _run(args: argparse.Namespace, goal: str) -> int:
    from a3r.exceptions import A3RError
    from a3r.leader.design import BudgetError, ResearchBudget
    from a3r.leader.goals import GoalParseError
    from a3r.leader.runner import CampaignError, run_campaign
    from a3r.leader.state import LeaderConfig

    campaign = args.campaign or _slug(goal)
    try:
        budget = ResearchBudget(
            **{
                "max_stages": args.max_stages,
                "min_stages": min(args.min_stages, args.max_stages),
                "max_runs": args.max_runs,
                "seeds": args.seeds,
                "max_seeds": max(args.max_seeds, args.seeds),
                "steps": args.steps,
                "wall_time_s": args.wall_time,
                "grid_points": args.grid_points,
                **_budget_overrides(args.budget),
            }
        )
        config = LeaderConfig(
            campaign=campaign,
            goal=goal,
            budget=budget,
            base_job=_base_job(args),
            metric=args.metric,
            reports_dir=args.reports_dir,
        )
        ws = _workspace(args, campaign)
    except (ValueError, A3RError) as e:
        print(f"a3r: error: {e}", file=sys.stderr)
        return 2
    try:
        state = run_campaign(ws, _policy(args), config, timeout_s=args.timeout, echo=_say)
    except GoalParseError as e:
        print(f"a3r: {e}", file=sys.stderr)
        return 2
    except (CampaignError, BudgetError) as e:
        print(f"a3r: error: {e}", file=sys.stderr)
        return 1
    except TimeoutError as e:
        print(f"a3r: {e}; continue with `a3r --workspace {ws.root} resume {campaign}`", file=sys.stderr)
        return 3
    finally:
        ws.close()
    _say(f"answer: {state['stages'][-1].get('verdict', '')}")
    return 0


def cmd_research(args: argparse.Namespace) -> int:
    """Run a research campaign from a goal sentence to its report."""
    return _run(args, args.goal)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: the reference case study scaled to this CPU."""
    if args.model is None:
        args.model = "smollm2-135m"
    args.campaign = args.campaign or "demo-min-batch-size"
    # The settings under which SmolLM2 learns arithmetic within a few steps on this CPU
    # (docs/benchmarks/learning_arithmetic.md); the user's own --set values come later and win.
    args.set = [*DEMO_SETTINGS, *args.set]
    return _run(args, DEMO_GOAL)


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a campaign whose leader was stopped or killed."""
    from a3r.leader.runner import CampaignError, resume_campaign

    ws = _workspace(args, args.campaign)
    try:
        state = resume_campaign(ws, _policy(args), args.campaign, timeout_s=args.timeout, echo=_say)
    except CampaignError as e:
        print(f"a3r: error: {e}", file=sys.stderr)
        return 1
    except TimeoutError as e:
        print(f"a3r: {e}", file=sys.stderr)
        return 3
    finally:
        ws.close()
    _say(f"answer: {state['stages'][-1].get('verdict', '')}")
    return 0


def _policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--offline", action="store_true", help="use the offline policy even if an LLM endpoint is configured"
    )
    p.add_argument(
        "--llm-base-url",
        help="OpenAI-compatible endpoint (default $A3R_LLM_BASE_URL); key from $A3R_LLM_API_KEY",
    )
    p.add_argument("--llm-model", help="model name at that endpoint (default $A3R_LLM_MODEL)")
    p.add_argument(
        "--timeout", type=float, help="stop waiting after this many seconds (the campaign stays resumable)"
    )
    p.add_argument(
        "--slots", type=int, default=1, help="local slots when the workspace is created (default 1)"
    )


def _campaign_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--campaign", help="campaign name (default: from the goal's first words)")
    p.add_argument(
        "--model", help="engine model for every run (swarm.model.name): tiny, smollm2-135m, a HF dir"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="TrainJob setting for every run, e.g. swarm.pool.group_size=4 (repeatable)",
    )
    p.add_argument("--metric", help="per-step metric to score (default reward_mean)")
    p.add_argument("--reports-dir", default="reports", help="reports go to <dir>/<campaign>/")
    g = p.add_argument_group("budget")
    g.add_argument("--max-stages", type=int, default=4)
    g.add_argument("--min-stages", type=int, default=2)
    g.add_argument("--max-runs", type=int, default=48)
    g.add_argument("--seeds", type=int, default=2, help="seeds per new arm")
    g.add_argument("--max-seeds", type=int, default=6)
    g.add_argument("--steps", type=int, default=20, help="training steps per run")
    g.add_argument("--grid-points", type=int, default=5, help="values of the studied variable in stage 1")
    g.add_argument("--wall-time", type=float, default=3600.0, help="seconds per attempt before it is killed")
    g.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="any ResearchBudget field, e.g. --budget max_runs=24,wall_time_s=900 (wins over the flags above)",
    )
    p.add_argument(
        "--hosts",
        metavar="FILE",
        help="YAML with the hosts to run on (a `hosts:` list, or a whole a3r.yaml) for a new campaign workspace",
    )
    _policy_args(p)


def add_leader_commands(subparsers: Any, *, goal_submit: bool = False) -> None:
    """Register `research`, `resume` and `demo` on the `a3r` command's subparsers (and `submit` as the
    goal form of `research` when `goal_submit`; otherwise `submit` is the execution plane's blueprint form)."""
    for name in ("research", "submit") if goal_submit else ("research",):
        s = subparsers.add_parser(name, help="run a research campaign from a goal to its report")
        s.add_argument(
            "goal",
            help='the research goal, e.g. "find the smallest batch size that still trains arithmetic (1 to 64)"',
        )
        _campaign_args(s)
        s.set_defaults(fn=cmd_research)

    s = subparsers.add_parser(
        "demo", help="the main job: the reference study scaled to this CPU (offline policy)"
    )
    _campaign_args(s)
    s.set_defaults(fn=cmd_demo, steps=8, grid_points=3, max_runs=20, max_stages=3)

    s = subparsers.add_parser("resume", help="continue a campaign whose leader was stopped or killed")
    s.add_argument("campaign")
    _policy_args(s)
    s.set_defaults(fn=cmd_resume)
