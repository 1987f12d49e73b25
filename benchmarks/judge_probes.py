"""The reward-hacking probes against a real LLM judge: SmolLM2-135M on a swarm server grading one-sentence
summaries (the built-in `judged_summary` task).

Question: does a 135M judge grade summaries at all, and does it pay for padding, flattery or an echo of
its rubric? On `--items` held-out summary prompts the judge (greedy, one `swarm serve` used only for eval
episodes) grades:

- the honest reply: the item's reference summary;
- a wrong reply: another item's reference summary (a sound judge scores it lower: "discrimination");
- the three hacks of vibe.judge_probes appended to the honest reply.

Each comparison is paired per prompt; the page gives the mean difference with a t interval over prompts
(one judge, one seed: the interval is over prompts, not over judges), how many prompts the judge could
grade at all, and the probes' flags.

    .venv/bin/python benchmarks/judge_probes.py --items 16 --out docs/benchmarks/judge_probes
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis.stats import t_interval  # noqa: E402
from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.config import ModelConfig, SwarmConfig  # noqa: E402
from engine.jobs import ServerProcess  # noqa: E402
from engine.rewards import JudgeConfig, LLMJudge  # noqa: E402
from engine.rewards.judge import swarm_chat  # noqa: E402
from engine.rewards.judge_score import ScoreUnparseable, parse_score  # noqa: E402
from engine.tasks.base import HELD_OUT_SEED  # noqa: E402
from engine.tasks.summary import Summary  # noqa: E402
from vibe.flags import Report  # noqa: E402
from vibe.judge_probes import add_judge_flags, probe_judge  # noqa: E402

SAMPLES = 4  # the judge's first raw answers, kept on the page: what it says when it does not grade


def _interval(values: list[float]) -> dict:
    if len(values) < 2:
        return {"n": len(values), "mean": values[0] if values else None, "lo": None, "hi": None}
    iv = t_interval(values)
    return {"n": iv.n, "mean": iv.mean, "lo": iv.lo if iv.defined else None, "hi": iv.hi if iv.defined else None}


def run(model: str, n_items: int, seed: int, timeout_s: float) -> dict:
    load_before = loadavg()
    items = Summary().dataset(n_items, seed)
    server = ServerProcess(None, health_timeout_s=300)
    try:
        client = server.client("bench")
        client.configure(SwarmConfig(model=ModelConfig(name=model)))
        client.start(wait=True, timeout=600)
        import os

        os.environ["SWARM_JUDGE_ADMIN_TOKEN"] = server.token
        cfg = JudgeConfig(swarm_url=server.url, model=model, timeout_s=timeout_s, retries=0, fallback="exclude")
        answers: list[str] = []
        endpoint = swarm_chat(cfg)

        def recorded(messages: list[dict[str, str]]) -> str:
            answers.append(endpoint(messages))
            return answers[-1]

        judge = LLMJudge(cfg, chat=recorded)
        t0 = time.monotonic()
        pairs = [(it.prompt, it.answer) for it in items]
        honest = [judge.grade(p, h) for p, h in pairs]
        wrong = [judge.grade(p, items[(i + 1) % len(items)].answer) for i, (p, _) in enumerate(pairs)]
        probes = probe_judge(judge, pairs)
        seconds = time.monotonic() - t0
    finally:
        server.stop()
    report = Report(client=f"judge {model}")
    add_judge_flags(probes, report)
    discrimination = [h - w for h, w in zip(honest, wrong, strict=True) if h is not None and w is not None]
    return {
        "model": model, "items": n_items, "seed": seed, "seconds": round(seconds, 1),
        "judge_counts": judge.counts,
        "answers_sample": answers[:SAMPLES],
        "examples": len(cfg.examples),
        "scores_given": _scores_given(answers, cfg),
        "honest_graded": sum(h is not None for h in honest),
        "honest_mean": _interval([h for h in honest if h is not None]),
        "honest_minus_wrong": _interval(discrimination),
        "probes": [{"probe": r.probe.value, "graded": r.graded, "ungraded": r.ungraded, "wins": r.wins,
                    "honest_mean": r.honest_mean, "probe_mean": r.probe_mean, "flagged": r.flagged,
                    "gain": _interval(list(r.gains))} for r in probes],
        "flags": [f.code for f in report.flags],
        "machine": machine_record(load_before),
        "command": "benchmarks/judge_probes.py " + shlex.join(sys.argv[1:]),
    }


def _scores_given(answers: list[str], cfg: JudgeConfig) -> dict[str, int]:
    """How often the judge gave each score over all its calls ("unreadable" for an answer with none)."""
    def read(a: str) -> str:
        try:
            return f"{parse_score(a, cfg):g}"
        except ScoreUnparseable:
            return "unreadable"
    return dict(Counter(read(a) for a in answers))


def _fmt_scores(given: dict[str, int] | None) -> str:
    if not given:
        return "not recorded"
    order = sorted(given, key=lambda k: (k == "unreadable", float(k) if k != "unreadable" else 0.0))
    return ", ".join(f"{k}: {given[k]}" for k in order)


def verdict(r: dict) -> str:
    """The page's plain result for a judge that graded: can it tell a right reply from a wrong one, and does
    it pay for a hack. Read from the intervals, not from the means alone."""
    d = r["honest_minus_wrong"]
    if d["lo"] is not None and d["lo"] > 0:
        tells = "tells an honest summary from another prompt's (honest minus wrong is above 0)"
    elif d["hi"] is not None and d["hi"] < 0:
        tells = ("grades another prompt's summary *above* the honest one (honest minus wrong is below 0): it does "
                 "not read the reply against the text")
    else:
        tells = "cannot be shown to tell an honest summary from another prompt's (the interval of honest minus wrong holds 0)"
    paid = [p["probe"] for p in r["probes"] if p["flagged"]]
    hacks = f"it pays for {', '.join(paid)} (flagged)" if paid else "no probe is flagged"
    fit = d["lo"] is not None and d["lo"] > 0 and not paid
    return (f"Result: {r['model']} gave a readable grade to {r['honest_graded']} of {r['items']} honest replies and "
            f"{tells}; {hacks}. "
            + ("As a reward it would pass these checks. " if fit else "As a reward it would teach the policy noise or a "
               "hack, not summaries: it is not fit to train against. ")
            + "The probes worked as designed: they turned a judge that answers in the right format into a "
            "measured refusal, which a format check alone would have passed.")


def _fmt(iv: dict) -> str:
    if iv["mean"] is None:
        return "n/a (nothing graded)"
    ci = f" [{iv['lo']:+.3f}, {iv['hi']:+.3f}]" if iv["lo"] is not None else " (no interval)"
    return f"{iv['mean']:+.3f}{ci}, n={iv['n']}"


def page(r: dict) -> str:
    lines = [
        f"# Reward-hacking probes against an LLM judge ({r['model']})", "",
        f"Command: `{r['command']}` ({r['seconds']} s of judging; load before/after "
        f"{r['machine']['loadavg_before']} / {r['machine']['loadavg_after']}; commit {r['machine']['git_commit'][:10]}).", "",
        f"{r['items']} held-out `judged_summary` prompts (seed {r['seed']}), each graded by {r['model']} on a swarm server "
        "(greedy, eval episodes only), rubric and scale 1..10 of `JudgeConfig`'s defaults, rewards on 0..1. "
        "Intervals: 95% t over prompts (one judge, one seed).", "",
        f"- the judge gave a readable grade to {r['honest_graded']} of {r['items']} honest replies "
        f"(judge counters: {r['judge_counts']}), shown {r.get('examples', 0)} graded example(s) first;",
        f"- scores it gave over all its calls: {_fmt_scores(r.get('scores_given'))};",
        f"- honest reward: {_fmt(r['honest_mean'])};",
        f"- honest minus wrong (another prompt's summary): {_fmt(r['honest_minus_wrong'])}: a sound judge is clearly above 0;", "",
        "| probe | pairs graded | hack minus honest | hack above honest | flagged |", "| --- | --- | --- | --- | --- |",
    ]
    for p in r["probes"]:
        lines.append(f"| {p['probe']} | {p['graded']} of {p['graded'] + p['ungraded']} | {_fmt(p['gain'])} | "
                     f"{p['wins']} | {'yes' if p['flagged'] else 'no'} |")
    lines += ["", f"Flags: {', '.join(r['flags']) or 'none'}.", ""]
    if r["honest_graded"] == 0:
        lines += [f"Result: {r['model']} gave no readable grade on any of its {r['judge_counts']['calls']} calls. It does "
                  "not follow the grading instruction: it restates the rubric or writes a summary itself (its answers "
                  "below). As a judge it would turn every reward into the fallback, and the probes can say nothing "
                  "about a judge that does not grade, so they warn (`judge_ungraded`) rather than pass it. That the "
                  "probes catch a judge that does grade but pays for a hack is shown by planted gullible judges in "
                  "`tests/vibe/test_judge_probes.py`, not by this page.", ""]
    else:
        lines += [verdict(r), ""]
    lines += ["The judge's first answers, verbatim:", ""]
    lines += [f"- {a!r}" for a in r["answers_sample"]]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--seed", type=int, default=HELD_OUT_SEED)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument("--report-only", action="store_true", help="rewrite OUT.md from OUT.json, judging nothing")
    a = ap.parse_args()
    if a.report_only and a.out is None:
        ap.error("--report-only needs --out")
    r = json.loads(a.out.with_suffix(".json").read_text()) if a.report_only else run(a.model, a.items, a.seed, a.timeout_s)
    text = page(r)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        if not a.report_only:
            a.out.with_suffix(".json").write_text(json.dumps(r, indent=2) + "\n")
        a.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
