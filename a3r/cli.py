"""The `a3r` command line: workspace set-up, submission, tables, logs, tmux attach, cancel, the
monitor and the worker.

Global options come before the command: `a3r --workspace DIR <command>` (default: $A3R_WORKSPACE or the
current directory). Heavy imports happen inside commands so `a3r worker run` starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _ws(args, *, create: bool = False):
    """The workspace the command names; only a command that adds work (`submit`) may create one, so a
    mistyped --workspace is an error rather than a new, empty workspace."""
    from a3r.api import Workspace
    from a3r.config import CONFIG_FILE

    root = Path(args.workspace)
    if not create and not (root / CONFIG_FILE).exists():
        raise ValueError(f"no workspace at {root.resolve()} (no {CONFIG_FILE}); create one with `a3r init`, or give --workspace")
    return Workspace(root, db_path=args.db)


def _fail(msg: str, code: int = 1) -> int:
    print(f"a3r: error: {msg}", file=sys.stderr)
    return code


# -- set-up and submission ------------------------------------------------------------------------------
def cmd_init(args) -> int:
    from a3r.api import Workspace
    from a3r.config import HostSpec, SchedulerConfig, WorkspaceConfig

    cfg = WorkspaceConfig(
        hosts=[HostSpec(name="local", slots=args.local_slots)],
        scheduler=SchedulerConfig(heartbeat_s=args.heartbeat),
    )
    ws = Workspace.create(args.workspace, cfg, db_path=args.db)
    print(f"workspace {ws.root}: a3r.yaml written, store {ws.db_path}")
    return 0


GOAL_FORM = 'to run a research goal use `a3r submit --goal "<goal>"` (or `a3r research "<goal>"`)'


def cmd_submit(args) -> int:
    """The blueprint form of `submit`; `a3r submit --goal` is the leader's (see `_goal_submit`)."""
    from a3r.blueprints import Blueprint

    if args.demo:
        return _fail("the end-to-end demo is `a3r demo` (the leader, a3r.leader), not `a3r submit`")
    if not args.blueprints:
        return _fail(f"give one or more blueprint YAML files; {GOAL_FORM}", 2)
    missing = [p for p in args.blueprints if not Path(p).exists()]
    if missing:
        return _fail(f"no such blueprint file: {', '.join(missing)}; {GOAL_FORM}", 2)
    bps = [Blueprint.from_yaml(p) for p in args.blueprints]
    ws = _ws(args, create=True)
    camp = ws.create_campaign(args.campaign)
    stage = ws.create_stage(camp.id, args.stage)
    runs = ws.add_blueprints(stage.id, bps, priority=args.priority)
    print(f"campaign {camp.name} / stage {stage.name}: runs {[r.id for r in runs]}")
    if args.start_monitor:
        print(f"monitor pid {ws.start_monitor()}")
    return 0


# -- tables ---------------------------------------------------------------------------------------------
_STATE_STYLE = {
    "pending": "dim",
    "dispatched": "cyan",
    "running": "bold cyan",
    "succeeded": "green",
    "failed": "bold red",
    "timed_out": "yellow",
    "stale": "magenta",
    "cancelled": "dim",
}


def _bar(frac: float, width: int = 12) -> str:
    frac = min(max(frac, 0.0), 1.0)
    full = int(frac * width)
    return "█" * full + "·" * (width - full) + f" {frac * 100:3.0f}%"


def _runs_table(ws, runs, *, title: str | None = None):
    from rich.table import Table

    steps = ws.store.latest_steps([r.id for r in runs])
    bps: dict[int, object] = {}
    now = time.time()
    t = Table(title=title, expand=False)
    for col in ("run", "name", "state", "att", "host/slot", "progress", "primary", "heartbeat", "note"):
        t.add_column(col, overflow="fold")
    for r in runs:
        bp = bps.get(r.blueprint_id) or bps.setdefault(r.blueprint_id, ws.store.blueprint_of(r))
        att = ws.store.get_attempt(r.current_attempt_id) if r.current_attempt_id else None
        step = steps.get(r.id)
        primary = ws.store.final_metrics(r.id).get(bp.primary_metric) if step is not None else None
        hb = (
            f"{now - att.heartbeat_at:.1f}s ago"
            if att and att.heartbeat_at and att.state in ("dispatched", "running")
            else ""
        )
        t.add_row(
            str(r.id),
            r.name,
            f"[{_STATE_STYLE.get(r.state, '')}]{r.state}[/]",
            str(att.number) if att else "",
            f"{att.host}/{att.slot}" if att else "",
            _bar((step + 1) / bp.budget.steps) if step is not None else "",
            f"{bp.primary_metric}={primary:.4g}" if isinstance(primary, float) else "",
            hb,
            (r.message or "")[:60],
        )
    return t


