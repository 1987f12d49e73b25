"""HACPO on a pair and a task where the method can act (issue 28), with a step-0 pre-check that refuses to
spend compute where it cannot.

Setting, fixed before any RL result (docs/benchmarks/hacpo_pair.md says why): two SmolLM2-135M-Instruct
agents from the same weights, each supervised (the registry's `nll` loss) on worked answers of
`column_arithmetic` skewed to one operation -- `add` 3 of 4 items additions, `sub` 3 of 4 subtractions
(`--own-share`) -- so they share a base, the answer format and both operations (they overlap) but each is
stronger on its own (they differ). Warm starts on one operation only (`--own-share 1`, the first choice) were
refused by the pre-check: each forgot the other operation and no cross sample came near the band. The task's answers
are tens of tokens of column work ("Ones: 7 + 8 = 15, write 5 carry 1. Tens: 4 + 3 + 1 = 8. Answer: 85"),
so a fixed disagreement D about an answer costs only D/L per token: s = exp(-D/L) can land in [lo, 1].
Mini-batches hold a whole step's own samples (B x G), so the cross samples are mini-batch m = 1 (lo 0.825).

Pre-check (step 0, after the warm starts, before any RL): each agent samples answers (temperature 1, as in
RL) to prompts of a split disjoint from the test items; the other agent scores them in its own
tokenisation; `engine.training.hacpo_precheck.band_check` places them at the configured cross mini-batches
and gives the share inside [lo(m), 1]. Below `--min-in-band` (30%) for either learner the script stops,
says why and what to change, and runs no RL.

Comparison (only after the pre-check passes): per seed and method a `swarm train` team job from the same
warm starts and prompt order: HACPO, GSPO, GSPOx2, naive sharing and the paper's ablations (no capability
baseline, no omega, alpha 0 and 3); held-out greedy accuracy per agent before and after; paired t 95%
intervals over seeds; per-step diagnostics including `cross_in_band_frac`.

    python benchmarks/hacpo_pair.py --precheck-only --out docs/benchmarks/hacpo_pair   # warm starts + pre-check
    python benchmarks/hacpo_pair.py --seeds 0 1 2 3 4 --out docs/benchmarks/hacpo_pair  # the comparison
    python benchmarks/hacpo_pair.py --smoke --out /tmp/hacpo_pair_smoke                # minutes, tiny models

Finished warm starts and runs are reused (benchmarks/hacpo_toy.py's records), so an interrupted comparison
resumes by running the same command. Each finished RL run is also saved beside the page (`--results`, default
OUT_runs/seedS-METHOD.json, meant to be committed): a session's scratch (`--runs`: warm-start weights, run
dirs) does not always outlive it, and a seed's four methods take longer than a session. A saved run names its
warm starts by the SHA-256 of their weights, not by their scratch path, and is reused only by a command that
plans the same job; a run still to train is paired with its seed's saved runs only if its rebuilt warm starts
hash the same (the script refuses otherwise, since those runs would start from other weights).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from a3r.analysis.stats import (  # noqa: E402
    paired_detectable_effect,
    paired_power,
    pairs_for_effect,
    sigma_upper,
    t_interval,
)
from benchmarks.common import loadavg, machine_record  # noqa: E402
from benchmarks.hacpo_toy import finished, ordering, read_run, run_once  # noqa: E402
from engine.algorithms.losses import token_logprobs  # noqa: E402
from engine.config import ModelConfig  # noqa: E402
from engine.fsutil import atomic_write_text  # noqa: E402
from engine.jobs import TrainJob  # noqa: E402
from engine.models import LoadedModel, load_model  # noqa: E402
from engine.tasks import get_task  # noqa: E402
from engine.tasks.arithmetic import WorkedArithmetic  # noqa: E402
from engine.tasks.base import HELD_OUT_SEED, Item, distinct_items, split_items  # noqa: E402
from engine.tracking.chat import render_prompt  # noqa: E402
from engine.training.hacpo_precheck import DEFAULT_MIN_IN_BAND, BandCheck, band_check  # noqa: E402
from engine.training.supervised import supervise  # noqa: E402

TASK = "column_arithmetic"
PRECHECK_SEED = 30_000  # the pre-check's prompts: their own stream, none of them a test item
AGENTS = {"add": ("+", "-"), "sub": ("-", "+")}  # agent -> (its own operation, the other one)


def warm_ops(agent: str, own_share: float) -> str:
    """The `ops` string of `agent`'s warm-start stream: its own operation on `own_share` of the items, the
    other on the rest (WorkedArithmetic draws one character of the string per item). 1.0: its own only."""
    own, other = AGENTS[agent]
    share = Fraction(own_share).limit_denominator(20)
    return own * share.numerator + other * (share.denominator - share.numerator)
# method name -> (team.method, team.hacpo overrides): the baselines and the paper's ablations
METHODS: dict[str, tuple[str, dict]] = {
    "hacpo": ("hacpo", {}),
    "gspo": ("gspo", {}),
    "gspox2": ("gspox2", {}),
    "naive": ("naive", {}),
    "hacpo-no-baseline": ("hacpo", {"capability_baseline": False}),
    "hacpo-no-omega": ("hacpo", {"omega_modulation": False}),
    "hacpo-alpha0": ("hacpo", {"alpha": 0.0}),
    "hacpo-alpha3": ("hacpo", {"alpha": 3.0}),
}
COMPARISONS = (
    ("hacpo", "gspox2"), ("gspox2", "naive"), ("hacpo", "gspo"),
    ("hacpo", "hacpo-no-baseline"), ("hacpo", "hacpo-no-omega"), ("hacpo", "hacpo-alpha0"), ("hacpo", "hacpo-alpha3"),
)


# -- warm starts ------------------------------------------------------------------------------------
def warm_start(agent: str, seed: int, args, runs_root: Path, excluded_ids: set[str]) -> tuple[Path, dict]:
    """`args.model` supervised on worked answers of `agent`'s operation, skipping the test and pre-check
    items; one folder per setting and exclusion so a changed setting never reuses other weights."""
    own = "" if args.own_share == 1 else f"-own{args.own_share:g}"
    name = f"{agent}{own}-seed{seed}-{args.sft_steps}x{args.sft_batch}-lr{args.sft_lr:g}-excl{args.eval_size}+{args.precheck_prompts}"
    out = runs_root / "sft" / name
    n = 4 * args.sft_steps * args.sft_batch
    stream = [it for it in WorkedArithmetic(ops=warm_ops(agent, args.own_share)).dataset(n, 5_000 + seed) if it.id not in excluded_ids]
    info = supervise(
        ModelConfig(name=args.model), [(it.id, it.prompt, it.extra["worked"]) for it in stream], out,
        steps=args.sft_steps, batch=args.sft_batch, lr=args.sft_lr, seed=seed, shuffle=False,
    )
    return out, info


def precheck_items(n: int, test_ids: set[str]) -> list[Item]:
    """`n` distinct items of the mixed task from PRECHECK_SEED, none of them a held-out test item."""
    return distinct_items(get_task(TASK), n, PRECHECK_SEED, exclude=test_ids)


# -- pre-check --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """One sampled reply: its text, the item it answers, and the source's own log-prob of it (EOS excluded)."""

    item: Item
    text: str
    ids: tuple[int, ...]  # the source's reply tokens, end-of-turn excluded
    lp_sum: float

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def lp_mean(self) -> float:
        return self.lp_sum / self.n_tokens


