"""`swarm dashboard`: the dashboard pointed at one swarm server. The engine's CLI finds this command through the
entry-point group `swarm.commands` (pyproject.toml), so the engine never imports a3r."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["add_swarm_dashboard"]


def add_swarm_dashboard(sub: argparse._SubParsersAction) -> None:
    """Add `dashboard` to the `swarm` command's subcommands."""
    d = sub.add_parser("dashboard", help="web dashboard of a server: state, pool fill, throughput, pooled episodes at token level")
    d.add_argument("--url", default="http://127.0.0.1:10086", help="the swarm server to show")
    d.add_argument("--token", help="its admin token (default $SWARM_ADMIN_TOKEN)")
    d.add_argument("--workspace", default=".", help="A3R workspace whose campaigns are shown too (default .)")
    d.add_argument("--host", default="127.0.0.1", help="dashboard bind address (default loopback; others need --dashboard-token)")
    d.add_argument("--port", type=int, default=8765)
    d.add_argument("--dashboard-token", default=os.environ.get("A3R_DASHBOARD_TOKEN"), help="access token of the dashboard itself")
    d.set_defaults(fn=_cmd_dashboard)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from a3r.dashboard import build_config, serve
    from a3r.exceptions import ConfigError

    token = args.token or os.environ.get("SWARM_ADMIN_TOKEN")
    try:
        cfg = build_config(
            workspace=args.workspace,
            swarm=[{"url": args.url, "token": token}],
            host=args.host,
            port=args.port,
            token=args.dashboard_token,
        )
    except ConfigError as e:
        print(f"swarm: {e}", file=sys.stderr)
        return 2
    serve(cfg)
    return 0