def cmd_runs(args) -> int:
    from rich.console import Console

    ws = _ws(args)
    camp = ws.store.get_campaign(args.campaign).id if args.campaign else None
    runs = ws.runs(campaign_id=camp, states=args.state or None)
    if args.json:
        print(json.dumps([r.model_dump() for r in runs], indent=2))
        return 0
    Console().print(_runs_table(ws, runs))
    return 0


def _stage_rows(ws) -> list[dict]:
    """One entry per stage of every campaign, in order: its purpose and its runs' states."""
    from collections import Counter

    by_stage: dict[int, Counter] = {}
    for r in ws.runs():
        by_stage.setdefault(r.stage_id, Counter())[r.state] += 1
    rows = []
    for camp in ws.store.campaigns():
        for st in ws.store.stages(camp.id):
            counts = by_stage.get(st.id, Counter())
            rows.append(
                {
                    "campaign": camp.name,
                    "stage": st.name,
                    "stage_id": st.id,
                    "purpose": st.purpose,
                    "runs": dict(sorted(counts.items())),
                    "done": sum(
                        v for k, v in counts.items() if k not in ("pending", "dispatched", "running")
                    ),
                    "total": sum(counts.values()),
                }
            )
    return rows


def _summary(ws) -> dict:
    from collections import Counter

    counts = Counter(r.state for r in ws.runs())
    pid = ws.monitor_pid()
    return {
        "workspace": str(ws.root),
        "monitor_pid": pid,
        "runs": dict(sorted(counts.items())),
        "stages": _stage_rows(ws),
    }


def _stage_line(st: dict) -> str:
    states = ", ".join(f"[{_STATE_STYLE.get(k, '')}]{k}[/] {v}" for k, v in st["runs"].items()) or "no runs"
    frac = st["done"] / st["total"] if st["total"] else 0.0
    purpose = f" - {st['purpose']}" if st["purpose"] else ""
    return f"{st['campaign']} / [bold]{st['stage']}[/] {_bar(frac)}  {states}{purpose}"


def cmd_status(args) -> int:
    from rich.console import Console

    ws = _ws(args)
    s = _summary(ws)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    c = Console()
    c.print(
        f"workspace [bold]{s['workspace']}[/]  monitor: "
        + (f"pid {s['monitor_pid']}" if s["monitor_pid"] else "[red]not running[/]")
    )
    c.print(
        "runs: "
        + (", ".join(f"[{_STATE_STYLE.get(k, '')}]{k}[/] {v}" for k, v in s["runs"].items()) or "none")
    )
    for st in s["stages"]:
        c.print(_stage_line(st))
    for h in ws.store.hosts():
        c.print(
            f"host {h.name} ({h.kind}): "
            + ("reachable" if h.reachable else f"[red]unreachable[/] {h.last_error}")
        )
    fails = ws.failures(final_only=True)
    for f in fails[-5:]:
        c.print(f"[red]failed[/] run {f.run_id} attempt {f.attempt}: {f.failure_kind} {f.reason}")
    return 0