def _prompt_ids(loaded: LoadedModel, item: Item) -> list[int]:
    rendered = render_prompt(loaded.tokenizer, [{"role": "user", "content": item.prompt}], end_of_turn_ids=loaded.end_of_turn_ids)
    return list(rendered.token_ids)


def _reply_logprob(loaded: LoadedModel, prompt_ids: list[int], reply_ids: list[int]) -> float:
    """Sum of log pi(reply token | prefix) under `loaded`, in one forward pass."""
    ids = torch.tensor([prompt_ids + reply_ids])
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[:, len(prompt_ids) - 1 : -1].float()
    return float(token_logprobs(logits, ids[:, len(prompt_ids) :]).sum())


def sample_answers(loaded: LoadedModel, items: list[Item], per_item: int, max_tokens: int, seed: int) -> list[Answer]:
    """`per_item` replies per item at temperature 1 (no top-k/top-p, as the RL rollouts), cut at the first
    end-of-turn token, decoded as the exchange decodes them; the source's log-prob from a forward pass (at
    step 0 the sampling policy is these weights)."""
    torch.manual_seed(seed)
    stop = set(loaded.end_of_turn_ids) | {loaded.tokenizer.eos_token_id}
    out = []
    for item in items:
        prompt = _prompt_ids(loaded, item)
        with torch.no_grad():
            gen = loaded.model.generate(
                input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_tokens,
                num_return_sequences=per_item, eos_token_id=sorted(stop), pad_token_id=loaded.tokenizer.pad_token_id,
            )
        for row in gen.tolist():
            reply = row[len(prompt) :]
            cut = next((i for i, t in enumerate(reply) if t in stop), len(reply))
            reply = reply[:cut]
            if reply:
                text = loaded.tokenizer.decode(reply, skip_special_tokens=True)
                out.append(Answer(item, text, tuple(reply), _reply_logprob(loaded, prompt, reply)))
    return out


