"""`swarm top`: a live rich table of a server's state, episodes, pool fill and last training step."""

from __future__ import annotations

import signal
import threading

import httpx
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
    """Show the server's status, refreshed every `interval` seconds until Ctrl-C (or once).

    A server that stops answering (stopped, killed, restarting) or refuses the token is shown as such
    and polled again: `top` outlives the server it watches.
    """
    client = SwarmClient(url, admin_token=token, timeout=10.0)  # a hung server must not freeze the view
    if once:
        from rich.console import Console

        Console().print(render_status(client.status()))
        return
    # Ctrl-C sets a flag the loop checks, rather than raising KeyboardInterrupt wherever the main thread
    # happens to be (inside rich's lock, say, which then deadlocks the exit): the view always closes.
    stop = threading.Event()
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    except ValueError:  # not the main thread: no handler of ours, Ctrl-C is the caller's business
        previous = None
    try:
        with Live(_frame(client, url), refresh_per_second=4) as live:
            while not stop.wait(interval):
                live.update(_frame(client, url))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _frame(client: SwarmClient, url: str):
    try:
        return render_status(client.status())
    except SwarmHTTPError as e:  # a wrong token, say
        return f"[red]{url} refused the status request: {e}"
    except httpx.HTTPError as e:  # httpx's transport errors are not OSErrors
        return f"[red]cannot reach {url}: {e}"
