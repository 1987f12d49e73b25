"""Whole-loop probes of `vibe check`: the client's own `run()` against a scripted model.

The reward probes (vibe.reward_probes) call `reward.score` alone; a client can pass them and still train
nothing, because `run()` decides what reaches the reward: one that scores a constant instead of the
model's reply ("the constant-42 client"), or whose gold answer the model cannot write within
`max_tokens`. Here `run()` plays a few tasks (LOOP_TASKS) in the sandbox against
vibe.scripted_model, once per reply: the task's gold (cut to `max_tokens` tokens under the trained model's
tokenizer, as generation would cut it), garbage, an echo of the prompt, and each piece of the prompt
(numbers, quoted strings, sentences; at most MAX_SPANS). Then (`judge_loop`, pure):

- a reward that is the same for every reply on every probed task ignores the model's output: an error;
- gold must score at least gold_min; when the cut is what makes it fail, the error names the token budget;
- garbage and echo must score at most anti_gold_max, a piece of the prompt below gold_min;
- `run()` raising on some reply is an error with the reply and the frequency; a play that does not end
  within half of check.timeout_s (or episode_timeout_s) is named with its task.

A client with ROLES (a game) asks different things of its calls (describe, vote), so one fixed reply is
no gold for it: only "the reward ignores the output" and raising apply there.
"""

from __future__ import annotations

import json
import math
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vibe.config import VibeJob
from vibe.flags import Report, Severity, Stage
from vibe.netbridge import UnixToTcp
from vibe.reward_probes import ProbeLimits, anti_gold_responses, prompt_spans
from vibe.sandbox import SandboxLimits, limits_note, run_sandboxed
from vibe.scripted_model import Reply, ScriptedModelServer

__all__ = ["GoldBudget", "LOOP_TASKS", "LoopPlay", "judge_loop", "loop_probes", "plan_plays", "gold_budget"]

LOOP_TASKS = 3
MAX_SPANS = 6
GARBAGE = anti_gold_responses({"prompt": ""})["garbage"]


@dataclass(frozen=True)
class GoldBudget:
    """A gold answer measured against the reply budget: its token count and what generation would keep."""

    tokens: int
    kept: str  # the gold itself when it fits, else its first max_tokens tokens decoded
    cut: bool = False