def learner_logprobs(loaded: LoadedModel, answers: list[Answer], normalization: str) -> tuple[list[float], list[float]]:
    """(lp_k, lp_src) per answer that re-tokenises to something, as the HACPO step computes them: the
    learner renders the prompt with its own template and re-tokenises the text; per token each side averages
    over its own tokens, per character both sums are divided by the text's characters."""
    lp_k, lp_src = [], []
    for a in answers:
        ids = list(loaded.tokenizer(a.text, add_special_tokens=False)["input_ids"])
        if not ids:
            continue
        total = _reply_logprob(loaded, _prompt_ids(loaded, a.item), ids)
        if normalization == "char":
            chars = max(1, len(a.text))
            lp_k.append(total / chars)
            lp_src.append(a.lp_sum / chars)
        else:
            lp_k.append(total / len(ids))
            lp_src.append(a.lp_mean)
    return lp_k, lp_src


def precheck(models: dict[str, Path], items: list[Item], args) -> dict:
    """Each learner's BandCheck on the other agent's sampled answers, and each agent's reward on its own."""
    loaded = {a: load_model(ModelConfig(name=str(p))) for a, p in models.items()}
    for m in loaded.values():
        m.model.eval()
    answers = {a: sample_answers(m, items, args.precheck_samples, args.max_tokens, seed=PRECHECK_SEED) for a, m in loaded.items()}
    task = get_task(TASK)
    out: dict = {"reward": {}, "checks": {}, "answer_tokens": {}}
    for a, ans in answers.items():
        by_op: dict[str, list[float]] = {}
        for x in ans:
            by_op.setdefault("+" if "+" in x.item.prompt.split("?")[0] else "-", []).append(task.reward(x.text, x.item))
        out["reward"][a] = {op: statistics.fmean(v) for op, v in sorted(by_op.items())}
        out["answer_tokens"][a] = statistics.median(x.n_tokens for x in ans)
    # the step layout and HACPO coefficients of the comparison's own HACPO job, so the check cannot drift from it
    job = job_for(0, "hacpo", {a: {"model": {"name": str(p)}} for a, p in models.items()}, args)
    n_own = job.swarm.pool.batch_size * job.swarm.pool.group_size
    for learner in loaded:
        source = next(a for a in loaded if a != learner)
        lp_k, lp_src = learner_logprobs(loaded[learner], answers[source], args.normalization)
        check: BandCheck = band_check(
            lp_k, lp_src, n_own=n_own, n_cross=n_own * (len(loaded) - 1), mini_batch_size=job.swarm.training.mini_batch_size,
            ppo_epochs=job.swarm.training.ppo_epochs, cfg=job.team.hacpo, threshold=args.min_in_band,
        )
        out["checks"][learner] = check.model_dump()
    out["passed"] = all(c["passed"] for c in out["checks"].values())
    return out


def precheck_lines(result: dict) -> list[str]:
    lines = []
    for learner, c in result["checks"].items():
        lines.append(
            f"learner {learner}: {c['in_band_share']:.1%} of {c['n_answers']} cross answers in [lo, 1] (median s {c['s_median']:.3f}, "
            f"{c['below_lo_share']:.1%} below lo, {c['above_1_share']:.1%} above 1, mean gradient scale s^(alpha+1) {c['mean_grad_scale']:.3f}): "
            + ("PASS" if c["passed"] else "REFUSED -- " + c["reason"])
        )
    for a, r in result["reward"].items():
        lines.append(f"agent {a}: reward on its own sampled answers {r}, median answer {result['answer_tokens'][a]} tokens")
    return lines