def cmd_watch(args) -> int:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    ws = _ws(args)

    def frame():
        s = _summary(ws)
        head = Text(
            f"{time.strftime('%H:%M:%S')}  monitor: {s['monitor_pid'] or 'not running'}  "
            + "  ".join(f"{k}: {v}" for k, v in s["runs"].items())
        )
        runs = ws.runs()
        parts: list = [head]
        for st in s["stages"]:
            stage_runs = [r for r in runs if r.stage_id == st["stage_id"]]
            if stage_runs:
                parts.append(_runs_table(ws, stage_runs, title=Text.from_markup(_stage_line(st))))
        return Group(*parts)

    if args.once:
        Console().print(frame())
        return 0
    try:
        with Live(frame(), refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(frame())
    except KeyboardInterrupt:
        return 0


def cmd_attempts(args) -> int:
    from rich.console import Console
    from rich.table import Table

    ws = _ws(args)
    t = Table(title=f"run {args.run} attempts")
    for col in ("#", "state", "host/slot", "failure", "exit", "fix", "reason", "retry of"):
        t.add_column(col, overflow="fold")
    for a in ws.attempts(args.run):
        t.add_row(
            str(a.number),
            a.state,
            f"{a.host}/{a.slot}",
            a.failure_kind or "",
            "" if a.exit_code is None else str(a.exit_code),
            a.fix or "",
            a.reason,
            str(a.retry_of or ""),
        )
    Console().print(t)
    return 0


def cmd_hosts(args) -> int:
    from rich.console import Console
    from rich.table import Table

    ws = _ws(args)
    statuses = ws.host_status()
    if args.json:
        print(json.dumps([s.__dict__ for s in statuses], indent=2))
        return 0
    t = Table(title="hosts")
    for col in ("host", "kind", "reachable", "free", "busy", "slots"):
        t.add_column(col, overflow="fold")
    for s in statuses:
        busy = {k: v for k, v in s.slots.items() if v is not None}
        t.add_row(
            s.name,
            s.kind,
            "yes" if s.reachable else f"[red]no[/] {s.error[:60]}",
            str(len(s.slots) - len(busy)),
            str(len(busy)),
            ", ".join(f"{k}:{'run ' + str(v) if v else 'free'}" for k, v in s.slots.items()),
        )
    Console().print(t)
    return 0


# -- logs, attach, cancel, retry ------------------------------------------------------------------------
def cmd_logs(args) -> int:
    ws = _ws(args)
    print(ws.logs(args.run, attempt=args.attempt, lines=args.lines), end="" if args.follow else "\n")
    if not args.follow:
        return 0
    from a3r.hosts import LocalHost

    a = ws._attempt(args.run, args.attempt)
    host = ws.hosts[a.host]
    if not isinstance(host, LocalHost):
        os.execvp("ssh", host.ssh_argv(f"tail -n 0 -F {a.attempt_dir}/log.txt"))
    path = Path(a.attempt_dir) / "log.txt"
    pos = path.stat().st_size if path.exists() else 0
    try:
        while True:
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                    pos += len(chunk)
                sys.stdout.write(chunk.decode("utf-8", "replace"))
                sys.stdout.flush()
            if ws.store.get_attempt(a.id).state not in ("dispatched", "running"):
                return 0
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


def cmd_attach(args) -> int:
    ws = _ws(args)
    argv = ws.attach_argv(args.run, attempt=args.attempt)
    if args.print:
        print(" ".join(argv))
        return 0
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}  # attach even from inside another tmux
    os.execvpe(argv[0], argv, env)
    return 0  # not reached


def cmd_cancel(args) -> int:
    from a3r.states import RUN_TERMINAL

    ws = _ws(args)
    ids = args.runs or ([r.id for r in ws.runs() if r.state not in RUN_TERMINAL] if args.all else [])
    if not ids:
        return _fail("give run ids or --all")
    killed = ws.cancel(ids, reason=args.reason)
    print(f"cancelled runs {ids}; killed attempts {killed}")
    return 0


def _parse_sets(sets: list[str]) -> dict:
    from a3r.cli_values import parse_value

    out: dict = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set needs key.path=value, got {item!r}")
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parse_value(value)
    return out


def cmd_retry(args) -> int:
    ws = _ws(args)
    run = ws.retry(args.run, overrides=_parse_sets(args.set), reason=args.reason)
    print(f"run {run.id} -> {run.state}")
    return 0


# -- processes ------------------------------------------------------------------------------------------
def cmd_monitor(args) -> int:
    from a3r.exceptions import LeaseHeld

    ws = _ws(args)
    try:
        return ws.monitor().run(exit_when_idle=args.exit_when_idle, max_ticks=1 if args.once else None)
    except LeaseHeld as e:
        return _fail(str(e), 2)
    finally:
        ws.close()


def cmd_dashboard(args) -> int:
    from a3r.dashboard import build_config, serve

    swarm = [{"url": u, "token": args.swarm_token} for u in args.swarm]
    serve(
        build_config(
            workspace=args.workspace,
            db=args.db,
            reports_dir=args.reports,
            swarm=swarm,
            host=args.host,
            port=args.port,
            token=args.token,
        )
    )
    return 0


