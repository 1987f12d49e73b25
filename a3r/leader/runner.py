"""Run a campaign's leader graph to the end, parking between wake-ups, and resume it after a crash.

The graph is compiled with a `SqliteSaver` on `<workspace>/.a3r/leader.db` (never the run store's file)
and one thread per campaign (thread id = campaign name). While the graph is parked at the wait node's
`interrupt()`, this loop polls the store every `poll_s` (reads only) and resumes the graph with
`Command(resume=...)` when `should_wake` says so. A killed leader loses nothing: the checkpoint holds every
decision, the store every run, the background monitor keeps runs going meanwhile, and `resume_campaign`
calls `graph.invoke(None, config)`, which re-runs the interrupted node (idempotent by construction).
One leader per campaign at a time: an flock on `.a3r/leader-<campaign>.lock`, released even on SIGKILL.
"""

from __future__ import annotations

import fcntl
import os
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from pydantic import ValidationError

from a3r.api import Workspace
from a3r.leader.design import ResearchBudget
from a3r.leader.graph import build_graph
from a3r.leader.policy import Policy
from a3r.leader.state import LeaderConfig
from a3r.leader.waiting import ensure_monitor, should_wake

__all__ = ["CampaignError", "checkpoint_path", "continue_state", "resume_campaign", "run_campaign"]

Echo = Callable[[str], None]


class CampaignError(RuntimeError):
    """A campaign cannot be started or resumed as asked (name clash, nothing to resume)."""


def checkpoint_path(ws: Workspace) -> Path:
    """The leader's checkpoint database of a workspace (separate from the run store on purpose)."""
    return ws.root / ".a3r" / "leader.db"