# -- the comparison ---------------------------------------------------------------------------------
def job_for(seed: int, method: str, agents: dict, args) -> TrainJob:
    team_method, overrides = METHODS[method]
    hacpo = {"eps_low": args.eps_low, "eps_high": args.eps_high, "cross_normalization": args.normalization, **overrides}
    return TrainJob(
        task=TASK,
        seed=seed,
        eval_size=args.eval_size,
        temperature=1.0,
        max_tokens=args.max_tokens,
        concurrency=args.batch * args.group,
        keep_final_checkpoint=False,
        swarm={
            "pool": {"batch_size": args.batch, "group_size": args.group},
            "training": {"max_steps": args.steps, "mini_batch_size": args.mini_batch, "micro_batch_size": min(8, args.mini_batch), "checkpoint_every": 0},
        },
        team={"method": team_method, "agents": agents, "hacpo": hacpo},
    )


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over a warm start's weight files (names and bytes): what two runs must share to be paired."""
    h = hashlib.sha256()
    files = sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin"))
    if not files:
        raise SystemExit(f"{model_dir} holds no weight files to fingerprint: delete it to rebuild the warm start")
    for path in files:
        h.update(path.name.encode())
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def portable_job(job: TrainJob, digests: dict[str, str]) -> dict:
    """The job as saved beside the page: each agent's model, a path into this checkout's scratch, replaced by
    the digest of its weights, so that another checkout can tell whether it plans the same job."""
    data = job.model_dump(mode="json")
    for agent, spec in data["team"]["agents"].items():
        spec["model"]["name"] = f"sha256:{digests[agent]}"
    return data


def saved_runs(results: Path, seed: int, methods: list[str], plan) -> tuple[dict[str, dict], dict[str, str] | None]:
    """The runs of `seed` saved in `results` for `methods`, and the warm-start digests they share (None when
    none is saved). `plan(method, digests)` is the portable job this command would run; a saved run of another
    job, or runs of one seed from different warm starts, are refused: pairing them would compare other things
    than the methods."""
    got, digests = {}, None
    for method in methods:
        path = results / f"seed{seed}-{method}.json"
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        if digests is not None and rec["warm"] != digests:
            raise SystemExit(f"{path} trained from other warm starts than the other saved runs of seed {seed}: "
                             "they cannot be paired; delete the runs of that seed to redo them")
        if rec["job"] != plan(method, rec["warm"]):
            raise SystemExit(f"{path} is a run of another job than this command plans (another setting): pass "
                             "another --results, or delete it to redo it with these settings")
        got[method], digests = rec, rec["warm"]
    return got, digests


# Arguments that do not change the pre-check's answer: which runs follow it and where things go.
NOT_GATE_SETTINGS = {"seeds", "methods", "out", "runs", "results", "precheck_only", "report_only"}


def saved_precheck(path: Path, keys: dict, digests: dict[str, str] | None) -> dict | None:
    """The saved pre-check result when it was measured under `keys` on warm starts of these `digests`."""
    if digests is None or not path.exists():
        return None
    gate = json.loads(path.read_text())
    return gate["result"] if gate.get("settings") == keys and gate.get("warm") == digests else None


MEAN = "mean"  # the per-seed mean over agents of a difference: the primary endpoint's unit
PRIMARY = ("hacpo", "gspox2")  # the verdict's comparison: HACPO against the compute-matched baseline
TARGET_EFFECT = 0.03  # the difference the comparison is sized against (the target)
PAPER_SMALLEST_GAIN = 0.02  # the smallest gain the paper reports: an interval below it is "not reproduced"
SEEDS_MOST = 256  # seed counts are searched up to here; at the cap the report says "more than 255"


def compare(runs: dict, agents: list[str], seeds: list[int], methods: list[str]) -> dict:
    """Paired per-seed differences of held-out accuracy after training, per agent and as the mean over agents,
    with their t 95% intervals (None below two seeds), for every planned comparison whose two methods ran,
    over the seeds where both ran: the ablations land seed by seed after the primary pair."""
    out: dict = {}
    for a, b in COMPARISONS:
        paired = [s for s in seeds if (s, a) in runs and (s, b) in runs]
        if a in methods and b in methods and paired:
            per_agent = {g: [runs[(s, a)]["after"][g] - runs[(s, b)]["after"][g] for s in paired] for g in agents}
            per_agent[MEAN] = [statistics.fmean(per_agent[g][i] for g in agents) for i in range(len(paired))]
            for agent, diffs in per_agent.items():
                iv = t_interval(diffs)
                out[f"{a} - {b} / {agent}"] = {"mean": iv.mean, "ci95": [iv.lo, iv.hi] if iv.defined else None,
                                               "diffs": diffs, "seeds": paired}
    return out


class Verdict(str, Enum):
    """The primary endpoint's answer (docs/benchmarks/hacpo_pair.md, "The verdict rule")."""

    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    NOT_RESOLVABLE = "not resolvable at this scale"


