"""`a3r research "<goal>"` (also `a3r submit --goal "<goal>"`), `a3r resume <campaign>` and `a3r demo`:
the leader's command-line entry points.

`add_leader_commands(subparsers)` registers them on the `a3r` parser, whose global `--workspace/--db`
options they honour. When `--workspace` is left at its default, a campaign gets its own workspace,
`campaigns/<campaign>/` (one tmux socket and one store per campaign); the report goes to
`<reports-dir>/<campaign>/report.md` and `report.html`.

Starting and resuming share one error path (`_lead`): an error the user can act on is one line,
`a3r: error: ...`, and an `ExitCode`; only a bug shows a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from enum import IntEnum
from pathlib import Path
from typing import Any

import yaml

from a3r.cli_values import parse_value

__all__ = ["ExitCode", "add_leader_commands", "cmd_demo", "cmd_plan", "cmd_research", "cmd_resume"]



GOAL_HELP = 'the research goal, e.g. "find the smallest batch size that still trains arithmetic (1 to 64)"'


class ExitCode(IntEnum):
    """How the leader's commands end."""

    OK = 0
    FAILED = 1  # the campaign cannot go on as it is: fix what the message says, then resume it
    USAGE = 2  # the goal, the budget or an option is wrong
    TIMEOUT = 3  # --timeout reached while runs go on: resume the campaign later


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


def _workspace(args: argparse.Namespace, campaign: str, *, create: bool):
    """The campaign's workspace; a new one only when `create` (a resume never makes one)."""
    from a3r.api import Workspace
    from a3r.config import CONFIG_FILE, WorkspaceConfig, local_host
    from a3r.leader.runner import CampaignError

    default = args.workspace in (None, ".") and not os.environ.get("A3R_WORKSPACE")
    root = Path("campaigns") / campaign if default else Path(args.workspace)
    hosts = getattr(args, "hosts", None)
    if not (root / CONFIG_FILE).exists():
        if not create:
            raise CampaignError(
                f"no campaign {campaign!r} to resume: {root} is not a workspace (no {CONFIG_FILE}); "
                "give its --workspace, or start it with a goal first"
            )
        if hosts:
            config = _hosts_config(hosts)
        else:
            config = WorkspaceConfig(hosts=[local_host(args.slots)])
        return Workspace.create(root, config, db_path=args.db)
    if hosts:
        raise ValueError(
            f"--hosts applies to a new workspace, but {root / CONFIG_FILE} exists: edit it, or pick a new "
            "--campaign name"
        )
    return Workspace(root, db_path=args.db)


def _policy(args: argparse.Namespace):
    from a3r.leader.factory import make_policy

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
    _check_job(job)
    return job


def _check_job(job: dict[str, Any]) -> None:
    """Refuse a base job the engine would refuse, before anything of the campaign is written: a bad
    --set must not leave a workspace, a campaign row and a leader checkpoint that every later submit or
    resume trips over."""
    from pydantic import ValidationError

    from engine.jobs import TrainJob

    try:
        TrainJob.model_validate(job)
    except ValidationError as e:
        wrong = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ValueError(f"--set/--model give an invalid engine job ({wrong}); fix or drop that option") from None


def _leader_config(args: argparse.Namespace, goal: str, campaign: str):
    """The LeaderConfig of a new campaign from the command line; ValueError names a wrong option."""
    from a3r.leader.design import ResearchBudget
    from a3r.leader.state import LeaderConfig

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
    return LeaderConfig(
        campaign=campaign,
        goal=goal,
        budget=budget,
        base_job=_base_job(args),
        metric=args.metric,
        reports_dir=args.reports_dir,
    )


def _exit_code(e: Exception) -> ExitCode | None:
    """How an error ends the command, or None for a bug (which keeps its traceback)."""
    from a3r.exceptions import A3RError
    from a3r.leader.design import BudgetError
    from a3r.leader.runner import CampaignError

    if isinstance(e, TimeoutError):
        return ExitCode.TIMEOUT
    if isinstance(e, (CampaignError, BudgetError)):  # BudgetError is a ValueError: decide it first
        return ExitCode.FAILED
    if isinstance(e, ValueError):  # a goal it cannot read, budget/option values, workspace or policy settings
        return ExitCode.USAGE
    if isinstance(e, A3RError):  # the store, a host, the monitor lease
        return ExitCode.FAILED
    return None


def _lead(args: argparse.Namespace, campaign: str, goal: str | None) -> int:
    """Start (`goal` given) or resume a campaign to its report: the one error path of both."""
    from a3r.leader.runner import run_campaign
    from a3r.leader.state import check_campaign_name

    ws = None
    try:
        check_campaign_name(campaign)
        config = _leader_config(args, goal, campaign) if goal is not None else None
        more = _budget_overrides(getattr(args, "budget", [])) if config is None else None
        policy = _policy(args)
        ws = _workspace(args, campaign, create=config is not None)
        state = run_campaign(
            ws, policy, config, campaign=campaign, timeout_s=args.timeout, echo=_say, budget=more or None
        )
    except Exception as e:
        code = _exit_code(e)
        if code is None:
            raise
        hint = (
            f"; continue with `a3r --workspace {ws.root} resume {campaign}`"
            if code == ExitCode.TIMEOUT
            else ""
        )
        print(f"a3r: error: {e}{hint}", file=sys.stderr)
        return code
    finally:
        if ws is not None:
            ws.close()
    _say(f"answer: {state['stages'][-1].get('verdict', '')}")
    return ExitCode.OK