def cmd_worker_run(args) -> int:
    from a3r.worker.runner import EXIT_BAD_SPEC, Worker
    from a3r.worker.sinks import FileSink, StoreSink
    from a3r.worker.spec import AttemptSpec

    try:
        spec = AttemptSpec.read(args.attempt_dir)
    except (OSError, ValueError) as e:
        return _fail(f"cannot read attempt spec in {args.attempt_dir}: {e}", EXIT_BAD_SPEC)
    if spec.run_id != args.run_id:
        return _fail(f"{args.attempt_dir} belongs to run {spec.run_id}, not {args.run_id}", EXIT_BAD_SPEC)
    sink = StoreSink(spec.db_path, spec.attempt_id) if spec.db_path else FileSink()
    return Worker(spec, sink).run()


def build_parser(*, with_leader: bool = True, goal_submit: bool = False) -> argparse.ArgumentParser:
    """The `a3r` parser. `with_leader=False` skips importing a3r.leader (its graph stack is heavy): the
    worker, started once per attempt, must start fast. `goal_submit=True` makes `submit` the leader's
    goal form (`a3r submit --goal "<goal>"`, the same as `research`) instead of the blueprint form."""
    p = argparse.ArgumentParser(
        prog="a3r", description="A3R execution plane: runs, hosts, tmux workers, scheduler."
    )
    p.add_argument(
        "--workspace", "-w", default=os.environ.get("A3R_WORKSPACE", "."), help="campaign workspace dir"
    )
    p.add_argument("--db", default=None, help="store file (default <workspace>/.a3r/a3r.db)")
    # the same options are accepted after the command too (`a3r runs -w DIR`); SUPPRESS keeps the
    # top-level value when they are not repeated there
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", "-w", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", required=True)
    _add = sub.add_parser
    sub.add_parser = lambda *a, **kw: _add(*a, parents=[common], **kw)  # type: ignore[method-assign]

    s = sub.add_parser("init", help="write a3r.yaml (local host) and create the store")
    s.add_argument("--local-slots", type=int, default=1)
    s.add_argument("--heartbeat", type=float, default=10.0)
    s.set_defaults(fn=cmd_init)

    if not goal_submit:
        s = sub.add_parser(
            "submit",
            help='add blueprint YAML files as runs (one per seed); `submit --goal "<goal>"` runs a campaign',
            usage="%(prog)s [-h] [--campaign C] [--stage S] [--priority P] [--start-monitor] BLUEPRINT.yaml ...\n"
            '       %(prog)s --goal "<goal>" [research options]',
            description='Add blueprint YAML files as runs of one stage. `a3r submit --goal "<goal>"` runs a '
            'research campaign instead, the same as `a3r research "<goal>"` (options: a3r research -h).',
        )
        s.add_argument("blueprints", nargs="*", metavar="BLUEPRINT.yaml")
        s.add_argument("--campaign", default="default")
        s.add_argument("--stage", default="stage-0")
        s.add_argument("--priority", type=int, default=0)
        s.add_argument("--start-monitor", action="store_true", help="start a background monitor too")
        s.add_argument("--demo", action="store_true", help="the end-to-end demo (needs the leader)")
        s.set_defaults(fn=cmd_submit)

    s = sub.add_parser("runs", help="table of runs")
    s.add_argument("--campaign")
    s.add_argument("--state", action="append", help="filter by state (repeatable)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_runs)

    s = sub.add_parser("status", help="summary: monitor, run counts, hosts, recent failures")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("watch", help="live table with progress per run")
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--once", action="store_true", help="print one frame and exit")
    s.set_defaults(fn=cmd_watch)

    s = sub.add_parser("attempts", help="attempt history of a run")
    s.add_argument("run", type=int)
    s.set_defaults(fn=cmd_attempts)

    s = sub.add_parser("hosts", help="hosts with live reachability and free/busy slots")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_hosts)

    s = sub.add_parser("logs", help="log tail of a run's latest (or given) attempt")
    s.add_argument("run", type=int)
    s.add_argument("--attempt", type=int)
    s.add_argument("-n", "--lines", type=int, default=100)
    s.add_argument("-f", "--follow", action="store_true")
    s.set_defaults(fn=cmd_logs)

    s = sub.add_parser("attach", help="attach to the run's tmux session")
    s.add_argument("run", type=int)
    s.add_argument("--attempt", type=int)
    s.add_argument("--print", action="store_true", help="print the attach command instead of running it")
    s.set_defaults(fn=cmd_attach)

    s = sub.add_parser("cancel", help="cancel runs")
    s.add_argument("runs", type=int, nargs="*")
    s.add_argument("--all", action="store_true", help="every unfinished run")
    s.add_argument("--reason", default="cancelled from the CLI")
    s.set_defaults(fn=cmd_cancel)

    s = sub.add_parser("retry", help="send a failed/timed-out/stale run back to pending")
    s.add_argument("run", type=int)
    s.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="engine config override"
    )
    s.add_argument("--reason", default="retry from the CLI")
    s.set_defaults(fn=cmd_retry)

    s = sub.add_parser("monitor", help="run the scheduler/monitor loop (one per workspace)")
    s.add_argument("--once", action="store_true", help="one tick, then exit")
    s.add_argument("--exit-when-idle", action="store_true", help="exit when no run is pending or running")
    s.set_defaults(fn=cmd_monitor)

    s = sub.add_parser(
        "dashboard",
        help="read-only web dashboard: campaigns, runs, live curves, reports, swarm servers, benchmarks",
        description="Serve a read-only web dashboard over the workspace's store and those of its campaigns "
        "(<workspace>/*/ and <workspace>/campaigns/*/), and over swarm servers given with --swarm.",
    )
    s.add_argument("--host", default="127.0.0.1", help="bind address (default loopback; others need --token)")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument(
        "--token",
        default=os.environ.get("A3R_DASHBOARD_TOKEN"),
        help="access token, 16+ characters (default $A3R_DASHBOARD_TOKEN); required off loopback",
    )
    s.add_argument("--reports", default="reports", help="where campaign reports are (default ./reports)")
    s.add_argument(
        "--swarm", action="append", default=[], metavar="URL", help="a swarm server to show (repeatable)"
    )
    s.add_argument(
        "--swarm-token",
        default=os.environ.get("SWARM_ADMIN_TOKEN"),
        help="the swarm servers' admin token (default $SWARM_ADMIN_TOKEN)",
    )
    s.set_defaults(fn=cmd_dashboard)

    w = sub.add_parser("worker", help="worker commands (started by the scheduler inside tmux)")
    wsub = w.add_subparsers(dest="wcmd", required=True)
    s = wsub.add_parser("run", help="execute one attempt")
    s.add_argument("run_id", type=int)
    s.add_argument("--attempt-dir", required=True)
    s.set_defaults(fn=cmd_worker_run)

    from a3r.bench.cli import add_bench_commands  # stdlib-only at import: the worker still starts fast

    add_bench_commands(sub, parents=[common])

    if with_leader:
        try:  # the leader's commands (research, resume, demo), registered when a3r.leader is present
            from a3r.leader.cli_commands import add_leader_commands
        except ImportError:
            pass
        else:
            add_leader_commands(sub, goal_submit=goal_submit)
    return p


