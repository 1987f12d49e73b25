"""`swarm top`: a live rich table of a server's state, episodes, pool fill and last training step."""

from __future__ import annotations

import time

from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from engine.client.client import SwarmClient, SwarmHTTPError


def render_status(st: dict) -> Group:
    pool = st["pool"]
    head = Table(title=f"swarm server: {st['state']}  model={st['model']}  step={st['global_step']}", expand=True)
    for col in ("live train", "live eval", "ended", "aborted", "expired", "pool episodes", "complete tasks"):
        head.add_column(col, justify="right")
    counts = st["episode_counts"]
    head.add_row(
        str(st["episodes_live"]), str(st["episodes_live_eval"]), str(counts.get("ended", 0)), str(counts.get("aborted", 0)),
        str(counts.get("expired", 0)), str(pool["episodes"]), f"{pool['complete_tasks']}/{pool['target_tasks']}",
    )
    fill = min(pool["complete_tasks"], pool["target_tasks"])
    parts = [head, ProgressBar(total=max(1, pool["target_tasks"]), completed=fill)]
    by_client = pool.get("by_client") or {}
    last = st.get("last_metrics") or {}
    rewards = {k.removeprefix("reward/"): v for k, v in last.items() if k.startswith("reward/")}
    if len(set(by_client) | set(rewards)) > 1:  # a task mix (one client per task) or a collaboration group
        t = Table(title="per client (task)", expand=True)
        for col in ("client", "pool episodes", "last step reward"):
            t.add_column(col, justify="right" if col != "client" else "left")
        for c in sorted(set(by_client) | set(rewards)):
            t.add_row(c, str(by_client.get(c, 0)), f"{rewards[c]:.3f}" if c in rewards else "-")
        parts.append(t)
    if last:
        m = Table(title="last training step", expand=True)
        m.add_column("metric")
        m.add_column("value", justify="right")
        for k, v in sorted(last.items()):
            m.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
        parts.append(m)
    if st.get("groups_in_doubt"):
        parts.append(f"[yellow]episode groups prepared, awaiting their client's commit: {', '.join(st['groups_in_doubt'])}")
    if st.get("error"):
        parts.append(f"[red]error: {st['error']}")
    return Group(*parts)


def top(url: str, token: str | None, interval: float = 1.0, once: bool = False) -> None:
    client = SwarmClient(url, admin_token=token)
    if once:
        from rich.console import Console

        Console().print(render_status(client.status()))
        return
    with Live(render_status(client.status()), refresh_per_second=4) as live:
        while True:
            time.sleep(interval)
            try:
                live.update(render_status(client.status()))
            except (SwarmHTTPError, OSError) as e:
                live.update(f"[red]cannot reach {url}: {e}")