def cmd_research(args: argparse.Namespace) -> int:
    """Run a research campaign from a goal sentence to its report."""
    return _lead(args, args.campaign or _slug(args.goal), args.goal)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: the reference case study scaled to this CPU
    (`a3r.leader.demo`); the user's own --set and --budget values come later and win."""
    from a3r.leader.demo import DEMO_CAMPAIGN, DEMO_GOAL, DEMO_SETTINGS

    args.campaign = args.campaign or DEMO_CAMPAIGN
    args.set = [*DEMO_SETTINGS, *args.set]
    args.budget = [",".join(f"{k}={v}" for k, v in _demo_budget_extras().items()), *args.budget]
    return _lead(args, args.campaign, DEMO_GOAL)


def _demo_budget_extras() -> dict[str, Any]:
    """The demo budget's fields that have no flag of their own (the rest are the demo's flag defaults)."""
    from a3r.leader.demo import DEMO_BUDGET

    return {k: v for k, v in DEMO_BUDGET.items() if k not in _BUDGET_FLAGS}


# ResearchBudget fields that have their own command-line flag (argparse dest -> field)
_BUDGET_FLAGS = ("max_stages", "min_stages", "max_runs", "seeds", "max_seeds", "steps", "grid_points")


def cmd_plan(args: argparse.Namespace) -> int:
    """Print how a goal would be researched (question, calibration, first stage, ETA) without running it."""
    import json

    from a3r.leader.planning import plan_campaign

    try:
        config = _leader_config(args, args.goal, args.campaign or _slug(args.goal))
        goal = _policy(args).understand(args.goal)
        from a3r.config import WorkspaceConfig, local_host
        from a3r.leader.graph import effective_budget

        hosts = WorkspaceConfig(hosts=[local_host(args.slots)])  # the slots a new workspace would get
        plan = plan_campaign(
            goal, effective_budget(config, goal), config.base_job, slots=hosts.slots, threads=hosts.slot_threads
        )
    except Exception as e:
        code = _exit_code(e)
        if code is None:
            raise
        print(f"a3r: error: {e}", file=sys.stderr)
        return code
    print(json.dumps(plan.as_json(), indent=2, default=str) if args.json else plan.render())
    return ExitCode.OK


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a campaign whose leader was stopped or killed, or a finished one with a larger --budget."""
    return _lead(args, args.campaign, None)


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
        "--slots",
        type=int,
        default=None,
        help="local slots when the workspace is created, sharing the cores (default: one 1-thread slot per "
        "core on a CPU host, one slot on a GPU host)",
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
    p.add_argument("--metric", help="metric to score (default eval_accuracy: held-out greedy accuracy)")
    p.add_argument("--reports-dir", default="reports", help="reports go to <dir>/<campaign>/")
    g = p.add_argument_group("budget")
    g.add_argument("--max-stages", type=int, default=4)
    g.add_argument("--min-stages", type=int, default=2)
    g.add_argument("--max-runs", type=int, default=48)
    g.add_argument("--seeds", type=int, default=3, help="seeds per new arm (3 is the least any label needs)")
    g.add_argument("--max-seeds", type=int, default=12, help="seeds per arm at most (exploration, and the confirmation on its own)")
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
    """Register `research`, `resume` and `demo` on the `a3r` command's subparsers, and with `goal_submit`
    the goal form of `submit` (`a3r submit --goal "<goal>"`, the same as `research`); otherwise `submit`
    is the execution plane's blueprint form."""
    s = subparsers.add_parser("research", help="run a research campaign from a goal to its report")
    s.add_argument("goal", help=GOAL_HELP)
    _campaign_args(s)
    s.set_defaults(fn=cmd_research)

    if goal_submit:
        s = subparsers.add_parser(
            "submit",
            help="run a research campaign from a goal to its report (the same as `research`)",
            description='`a3r submit --goal "<goal>"` is `a3r research "<goal>"`; without --goal, `a3r submit` '
            "adds blueprint YAML files as runs.",
        )
        s.add_argument("--goal", required=True, help=GOAL_HELP)
        _campaign_args(s)
        s.set_defaults(fn=cmd_research)

    s = subparsers.add_parser(
        "demo", help="the main job: the reference study scaled to this CPU (offline policy)"
    )
    _campaign_args(s)
    from a3r.leader.demo import DEMO_BUDGET

    s.set_defaults(fn=cmd_demo, **{k: v for k, v in DEMO_BUDGET.items() if k in _BUDGET_FLAGS})

    s = subparsers.add_parser(
        "plan", help="show how a goal would be researched (question, calibration, first stage, ETA); runs nothing"
    )
    s.add_argument("goal", help=GOAL_HELP)
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    _campaign_args(s)
    s.set_defaults(fn=cmd_plan)

    s = subparsers.add_parser(
        "resume",
        help="continue a campaign whose leader was stopped or killed, or a finished one with a larger --budget",
    )
    s.add_argument("campaign")
    s.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="continue a finished campaign (one its budget stopped) under these ResearchBudget fields, e.g. "
        "--budget total_wall_s=3600,max_runs=60; every finished run is kept and pooled, none is rerun",
    )
    _policy_args(s)
    s.set_defaults(fn=cmd_resume)