def _thread(campaign: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": campaign}, "recursion_limit": 100}


def run_campaign(
    ws: Workspace,
    policy: Policy,
    config: LeaderConfig | None = None,
    *,
    campaign: str | None = None,
    timeout_s: float | None = None,
    echo: Echo | None = None,
    budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run (or continue) a campaign until its report is written; returns the final graph state.

    Give `config` to start one (starting an existing campaign with the same goal continues it), or only
    `campaign` to resume. `timeout_s` bounds this call; the campaign stays resumable after it. `budget`
    (ResearchBudget fields) continues a finished campaign with a larger budget (`continue_state`).
    """
    name = config.campaign if config is not None else campaign
    if not name:
        raise CampaignError("give a LeaderConfig to start a campaign, or a campaign name to resume one")
    say = echo or (lambda _msg: None)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    path = checkpoint_path(ws)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(path.parent / f"leader-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock", name)
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        app = build_graph(ws, policy).compile(checkpointer=saver)
        thread = _thread(name)
        snap = app.get_state(thread)
        if snap.values and "goal" not in snap.values and config is not None:
            saver.delete_thread(name)  # the goal was never understood: a corrected goal starts afresh
            snap = app.get_state(thread)
        if not snap.values:
            if config is None:
                raise CampaignError(f"no campaign {name!r} to resume in {path}; start it with a goal first")
            inp: Any = {"config": config.model_dump(mode="json")}
            say(f"campaign {name}: starting ({policy.name} policy)")
        else:
            stored = snap.values["config"]
            if config is not None and stored["goal"] != config.goal:
                raise CampaignError(
                    f"campaign {name!r} already exists with the goal {stored['goal']!r}; resume it or pick another name"
                )
            changed: list[str] = []
            if config is not None:
                new = config.model_dump(mode="json")
                changed = [c for key in RESULT_SETTINGS for c in config_changes(stored.get(key), new.get(key), f"{key}.")]
            if changed:
                # Answering with the stored campaign would pass its results off as the new options' answer.
                raise CampaignError(
                    f"campaign {name!r} already exists with other options ({'; '.join(changed)}); resume it as it "
                    "is (`a3r resume`), or submit the goal under a new --campaign name to run with the new ones"
                )
            if budget and config is not None:
                raise CampaignError("a larger budget continues a campaign: give it to `resume`, not with a goal")
            if budget and snap.next:
                raise CampaignError(
                    f"campaign {name!r} has not finished (next: {', '.join(snap.next)}); resume it without "
                    "--budget, and give a larger budget once it has ended"
                )
            if budget:
                # back to the analysis of the last stage, which plans on under the larger budget
                app.update_state(thread, continue_state(ws, snap.values, budget), as_node="wait")
                say(f"campaign {name}: continuing with {', '.join(f'{k}={v}' for k, v in budget.items())}")
            elif not snap.next:
                say(f"campaign {name}: already finished")
                return snap.values
            else:
                say(f"campaign {name}: resuming at {', '.join(snap.next)}")
            inp = None  # continue from the last checkpoint: re-runs the interrupted node
        while True:
            app.invoke(inp, thread)
            snap = app.get_state(thread)
            if not snap.next:
                say(f"campaign {name}: done; report {snap.values.get('report', {}).get('markdown')}")
                return snap.values
            if not snap.interrupts:
                raise CampaignError(f"campaign {name}: the graph stopped at {snap.next} without parking")
            _park(ws, snap.interrupts[0].value, snap.values, deadline, say)
            inp = Command(resume="wake")
    finally:
        conn.close()
        lock.close()  # releases the flock (the kernel does the same for a killed leader)


def continue_state(ws: Workspace, values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The state updates that reopen a finished campaign under a larger budget.

    The configured budget takes `overrides`; so does the budget the calibration sized (its seeds and steps
    stay, its run and wall limits become the new ones). The wall clock counts only the time the campaign
    ran (its first plan to its last finished attempt), not the time it sat finished. Every run in the
    store stays and is pooled: the next stage continues each arm's seed numbers.
    """
    cfg = LeaderConfig.model_validate(values["config"])
    try:
        new = ResearchBudget.model_validate({**cfg.budget.model_dump(), **overrides})
    except ValidationError as e:
        raise ValueError(f"--budget: {e.errors()[0]['msg']}") from None
    last = values["stages"][-1]["index"] if values.get("stages") else None
    update: dict[str, Any] = {
        "config": cfg.model_copy(update={"budget": new}).model_dump(mode="json"),
        # the last stage is analysed again: a calibration's measurement is taken anew, not twice
        "calibration": [c for c in values.get("calibration", []) if c["stage"] != last],
        "pending": None,
        "waiting": False,
        "status": "running",
        "continued": [*values.get("continued", []), {"at": time.time(), "budget": dict(overrides)}],
    }
    if values.get("budget"):
        limits = {k: getattr(new, k) for k in ("max_runs", "total_wall_s", "max_stages", "min_stages")}
        sized = {**values["budget"], **limits, **overrides}
        update["budget"] = ResearchBudget.model_validate(sized).model_dump(mode="json")
    ended = [
        a.ended_at
        for r in ws.runs(campaign_id=values["campaign_id"])
        for a in ws.attempts(r.id)
        if a.ended_at is not None
    ]
    started = values.get("started_at")
    if started is not None:
        used = max(0.0, max(ended, default=started) - started)
        update["started_at"] = time.time() - used
    return update
# The LeaderConfig settings that change a campaign's answer (where its report goes does not).
RESULT_SETTINGS = ("budget", "base_job", "metric")


def config_changes(stored: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted settings whose value differs between two configs' JSON, as `key: old -> new`."""
    if isinstance(stored, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(stored) | set(new), key=str):
            out += config_changes(stored.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if stored == new else [f"{prefix.rstrip('.')}: {stored!r} -> {new!r}"]


def _lock(path: Path, campaign: str) -> IO[str]:
    """Hold an exclusive flock for this campaign's leader, or raise CampaignError if another holds it.

    Two leaders on one thread would interleave checkpoints (SqliteSaver locks per process only).
    """
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise CampaignError(
            f"another leader (pid {holder}) is running campaign {campaign!r}; stop it first"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def resume_campaign(ws: Workspace, policy: Policy, campaign: str, **kw: Any) -> dict[str, Any]:
    """Continue a campaign whose leader was killed (same as `run_campaign(..., campaign=name)`)."""
    return run_campaign(ws, policy, campaign=campaign, **kw)


def _park(
    ws: Workspace, payload: dict[str, Any], values: dict[str, Any], deadline: float | None, say: Echo
) -> None:
    """Poll (reads only) until the parked graph has something to do."""
    cfg = LeaderConfig.model_validate(values["config"])
    poll_s = cfg.poll_s or ws.config.scheduler.tick
    last = None
    while not should_wake(ws, payload):
        counts = Counter(s.value for s in ws.poll_runs(payload["run_ids"]).states.values())
        line = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        if line != last:
            say(f"stage {payload['stage']}: {line}")
            last = line
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"stage {payload['stage']} still running ({line}); resume the campaign later")
        ensure_monitor(ws)
        time.sleep(poll_s)