_OWN = {
    "init",
    "submit",
    "runs",
    "status",
    "watch",
    "attempts",
    "hosts",
    "logs",
    "attach",
    "cancel",
    "retry",
    "monitor",
    "dashboard",
    "worker",
    "bench",
}


def _command_at(argv: list[str]) -> int | None:
    """The index of the command word in `argv` (skipping the global options and their values)."""
    skip = False
    for i, tok in enumerate(argv):
        if skip:
            skip = False
        elif tok in ("--workspace", "-w", "--db"):
            skip = True
        elif not tok.startswith("-"):
            return i
    return None


def _command_of(argv: list[str]) -> str | None:
    """The command word of `argv` (skipping the global options and their values)."""
    at = _command_at(argv)
    return None if at is None else argv[at]


def _goal_submit(argv: list[str]) -> bool:
    """Whether the command is `a3r submit --goal ...`, the leader's goal form of submit. Only the explicit
    option selects it: an argument that is not a blueprint file is an error, never a goal."""
    at = _command_at(argv)
    if at is None or argv[at] != "submit":
        return False
    return any(tok == "--goal" or tok.startswith("--goal=") for tok in argv[at + 1 :])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    goal = _goal_submit(argv)
    args = build_parser(with_leader=goal or _command_of(argv) not in _OWN, goal_submit=goal).parse_args(argv)
    from a3r.exceptions import A3RError

    if args.cmd == "bench":  # its own exit codes: 1 means a confirmed regression, errors are 2
        from a3r.bench.cli import run_bench_command

        return run_bench_command(args)
    try:
        return args.fn(args)
    except (A3RError, ValueError) as e:
        return _fail(str(e))
    except OSError as e:
        if e.filename is None:
            raise  # not a path the user gave: a bug, keep its trace
        return _fail(f"{e.filename}: {e.strerror}; give a writable --workspace")