def verdict(diffs: list[float], *, effect: float = TARGET_EFFECT, floor: float = PAPER_SMALLEST_GAIN) -> dict:
    """The rule written before the runs: the paired t 95% interval of the per-seed differences above 0 is
    reproduced, below `floor` (the paper's smallest gain) not reproduced, anything else not resolvable. With
    it, what the seeds could resolve: the power against a true `effect` at the observed sd of the differences
    and at its 80% upper confidence bound, the effect 80% power needs at this many seeds, and the seeds a
    paired test needs for 80% power against `effect` at the observed sd and at its upper bound."""
    iv = t_interval(diffs)
    n = len(diffs)
    out: dict = {"n": n, "mean": iv.mean, "ci95": [iv.lo, iv.hi], "effect": effect, "floor": floor}
    if not iv.defined:
        return {**out, "verdict": Verdict.NOT_RESOLVABLE.value, "why": f"{n} seed(s) with a spread of 0 or less than two seeds: no interval"}
    if iv.lo > 0:
        label, why = Verdict.REPRODUCED, "the interval lies above 0"
    elif iv.hi < floor:
        label, why = Verdict.NOT_REPRODUCED, f"the interval lies below {floor:+.2f}, the smallest gain the paper reports"
    else:
        label, why = Verdict.NOT_RESOLVABLE, f"the interval contains 0 and reaches {floor:+.2f} or more"
    sd = statistics.stdev(diffs)
    sd_hi = sigma_upper(sd, n)
    return {
        **out, "verdict": label.value, "why": why, "sd": sd, "sd_upper80": sd_hi, "half_width": (iv.hi - iv.lo) / 2,
        "power": paired_power(sd, effect, n), "power_at_sd_upper80": paired_power(sd_hi, effect, n),
        "detectable_80": paired_detectable_effect(sd, n), "seeds_for_80": pairs_for_effect(sd, effect, most=SEEDS_MOST),
        "seeds_for_80_at_sd_upper80": pairs_for_effect(sd_hi, effect, most=SEEDS_MOST),
    }


def seeds_text(n: int) -> str:
    return f"more than {SEEDS_MOST - 1}" if n >= SEEDS_MOST else str(n)


def verdict_lines(v: dict) -> list[str]:
    a, b = PRIMARY
    lines = [f"**Verdict: {v['verdict']}.** Primary endpoint {a} - {b} (mean over agents, per seed), {v['n']} paired "
             f"seeds: {v['mean']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}]: {v['why']}."]
    if "power" in v:
        lines += ["", f"Power: the per-seed differences have sd {v['sd']:.3f} (80% upper bound {v['sd_upper80']:.3f}); "
                  f"half-width {v['half_width']:.3f}. Against a true {v['effect']:+.2f} these {v['n']} seeds had "
                  f"{v['power']:.0%} power ({v['power_at_sd_upper80']:.0%} at the upper bound of the sd); 80% power at "
                  f"{v['n']} seeds needs a true difference of {v['detectable_80']:.3f}, and {v['effect']:+.2f} needs "
                  f"{seeds_text(v['seeds_for_80'])} paired seeds at the observed sd, {seeds_text(v['seeds_for_80_at_sd_upper80'])} "
                  "at its upper bound."]
    return lines


def markdown(report: dict, agents: list[str], methods: list[str], seeds: list[int], runs: dict) -> str:
    lines = [
        "# HACPO pair comparison (generated)", "",
        f"Command: `{report['command']}`", f"Machine: {report['machine']['cpu_count']} cores, torch {report['machine']['torch']}; {report['compute_s'] / 60:.1f} min of runs.", "",
        "Pre-check:", "", *[f"- {x}" for x in precheck_lines(report["precheck"])], "",
        "Held-out accuracy after training, mean over the seeds each method has run:", "",
        "| method | seeds | " + " | ".join(agents) + " | cross in band (mean over steps) |", "|---|---|" + "---|" * (len(agents) + 1),
    ]
    for m in methods:
        have = [s for s in seeds if (s, m) in runs]
        if not have:
            continue
        acc = " | ".join(f"{statistics.fmean(runs[(s, m)]['after'][a] for s in have):.3f}" for a in agents)
        band = [r["cross_in_band_frac"] for s in have for st in runs[(s, m)]["steps"].values() for r in st if "cross_in_band_frac" in r]
        lines.append(f"| {m} | {', '.join(map(str, have))} | {acc} | " + (f"{statistics.fmean(band):.3f} |" if band else "- |"))
    lines += ["", "Paired differences over the seeds where both methods ran (t 95% interval; none below two seeds):", "",
              "| comparison | seeds | mean | 95% CI | half-width |", "|---|---|---|---|---|"]
    for k, v in report["comparisons"].items():
        ci = (f"[{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] | {(v['ci95'][1] - v['ci95'][0]) / 2:.3f}" if v["ci95"]
              else "no interval | -")
        lines.append(f"| {k} | {', '.join(map(str, v['seeds']))} | {v['mean']:+.3f} | {ci} |")
    ranked = (f"(mean over agents, seeds with every method: {', '.join(map(str, report['complete_seeds']))}): {report['ordering']}"
              if report["ordering"] else "(mean over agents): none yet, no seed has every method")
    lines += ["", f"Ordering {ranked}", ""]
    if report.get("verdict"):
        lines += [*verdict_lines(report["verdict"]), ""]
    if report.get("left_out"):
        lines += ["Not run yet: " + "; ".join(f"seed {s}: {', '.join(ms)}" for s, ms in report["left_out"].items()), ""]
    lines += [f"![curves]({Path(report['plot']).name})", ""] if report.get("plot") else []
    lines += per_seed_lines(agents, methods, seeds, runs)
    return "\n".join(lines)


