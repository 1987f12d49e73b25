"""The scheduler/monitor tick: observe hosts, detect lost attempts, settle runs, dispatch to free slots.

One `tick()` does, in order (each step in its own short store transactions):

1. probe every host concurrently (one tmux listing + attempt files per host; one ssh round trip remote);
2. observe each active attempt: ingest what an ssh worker wrote (heartbeat, metrics, result), then
   detect loss: a vanished session or dead pane without a result -> stale at once; heartbeat silence
   longer than `stale_after` (2 heartbeats by default; `start_grace_s` before the first) -> fence (kill
   the job's process group and the worker) and stale; a host unreachable for longer than `stale_after`
   -> its attempts stale (they are fenced when the host comes back);
3. reap tmux sessions that no active attempt owns (live ones immediately: that is the fence for a host
   that was unreachable; finished ones after `session_linger_s`);
4. settle every run whose current attempt ended: success; infrastructure failure -> retry from the
   run's checkpoint dir after exponential backoff, up to `max_infra_retries`; OOM/NaN -> retry at once
   with a rule fix (`a3r.fixes`) up to `max_fix_retries`; timeout, code errors and exhausted retries
   -> final, for the caller;
5. dispatch pending runs (priority, then FIFO) to free slots on reachable hosts, one run per slot.

The store is the source of truth; tmux sessions are containers. Every state change is fenced in the
store, so a crash between any two steps loses nothing: the next tick (of this or a new monitor) sees
a dispatched attempt without a session, or an unsettled run, and carries on.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from a3r.blueprints.render import render_files
from a3r.blueprints.schema import canonical_json
from a3r.config import SchedulerConfig, SlotSpec
from a3r.exceptions import HostError
from a3r.fixes import propose_fix
from a3r.hosts.base import AttemptFiles, HostBackend, ProbeReport, ProbeRequest, SessionInfo
from a3r.states import AttemptState, FailureKind, RunState
from a3r.store import Attempt, Run, Store
from a3r.worker.spec import AttemptSpec

__all__ = ["Scheduler", "TickReport"]

_SESSION = re.compile(r"^a3r-r\d+-a\d+$")


@dataclass
class TickReport:
    """What one tick did; ids are store ids."""

    dispatched: list[int] = field(default_factory=list)  # run ids
    lost: list[tuple[int, str]] = field(default_factory=list)  # (attempt id, reason) declared stale
    settled: list[tuple[int, str]] = field(default_factory=list)  # (run id, new run state)
    reaped: list[str] = field(default_factory=list)  # "host/session"
    unreachable: list[str] = field(default_factory=list)  # host names


class Scheduler:
    """Stateless between ticks except for caches; any number of restarts is safe (one at a time: lease)."""

    def __init__(
        self, store: Store, hosts: dict[str, HostBackend], config: SchedulerConfig, *, clock=time.time
    ):
        self.store = store
        self.hosts = hosts
        self.config = config
        self.clock = clock
        self._host_seen: dict[str, tuple[bool, float]] = {}  # host -> (reachable, last recorded)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(hosts)), thread_name_prefix="a3r-probe")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the tick -----------------------------------------------------------------------------------------
    def tick(self) -> TickReport:
        rep = TickReport()
        active = self.store.active_attempts()
        by_host: dict[str, list[Attempt]] = {h: [] for h in self.hosts}
        orphans: list[Attempt] = []  # active on a host that left the inventory
        for a in active:
            (by_host[a.host] if a.host in by_host else orphans).append(a)
        reports = self._probe_all(by_host, rep)
        now = self.clock()
        for name, attempts in by_host.items():
            for a in attempts:
                self._observe(a, self.hosts[name], reports[name], now, rep)
        for a in orphans:
            self._lose_if_silent(a, now, f"host {a.host} is no longer in the inventory", rep)
        for name, report in reports.items():
            if report is not None:
                self._reap(self.hosts[name], report, now, rep)
        self._settle(rep)
        self._dispatch(reports, rep)
        return rep

    def _host_status(self, name: str, reachable: bool, error: str) -> None:
        """Record reachability on change, else at most once per heartbeat (keeps writes off the hot path)."""
        now = self.clock()
        last = self._host_seen.get(name)
        if last is None or last[0] != reachable or now - last[1] >= self.config.heartbeat_s:
            self.store.set_host_status(name, reachable=reachable, error=error, now=now)
            self._host_seen[name] = (reachable, now)

    def _probe_all(self, by_host: dict[str, list[Attempt]], rep: TickReport) -> dict[str, ProbeReport | None]:
        def one(name: str) -> ProbeReport | None:
            host = self.hosts[name]
            remote = host.worker_db_path() is None  # an ssh worker cannot write the store: we ingest
            reqs = [
                ProbeRequest(a.id, a.attempt_dir, a.metrics_offset if remote else None) for a in by_host[name]
            ]
            try:
                report = host.probe(reqs)
            except (HostError, OSError) as e:
                self._host_status(name, False, str(e))
                return None
            self._host_status(name, True, "")
            return report

        futures = {name: self._pool.submit(one, name) for name in self.hosts}
        reports = {name: f.result() for name, f in futures.items()}
        rep.unreachable = [n for n, r in reports.items() if r is None]
        return reports

    # -- observation and loss detection -------------------------------------------------------------------
    def _observe(
        self, a: Attempt, host: HostBackend, report: ProbeReport | None, now: float, rep: TickReport
    ) -> None:
        if report is None:
            self._lose_if_silent(a, now, f"host {a.host} unreachable", rep)
            return
        files = report.files.get(a.id) or AttemptFiles(heartbeat=None, result=None)
        if host.worker_db_path() is None:
            self._ingest_remote(a, files, now)
        result = _valid_result(files.result, a.id)
        sess = report.sessions.get(a.session)
        if result is not None and (sess is None or sess.dead or host.worker_db_path() is None):
            # the worker wrote its result file; on a local host it normally also wrote the store, and
            # this finish is a no-op; it matters when the worker died between the two writes
            self._finish_from_result(a, result)
            return
        if sess is None:
            self._lose(a, host, sess, "tmux session vanished (killed, or never started)", rep)
        elif sess.dead:
            self._lose(
                a, host, sess, f"worker exited with status {sess.status} without recording a result", rep
            )
        else:
            self._check_heartbeat(a, host, sess, now, rep)

    def _ingest_remote(self, a: Attempt, files: AttemptFiles, now: float) -> None:
        hb = files.heartbeat
        if (
            hb
            and hb.get("attempt_id") == a.id
            and isinstance(hb.get("seq"), int)
            and hb["seq"] > a.heartbeat_seq
        ):
            if a.state == AttemptState.DISPATCHED:
                self.store.mark_running(a.id, worker_pid=hb.get("worker_pid"), now=now)
            pgid = hb.get("job_pgid")
            # the controller's clock, not the host's: clock skew must not make attempts look stale
            self.store.heartbeat(
                a.id, now=now, seq=hb["seq"], job_pgid=pgid if isinstance(pgid, int) else None
            )
            a.heartbeat_at, a.heartbeat_seq = now, hb["seq"]
        if files.new_offset is not None and (
            files.points or files.corrupt or files.new_offset != a.metrics_offset
        ):
            self.store.ingest_metrics(
                a.id,
                files.points,
                expected_offset=a.metrics_offset,
                new_offset=files.new_offset,
                corrupt=files.corrupt,
                now=now,
            )

    def _finish_from_result(self, a: Attempt, r: dict) -> None:
        kind = r.get("failure_kind")
        kind = kind if kind in {k.value for k in FailureKind} else None
        if r["state"] == AttemptState.FAILED and kind is None:
            kind = FailureKind.CODE_ERROR.value
        self.store.finish_attempt(
            a.id,
            r["state"],
            exit_code=r.get("exit_code") if isinstance(r.get("exit_code"), int) else None,
            failure_kind=kind,
            reason=str(r.get("reason", ""))[:2000],
            log_tail=str(r.get("log_tail", ""))[-20000:],
        )

    def _check_heartbeat(
        self, a: Attempt, host: HostBackend, sess: SessionInfo, now: float, rep: TickReport
    ) -> None:
        limit = self.config.stale_after if a.heartbeat_at is not None else self.config.start_grace_s
        last = a.heartbeat_at if a.heartbeat_at is not None else a.dispatched_at
        if now - last <= limit:
            return
        fresh = self.store.get_attempt(a.id)  # a local worker may have beaten since our snapshot
        if fresh.state not in ("dispatched", "running"):
            return
        last = fresh.heartbeat_at if fresh.heartbeat_at is not None else fresh.dispatched_at
        if now - last > limit:
            what = "heartbeat" if fresh.heartbeat_at is not None else "worker start"
            self._lose(fresh, host, sess, f"no {what} for {now - last:.1f} s (limit {limit:g} s)", rep)

    def _lose_if_silent(self, a: Attempt, now: float, why: str, rep: TickReport) -> None:
        last = a.heartbeat_at if a.heartbeat_at is not None else a.dispatched_at
        limit = self.config.stale_after if a.heartbeat_at is not None else self.config.start_grace_s
        if now - last > limit:
            self._lose(a, None, None, f"{why}; silent for {now - last:.1f} s", rep)

    def _lose(
        self, a: Attempt, host: HostBackend | None, sess: SessionInfo | None, reason: str, rep: TickReport
    ) -> None:
        """Mark the attempt stale and fence it: kill whatever may still run (a killed pane's worker may
        still be stopping its job, a hung worker's job may still be training), so the retry never
        overlaps it. Detection is prompt, so the recorded pgid is still the job's, not a recycled id."""
        if not self.store.finish_attempt(
            a.id, AttemptState.STALE, failure_kind=FailureKind.INFRASTRUCTURE.value, reason=reason
        ):
            return  # its worker recorded a result first: nothing was lost
        rep.lost.append((a.id, reason))
        # closed first, killed second: the worker's own report of the kill (a SIGKILLed job looks like
        # an OOM) is then refused by the fence instead of misclassifying the loss. The run is retried
        # only when this tick settles it, after the kill.
        if host is not None:
            pgid = self.store.get_attempt(a.id).job_pgid  # fresher than the tick's snapshot
            try:
                host.kill(a.session, pgid=pgid, pid=sess.pid if sess is not None and not sess.dead else None)
                self._catch_up_metrics(a, host)
            except (HostError, OSError):
                pass  # unreachable now: the reaper fences it when the host answers again

    def _catch_up_metrics(self, a: Attempt, host: HostBackend) -> None:
        """Ingest the metric lines a lost local worker had not streamed yet (the job is dead now, so the
        file is complete): the retry resumes after the job's last checkpoint, and those steps would
        otherwise be missing from the run's series. Remote attempts were ingested by this tick's probe."""
        if host.worker_db_path() is None:
            return
        offset = self.store.get_attempt(a.id).metrics_offset
        files = host.probe([ProbeRequest(a.id, a.attempt_dir, offset)]).files.get(a.id)
        if files is not None and files.new_offset is not None and files.new_offset != offset:
            self.store.ingest_metrics(
                a.id, files.points, expected_offset=offset, new_offset=files.new_offset, corrupt=files.corrupt
            )

    # -- reaping ------------------------------------------------------------------------------------------
    def _reap(self, host: HostBackend, report: ProbeReport, now: float, rep: TickReport) -> None:
        ours = [n for n in report.sessions if _SESSION.match(n)]
        owners = self.store.attempts_by_session(host.name, ours)
        for name in ours:
            sess, att = report.sessions[name], owners.get(name)
            if att is not None and att.state in ("dispatched", "running"):
                continue
            if sess.dead and att is not None and now - (att.ended_at or 0) < self.config.session_linger_s:
                continue  # keep a finished pane a while for `a3r attach`
            if (
                not sess.dead
                and att is not None
                and att.state in ("succeeded", "failed", "timed_out")
                and now - (att.ended_at or 0) < self.config.stale_after
            ):
                continue  # its worker recorded the result and is exiting on its own
            pgid = att.job_pgid if (att is not None and not sess.dead) else None
            try:
                host.kill(name, pgid=pgid, pid=None if sess.dead else sess.pid)
            except (HostError, OSError):
                continue
            rep.reaped.append(f"{host.name}/{name}")
            if not sess.dead:
                self.store.record_event(
                    "reaped",
                    f"killed live session {name} of a closed attempt on {host.name}",
                    run_id=att.run_id if att else None,
                    attempt_id=att.id if att else None,
                    host=host.name,
                )

    # -- settling -----------------------------------------------------------------------------------------
    def _settle(self, rep: TickReport) -> None:
        for run, att in self.store.unsettled():
            decision = self._decide(run, att)
            if self.store.settle_run(run.id, att.id, decision.pop("state"), **decision):
                rep.settled.append((run.id, self.store.get_run(run.id).state))

    def _decide(self, run: Run, att: Attempt) -> dict:
        cfg, now = self.config, self.clock()
        history = self.store.attempts(run.id)
        if att.state == AttemptState.SUCCEEDED:
            return {"state": RunState.SUCCEEDED, "message": f"attempt {att.number} succeeded"}
        if att.state == AttemptState.CANCELLED:
            return {"state": RunState.CANCELLED, "message": att.reason or "cancelled"}
        if att.state == AttemptState.TIMED_OUT:
            return {
                "state": RunState.TIMED_OUT,
                "failure_kind": FailureKind.TIMEOUT.value,
                "message": att.reason,
            }
        kind = att.failure_kind or FailureKind.CODE_ERROR.value
        if att.state == AttemptState.STALE or kind == FailureKind.INFRASTRUCTURE:
            n = sum(
                1
                for h in history
                if h.state == AttemptState.STALE or h.failure_kind == FailureKind.INFRASTRUCTURE
            )
            if n <= cfg.max_infra_retries:
                delay = min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (n - 1))
                return {
                    "state": RunState.PENDING,
                    "not_before": now + delay,
                    "next_fix": f"retry {n}/{cfg.max_infra_retries} after infrastructure failure, from checkpoint",
                    "message": f"retry {n}/{cfg.max_infra_retries} in {delay:g} s: {att.reason}",
                }
            final = RunState.STALE if att.state == AttemptState.STALE else RunState.FAILED
            return {
                "state": final,
                "failure_kind": FailureKind.INFRASTRUCTURE.value,
                "message": f"gave up after {n} infrastructure failures: {att.reason}",
            }
        if kind in (FailureKind.OOM, FailureKind.NAN_DIVERGENCE):
            n = sum(
                1
                for h in history
                if h.failure_kind in (FailureKind.OOM.value, FailureKind.NAN_DIVERGENCE.value)
            )
            fix = propose_fix(kind, json.loads(att.config_json)) if n <= cfg.max_fix_retries else None
            if fix is not None:
                name, overrides, desc = fix
                return {
                    "state": RunState.PENDING,
                    "not_before": now,
                    "overrides": overrides,
                    "next_fix": f"{kind}: {name} ({desc})",
                    "message": f"retry with fix after {kind}: {desc}",
                }
            why = "no rule fix applies" if n <= cfg.max_fix_retries else f"{n - 1} fixes did not help"
            return {"state": RunState.FAILED, "failure_kind": kind, "message": f"{kind}, {why}: {att.reason}"}
        return {"state": RunState.FAILED, "failure_kind": kind, "message": f"{kind}: {att.reason}"}

    # -- dispatch -----------------------------------------------------------------------------------------
    def free_slots(self, reachable: set[str] | None = None) -> list[tuple[str, SlotSpec]]:
        """(host, slot) not held by an active attempt, in inventory order."""
        busy = {(a.host, a.slot) for a in self.store.active_attempts()}
        return [
            (name, s)
            for name, host in self.hosts.items()
            if reachable is None or name in reachable
            for s in host.spec.slots
            if (name, s.name) not in busy
        ]

    def _dispatch(self, reports: dict[str, ProbeReport | None], rep: TickReport) -> None:
        reachable = {n for n, r in reports.items() if r is not None}
        free = self.free_slots(reachable)
        if not free:
            return
        runs = self.store.dispatchable_runs(self.clock(), limit=len(free))
        for run, (host_name, slot) in zip(runs, free, strict=False):  # fewer runs than slots is fine
            if host_name not in reachable:  # went down during this dispatch round
                continue
            if self._launch(run, self.hosts[host_name], slot, reachable):
                rep.dispatched.append(run.id)

    def _launch(self, run: Run, host: HostBackend, slot: SlotSpec, reachable: set[str]) -> bool:
        bp = self.store.blueprint_of(run)
        overrides = json.loads(run.overrides)
        run_dir = host.run_dir(run.id)
        config = bp.effective_config(run.seed, overrides)
        att = self.store.dispatch(
            run.id,
            host=host.name,
            slot=slot.name,
            run_dir=run_dir,
            config_json=canonical_json(config),
            now=self.clock(),
        )
        if att is None:
            return False
        cfg = self.config
        spec = AttemptSpec(
            run_id=run.id,
            attempt_id=att.id,
            attempt_number=att.number,
            run_dir=run_dir,
            attempt_dir=att.attempt_dir,
            seed=run.seed,
            budget_steps=bp.budget.steps,
            env=slot.job_env(),
            wall_time_s=bp.budget.wall_time_s,
            heartbeat_s=cfg.heartbeat_s,
            kill_grace_s=cfg.kill_grace_s,
            log_tail_lines=cfg.log_tail_lines,
            db_path=host.worker_db_path(),
        )
        files = render_files(bp, run_id=run.id, seed=run.seed, run_dir=run_dir, overrides=overrides)
        try:
            host.launch(att.session, spec, files)
        except (HostError, OSError) as e:
            # the attempt never ran: an infrastructure failure, retried with backoff like any other
            self.store.finish_attempt(
                att.id,
                AttemptState.FAILED,
                failure_kind=FailureKind.INFRASTRUCTURE.value,
                reason=f"launch failed: {e}",
            )
            reachable.discard(host.name)
            return False
        return True


_RESULT_STATES = {AttemptState.SUCCEEDED.value, AttemptState.FAILED.value, AttemptState.TIMED_OUT.value}


def _valid_result(r: dict | None, attempt_id: int) -> dict | None:
    """A worker's result.json if it is one (right attempt, a final state the worker may report); a file
    clobbered by the job or a stale copy is ignored, and the attempt is then judged by its pane."""
    if not r or r.get("attempt_id") != attempt_id or r.get("state") not in _RESULT_STATES:
        return None
    return r