def gold_budget(golds: list[str], model: str, max_tokens: int) -> tuple[list[GoldBudget], str | None]:
    """Each gold's token count under `model`'s tokenizer and the part of it that fits in `max_tokens`;
    and None, or why the tokenizer could not be loaded (then every gold is kept whole)."""
    try:
        from transformers import AutoTokenizer

        from engine.models.loader import resolve_tokenizer_dir

        tok = AutoTokenizer.from_pretrained(resolve_tokenizer_dir(model), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to load a tokenizer means "cannot measure"
        return [GoldBudget(0, g) for g in golds], f"{type(e).__name__}: {e}"
    out = []
    for g in golds:
        ids = tok.encode(g, add_special_tokens=False)
        if len(ids) <= max_tokens:
            out.append(GoldBudget(len(ids), g))
        else:
            out.append(GoldBudget(len(ids), tok.decode(ids[:max_tokens], skip_special_tokens=True), cut=True))
    return out, None


@dataclass
class LoopPlay:
    """One play of the whole-loop probes and, once played, its outcome."""

    task_id: str
    probe: str  # gold, garbage, echo, span_<i>
    reply: Reply
    rewards: dict[str, float] | None = None  # role ("" without ROLES) -> total
    error: str | None = None
    timed_out: bool = False
    calls: int = 0
    sent: str | None = None  # the scripted model's last reply to this play (None: it was never called)
    key: str = field(default_factory=lambda: "sk-probe-" + secrets.token_hex(16))


def plan_plays(tasks: list[dict[str, Any]], budgets: list[GoldBudget]) -> list[LoopPlay]:
    """The plays for `tasks`: gold (as kept within the budget, and whole too when the budget cuts it),
    garbage, echo, and each prompt span."""
    plays = []
    for t, b in zip(tasks, budgets, strict=True):
        tid = str(t["id"])
        plays += [LoopPlay(tid, "gold", Reply.fixed(b.kept)), LoopPlay(tid, "garbage", Reply.fixed(GARBAGE)),
                  LoopPlay(tid, "echo", Reply.echo())]
        if b.cut:
            plays.append(LoopPlay(tid, "gold_uncut", Reply.fixed(str(t["gold"]))))
        n_spans = min(len(prompt_spans(str(t.get("prompt", "")))), MAX_SPANS)
        plays += [LoopPlay(tid, f"span_{i}", Reply.span(i)) for i in range(n_spans)]
    return plays


def _tasks_to_probe(tasks: list[dict[str, Any]], budgets: list[GoldBudget]) -> list[int]:
    """The first LOOP_TASKS tasks, plus the one with the longest gold when that gold is cut (so an
    unreachable gold is probed even when the first tasks' golds fit)."""
    picked = list(range(min(LOOP_TASKS, len(tasks))))
    if budgets:
        longest = max(range(len(budgets)), key=lambda i: budgets[i].tokens)
        if budgets[longest].cut and longest not in picked:
            picked.append(longest)
    return picked


def loop_probes(root: Path, job: VibeJob, tasks: list[dict[str, Any]], report: Report) -> None:
    """Run the whole-loop probes of the client at `root` on `tasks` and add LOOP_PROBES flags to `report`."""
    tasks = [t for t in tasks if isinstance(t, dict) and "gold" in t and "id" in t]
    if not tasks:
        return
    budgets, why = gold_budget([str(t["gold"]) for t in tasks], job.swarm.model.name, job.max_tokens)
    if why:
        report.add(Stage.LOOP_PROBES, "tokenizer_unavailable", Severity.WARNING,
                   f"could not load {job.swarm.model.name!r}'s tokenizer to check the gold answers fit max_tokens "
                   f"({why}); probed with whole gold answers")
    report.stats["gold_tokens_max"] = max(b.tokens for b in budgets)
    picked = _tasks_to_probe(tasks, budgets)
    plays = plan_plays([tasks[i] for i in picked], [budgets[i] for i in picked])
    limits = SandboxLimits(job.check.timeout_s, job.check.memory_mb)
    with ScriptedModelServer({p.key: p.reply for p in plays}) as srv, \
            tempfile.TemporaryDirectory(prefix="vibe-loop-") as tmp:
        sock = Path(tmp) / "model.sock"
        by_id = {str(tasks[i]["id"]): tasks[i] for i in picked}
        (Path(tmp) / "plays.json").write_text(json.dumps([[p.key, by_id[p.task_id]] for p in plays]))
        with UnixToTcp(sock, srv.port):
            res = run_sandboxed("vibe.children.play_scripted",
                                [str(root), "--url", srv.url, "--bridge", str(sock), "--plays", str(Path(tmp) / "plays.json"),
                                 "--call-timeout", str(max(1.0, job.check.timeout_s / 4)),
                                 "--sampling", json.dumps(job.sampling), "--concurrency", str(job.concurrency),
                                 "--play-timeout", str(min(job.episode_timeout_s, 0.5 * job.check.timeout_s))],
                                root=root, name="loop", limits=limits, readable=[Path(tmp)])
        calls, sent = dict(srv.calls), dict(srv.sent)
    if res.result is None:
        what = f"did not finish within {job.check.timeout_s:g}s" if res.timed_out else f"exited with code {res.returncode}"
        report.add(Stage.LOOP_PROBES, "loop_probes_failed", Severity.ERROR,
                   f"running run() against the scripted model {what} ({limits_note(limits)}); log tail:\n{res.log_tail}")
        return
    outcomes = {r["key"]: r for r in res.result["plays"]}
    for p in plays:
        r = outcomes.get(p.key, {"error": "no record"})
        p.rewards, p.error, p.calls, p.sent = r.get("rewards"), r.get("error"), calls.get(p.key, 0), sent.get(p.key)
        p.timed_out = bool(r.get("timed_out"))
    cut = {str(tasks[i]["id"]): budgets[i] for i in picked if budgets[i].cut}
    judge_loop(plays, job.probe_limits(), job.max_tokens, job.swarm.model.name, cut, report)


def judge_loop(plays: list[LoopPlay], limits: ProbeLimits, max_tokens: int, model: str,
               cut_golds: dict[str, GoldBudget], report: Report) -> None:
    """Flags for played `plays` (pure). `cut_golds`: task id -> budget of the golds cut to max_tokens."""
    done = [p for p in plays if p.rewards is not None]
    hung = [p for p in plays if p.timed_out]
    failed = [p for p in plays if p.rewards is None and not p.timed_out]
    if hung:
        first = hung[0]
        report.add(Stage.LOOP_PROBES, "loop_play_timeout", Severity.ERROR,
                   f"{len(hung)} of {len(plays)} plays against the scripted model did not end in time; first: task "
                   f"{first.task_id!r} with the {first.probe} reply: {first.error}")
    if failed:
        first = failed[0]
        report.add(Stage.LOOP_PROBES, "run_raises_on_reply", Severity.ERROR,
                   f"run() raised on {len(failed)} of {len(plays)} plays against the scripted model "
                   f"({len(failed) / len(plays):.0%}); e.g. task {first.task_id!r} with the {first.probe} reply "
                   f"{(first.sent or '')[:60]!r}: {first.error}; run() must score any reply the model can give",
                   frequency=len(failed) / len(plays))
    by_task: dict[str, list[LoopPlay]] = {}
    for p in done:
        by_task.setdefault(p.task_id, []).append(p)
    report.stats["loop_plays"] = len(plays)
    judged = {t: ps for t, ps in by_task.items() if len(ps) >= 2}
    if judged and all(len({_key(p.rewards) for p in ps}) == 1 for ps in judged.values()):
        value = next(iter(judged.values()))[0].rewards
        never = " (and it never called the model)" if sum(p.calls for p in done) == 0 else ""
        report.add(Stage.LOOP_PROBES, "reward_ignores_output", Severity.ERROR,
                   f"the reward ignores the model's output: run() returned the same reward ({_show(value)}) for the gold "
                   f"answer, garbage, an echo of the prompt and pieces of it on all {len(judged)} probed task(s){never}; "
                   "score the model's reply (out.choices[0].message.content), not a constant")
        return
    if any(set(p.rewards) != {""} for p in done):
        return  # ROLES: one fixed reply is no gold for every call of a game
    low_gold, uncut, hacked = [], {}, {}
    for p in done:
        r = p.rewards[""]
        if p.probe == "gold" and r < limits.gold_min:
            low_gold.append((p.task_id, r))
        elif p.probe == "gold_uncut":
            uncut[p.task_id] = r
        elif p.probe in ("garbage", "echo") and r > limits.anti_gold_max:
            hacked.setdefault(p.probe, []).append(f"{p.task_id} ({r:.3g})")
        elif p.probe.startswith("span_") and r >= limits.gold_min:
            hacked.setdefault("prompt_span", []).append(f"{p.task_id} ({r:.3g} for {p.sent!r})")
    # cut by the budget, and the whole gold would have scored: the budget is what makes it unreachable
    unreachable = [(t, r) for t, r in low_gold if uncut.get(t, -math.inf) >= limits.gold_min]
    if unreachable:
        t, r = unreachable[0]
        b = cut_golds[t]
        report.add(Stage.LOOP_PROBES, "gold_exceeds_token_budget", Severity.ERROR,
                   f"the gold answer is unreachable within max_tokens={max_tokens}: on {len(unreachable)} probed task(s) "
                   f"it is longer than that under {model}'s tokenizer (task {t!r}: {b.tokens} tokens); whole it scores "
                   f"{uncut[t]:.3g}, but the model's reply is cut at {max_tokens} tokens and the cut gold {b.kept!r} scores "
                   f"{r:.3g} < gold_min={limits.gold_min}; raise max_tokens in vibe.yaml or shorten the gold answers")
    rest = [(t, r) for t, r in low_gold if (t, r) not in unreachable]
    if rest:
        report.add(Stage.LOOP_PROBES, "loop_gold_scores_low", Severity.ERROR,
                   f"with the gold answer as the model's reply, run() scored below gold_min={limits.gold_min} on "
                   f"{len(rest)} task(s): {', '.join(f'{t} ({r:.3g})' for t, r in rest[:3])}; reward.score alone accepts "
                   "it, so run() changes what it scores (check the prompt it sends and the reply it passes on)")
    for kind, where in hacked.items():
        limit = f"at least gold_min={limits.gold_min}" if kind == "prompt_span" else f"above anti_gold_max={limits.anti_gold_max}"
        report.add(Stage.LOOP_PROBES, f"loop_hackable_{kind}", Severity.ERROR,
                   f"through run(), a {kind.replace('_', ' ')} reply scores {limit} on {len(where)} task(s): "
                   f"{', '.join(where[:3])}; the policy would learn that instead of the task", probe=kind)


def _key(rewards: dict[str, float]) -> tuple:
    # equal up to float noise of a sum of a few components
    return tuple(sorted((k, round(v, 9)) for k, v in rewards.items() if math.isfinite(v)))


def _show(rewards: dict[str, float]) -> str:
    return ", ".join(f"{k}: {v:.3g}" if k else f"{v:.3g}" for k, v in rewards.items())