def plot(runs: dict, agents: list[str], seeds: list[int], methods: list[str], path: Path) -> None:
    """Per agent, the training reward per step (mean over the seeds it has run) of every method, and the share of its cross
    samples in the band per step for the methods that exchange: the curves behind the table."""
    fig, axes = plt.subplots(2, len(agents), figsize=(6 * len(agents), 7), squeeze=False)
    for col, agent in enumerate(agents):
        for m in methods:
            by_step: dict[int, list[float]] = {}
            band: dict[int, list[float]] = {}
            have = [s for s in seeds if (s, m) in runs]
            if not have:
                continue
            for s in have:
                for r in runs[(s, m)]["steps"].get(agent, []):
                    if f"reward/{agent}" in r:
                        by_step.setdefault(r["step"], []).append(r[f"reward/{agent}"])
                    if "cross_in_band_frac" in r:
                        band.setdefault(r["step"], []).append(r["cross_in_band_frac"])
            xs = sorted(by_step)
            label = f"{m} ({len(have)} seed{'s' * (len(have) > 1)})"
            color = f"C{list(METHODS).index(m)}"  # one colour per method in every panel
            axes[0][col].plot(xs, [statistics.fmean(by_step[x]) for x in xs], label=label, color=color)
            if band:
                xb = sorted(band)
                axes[1][col].plot(xb, [statistics.fmean(band[x]) for x in xb], label=label, color=color)
        axes[0][col].set(title=f"{agent}: training reward (mean over each method's seeds)", xlabel="RL step", ylabel="reward")
        axes[1][col].set(title=f"{agent} as learner: cross samples in [lo, 1]", xlabel="RL step", ylabel="share", ylim=(0, 1.05))  # naive's 1.0 stays visible
        for ax in (axes[0][col], axes[1][col]):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def in_band(run: dict, agent: str) -> float | None:
    """Mean over steps of the trainer's `cross_in_band_frac` for learner `agent` (None: no cross samples)."""
    band = [r["cross_in_band_frac"] for r in run["steps"].get(agent, []) if "cross_in_band_frac" in r]
    return statistics.fmean(band) if band else None


def per_seed_lines(agents: list[str], methods: list[str], seeds: list[int], runs: dict) -> list[str]:
    """Each seed's accuracies and, per learner, the share of its cross samples that carried gradient: where
    the mechanism could act, seed by seed (a pooled mean hides a seed whose pair had nothing to exchange)."""
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = ["Per seed: held-out accuracy after training, and per learner the mean share of its cross samples in "
             "the band during training:", "",
             "| seed | method | " + " | ".join(agents) + " | " + " | ".join(f"in band ({a})" for a in agents) + " |",
             "|---|---|" + "---|" * (2 * len(agents))]
    for s in seeds:
        for m in methods:
            if (s, m) not in runs:
                continue
            run = runs[(s, m)]
            lines.append(f"| {s} | {m} | " + " | ".join(f"{run['after'][a]:.3f}" for a in agents) + " | "
                         + " | ".join(fmt(in_band(run, a)) for a in agents) + " |")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--model", default="smollm2-135m", help="both agents' base model")
    ap.add_argument("--sft-steps", type=int, default=120)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--own-share", type=float, default=0.75,
                    help="share of its own operation in an agent's warm-start items (1: only its own)")
    ap.add_argument("--sft-lr", type=float, default=5e-5)
    ap.add_argument("--steps", type=int, default=20, help="RL steps per run")
    ap.add_argument("--batch", type=int, default=8, help="prompts per step (B)")
    ap.add_argument("--group", type=int, default=4, help="responses per prompt and agent (G)")
    ap.add_argument("--mini-batch", type=int, default=32, help="B x G puts all own samples in m0 and the cross ones in m1")
    ap.add_argument("--lr", type=float, default=1e-5, help="both agents' RL lr")
    ap.add_argument("--eps-low", type=float, default=3e-3, help="own-sample GSPO clip, re-tuned for toy scale")
    ap.add_argument("--eps-high", type=float, default=4e-3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--eval-size", type=int, default=300)
    ap.add_argument("--normalization", choices=["token", "char"], default="token", help="same tokenizer: the spec's per-token s")
    ap.add_argument("--precheck-prompts", type=int, default=8)
    ap.add_argument("--precheck-samples", type=int, default=4, help="answers per pre-check prompt and agent")
    ap.add_argument("--min-in-band", type=float, default=DEFAULT_MIN_IN_BAND, help="refuse below this in-band share")
    ap.add_argument("--precheck-only", action="store_true", help="warm starts and the pre-check, no RL")
    ap.add_argument("--report-only", action="store_true",
                    help="the report from the runs saved in --results, training nothing: a seed missing a method is left out and named")
    ap.add_argument("--out", default="docs/benchmarks/hacpo_pair")
    ap.add_argument("--runs", default="runs/hacpo_pair", help="scratch: warm starts and run dirs")
    ap.add_argument("--results", help="finished runs, one small JSON each, to commit (default: OUT_runs beside the page)")
    ap.add_argument("--smoke", action="store_true", help="tiny models and sizes: checks the pipeline in minutes")
    args = ap.parse_args()
    if not 0.5 < args.own_share <= 1:
        ap.error(f"--own-share {args.own_share:g}: give a share in (0.5, 1]; 0.5 would warm both agents on the same mix")
    if args.smoke:
        args.model, args.sft_steps, args.sft_batch, args.steps, args.batch, args.group = "tiny", 2, 4, 1, 2, 2
        args.mini_batch, args.eval_size, args.max_tokens, args.seeds = 4, 2, 16, args.seeds[:1]
        args.precheck_prompts, args.precheck_samples = 2, 2
    load_before, t0 = loadavg(), time.time()
    runs_root, out = Path(args.runs), Path(args.out)
    results = Path(args.results or f"{out}_runs")
    out.parent.mkdir(parents=True, exist_ok=True)
    test_ids = {it.id for it in split_items(get_task(TASK), 0, args.eval_size, 0, HELD_OUT_SEED)[1]}
    items = precheck_items(args.precheck_prompts, test_ids)
    excluded = test_ids | {it.id for it in items}

    # The pre-check reads only the first seed's warm starts: it runs before the other seeds' (10-15 CPU-min
    # each on 2 cores) are paid for, and --precheck-only never pays for them. A later session whose first seed
    # is all saved reuses the saved pre-check of those very warm starts instead of rebuilding them to ask again.
    first = args.seeds[0]
    agents_of = lambda models: {a: {"model": {"name": models[a]}, "lr": args.lr} for a in AGENTS}  # noqa: E731
    planner = lambda seed: lambda method, digests: portable_job(job_for(seed, method, agents_of(digests), args), digests)  # noqa: E731
    gate_keys = json.loads(json.dumps({k: v for k, v in vars(args).items() if k not in NOT_GATE_SETTINGS}))
    gate_path = results / f"precheck-seed{first}.json"
    warm: dict[int, dict] = {}
    result = None
    if args.precheck_only and args.report_only:
        ap.error("--precheck-only and --report-only exclude each other")
    if not args.precheck_only:
        saved, digests = saved_runs(results, first, args.methods, planner(first))
        if len(saved) == len(args.methods) or args.report_only:
            result = saved_precheck(gate_path, gate_keys, digests)
    if result is None and args.report_only:
        raise SystemExit(f"--report-only: no pre-check saved in {gate_path} for these settings and the warm starts of seed "
                         f"{first}'s saved runs; run the same command without --report-only to measure it")
    if result is None:
        warm[first] = {a: warm_start(a, first, args, runs_root, excluded) for a in AGENTS}
        t_pre = time.time()
        result = precheck({a: warm[first][a][0] for a in AGENTS}, items, args)
        result.update(seed=first, wall_s=time.time() - t_pre, command=shlex.join(["python", "benchmarks/hacpo_pair.py", *sys.argv[1:]]),
                      machine=machine_record(load_before), sft={a: info for a, (_, info) in warm[first].items()})
        Path(f"{out}_precheck.json").write_text(json.dumps(result, indent=2, default=str))
        results.mkdir(parents=True, exist_ok=True)
        gate = {"settings": gate_keys, "warm": {a: weights_digest(warm[first][a][0]) for a in AGENTS}, "result": result}
        atomic_write_text(gate_path, json.dumps(gate, indent=2, default=str))
    else:
        print(f"pre-check: reused {gate_path} (the same settings and warm starts as seed {first}'s saved runs)", flush=True)
    print("\n".join(precheck_lines(result)), flush=True)
    if not result["passed"]:
        raise SystemExit("pre-check refused this setting: no RL run started (see above for why and what to change)")
    if args.precheck_only:
        return
    runs, compute_s = {}, sum(info["wall_s"] for seed in warm.values() for _, info in seed.values())
    seeds, left_out = [], {}
    for seed in args.seeds:
        saved, digests = saved_runs(results, seed, args.methods, planner(seed))
        if args.report_only:  # what is saved, as it is: each comparison later pairs the seeds where both ran
            if missing := [m for m in args.methods if m not in saved]:
                left_out[seed] = missing
            seeds += [seed] if saved else []
            for method, rec in saved.items():
                runs[(seed, method)], compute_s = rec["run"], compute_s + rec["wall_s"]
            continue
        seeds.append(seed)
        if len(saved) < len(args.methods):  # something to train: this seed's warm starts, as the saved runs had them
            if seed not in warm:
                warm[seed] = {a: warm_start(a, seed, args, runs_root, excluded) for a in AGENTS}
                compute_s += sum(info["wall_s"] for _, info in warm[seed].values())
            built = {a: weights_digest(warm[seed][a][0]) for a in AGENTS}
            if digests is not None and built != digests:
                raise SystemExit(f"seed {seed}'s warm starts rebuilt in {runs_root / 'sft'} are not the weights its saved "
                                 f"runs ({', '.join(sorted(saved))}) trained from: new runs could not be paired with "
                                 "them. Delete the saved runs of that seed to redo them all")
            digests = built
        for method in args.methods:
            if method in saved:
                rec = saved[method]
                print(f"seed {seed} {method}: reused {results / f'seed{seed}-{method}.json'}", flush=True)
            else:
                run_dir = runs_root / f"seed{seed}-{method}"
                job = job_for(seed, method, agents_of({a: str(warm[seed][a][0].resolve()) for a in AGENTS}), args)
                record = finished(run_dir, job) or run_once(run_dir, job)
                summary = json.loads((run_dir / "summary.json").read_text())
                rec = {"job": portable_job(job, digests), "warm": digests, "wall_s": record["wall_s"],
                       "summary": summary, "run": read_run(run_dir, summary)}
                results.mkdir(parents=True, exist_ok=True)
                atomic_write_text(results / f"seed{seed}-{method}.json", json.dumps(rec, indent=2, default=str))
            compute_s += rec["wall_s"]
            runs[(seed, method)] = rec["run"]
            summary = rec["summary"]
            print(f"seed {seed} {method}: before {summary.get('accuracy_before')} after {summary.get('accuracy_after')}", flush=True)
    names = list(AGENTS)
    # Ranked only over the seeds that have every method: a mean over different seeds would rank the seeds.
    complete = [s for s in seeds if all((s, m) in runs for m in args.methods)]
    score = {m: statistics.fmean(runs[(s, m)]["after"][a] for s in complete for a in names) for m in args.methods} if complete else None
    comparisons = compare(runs, names, seeds, args.methods)
    primary = comparisons.get(f"{PRIMARY[0]} - {PRIMARY[1]} / {MEAN}")
    report = {
        "command": shlex.join(["python", "benchmarks/hacpo_pair.py", *sys.argv[1:]]),
        "machine": machine_record(load_before), "wall_s": time.time() - t0, "compute_s": compute_s,
        "config": vars(args), "seeds": seeds, "left_out": left_out, "precheck": result, "comparisons": comparisons,
        "verdict": verdict(primary["diffs"]) if primary else None, "plot": str(out.with_suffix(".png")),
        "ordering": ordering(score) if score else None, "complete_seeds": complete, "runs": {f"seed{s}-{m}": r for (s, m), r in runs.items()},
    }
    plot(runs, names, seeds, args.methods, out.with_suffix(".png"))
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    Path(f"{out}_results.md").write_text(markdown(report, names, args.methods, seeds, runs))
    print(json.dumps({k: report[k] for k in ("comparisons", "verdict", "ordering", "wall_s")}, indent=2))


if __name__ == "__main__":
    main()
