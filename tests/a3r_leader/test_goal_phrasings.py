"""A battery of research-goal phrasings, each checked against its full parse.

Every row states the whole expected goal: shape, studied TrainJob key, its levels (a list: exactly those
values; a tuple: a (low, high) range), task, and the optional parts (secondary variable, statistic, fixed
settings, steps, criterion). Anything a row leaves out must be at its default, so a parser that reads an
extra setting, a sweep instead of two named values, or the wrong task fails here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from a3r.leader.goals import Criterion, GoalParseError, parse_goal

LOSS, ADV, STD = "swarm.algorithm.policy_loss", "swarm.algorithm.advantage", "swarm.algorithm.scale_by_std"
LORA, RANK, MODEL = "swarm.lora.enabled", "swarm.lora.rank", "swarm.model.name"
MERGE, POOL = "swarm.training.merge", "swarm.pool.policy"
BS, GS = "swarm.pool.batch_size", "swarm.pool.group_size"
LR, KL = "swarm.training.lr", "swarm.algorithm.kl_coef"
ON = {LORA: True}
SMOLLM2 = {MODEL: "smollm2-135m"}


@dataclass(frozen=True)
class Row:
    text: str
    shape: str
    key: str
    levels: list | tuple  # list: the exact values; tuple: (low, high)
    task: str
    secondary: tuple[str, list | tuple] | None = None
    statistic: str = "final"
    fixed: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None
    criterion: tuple[str, float] | None = None  # (kind, value); None: the default criterion


# fmt: off
ROWS = [
    # -- compare: "is A better than B" (GRPO against a loss is the ppo_clip loss with the grpo advantage)
    Row("Is GSPO better than GRPO on the calculator task?", "compare", LOSS, ["gspo", "ppo_clip"], "calculator",
        fixed={ADV: "grpo"}),
    Row("Is GRPO better than GSPO for countdown?", "compare", LOSS, ["ppo_clip", "gspo"], "countdown",
        fixed={ADV: "grpo"}),
    Row("Is DAPO better than PPO on arithmetic?", "compare", LOSS, ["dapo", "ppo_clip"], "arithmetic"),
    Row("Is rloo better than grpo on arithmetic?", "compare", ADV, ["rloo", "grpo"], "arithmetic"),
    Row("Is Dr. GRPO better than GRPO on arithmetic?", "compare", STD, [False, True], "arithmetic",
        fixed={ADV: "grpo"}),
    Row("Is LoRA better than full fine-tuning on countdown with smollm2?", "compare", LORA, [True, False],
        "countdown", fixed=SMOLLM2),
    Row("Is dynamic sampling better than task count for countdown?", "compare", POOL,
        ["nondegenerate_task_count", "task_count"], "countdown"),
    Row("Is a learning rate of 1e-5 better than 3e-5 on countdown?", "compare", LR, [1e-5, 3e-5], "countdown"),
    Row("Is 8 or 32 the better batch size for arithmetic?", "compare", BS, [8, 32], "arithmetic"),
    # -- compare: "A versus B", "compare A with B"
    Row("gspo versus ppo_clip on countdown", "compare", LOSS, ["gspo", "ppo_clip"], "countdown"),
    Row("gspo vs dapo on math in 30 steps", "compare", LOSS, ["gspo", "dapo"], "arithmetic", steps=30),
    Row("Compare rank 4 with rank 32", "compare", RANK, [4, 32], "arithmetic", fixed=ON),
    Row("Compare lr 1e-5 and 1e-4 with group size 8 on countdown", "compare", LR, [1e-5, 1e-4], "countdown",
        fixed={GS: 8}),
    Row("batch size 8 vs 32 on calculator in 12 steps", "compare", BS, [8, 32], "calculator", steps=12),
    Row("Token merging versus text merging on calculator", "compare", MERGE, ["token", "text"], "calculator"),
    Row("Compare a kl coef of 0 with 0.001 on arithmetic", "compare", KL, [0.0, 0.001], "arithmetic"),
    Row("compare the upper clip ratio 0.2 with 0.28 on countdown using dapo", "compare",
        "swarm.algorithm.clip_high", [0.2, 0.28], "countdown", fixed={LOSS: "dapo"}),
    Row("compare the lower clip ratio 0.1 with 0.2 on countdown", "compare", "swarm.algorithm.clip_low",
        [0.1, 0.2], "countdown"),
    Row("arithmetic versus countdown with smollm2-135m", "compare", "task", ["arithmetic", "countdown"],
        "arithmetic", fixed=SMOLLM2),
    Row("lr 1e-5 vs 1e-4 on countdown reaching 50% accuracy", "compare", LR, [1e-5, 1e-4], "countdown",
        criterion=("absolute", 0.5)),
    Row("Is GSPO better than GRPO on calculator, and whether max response length changes that?", "compare",
        LOSS, ["gspo", "ppo_clip"], "calculator", secondary=("max_tokens", (16, 128)), fixed={ADV: "grpo"}),
    # -- compare: "A or B"
    Row("Does temperature 0.6 or 1.0 train countdown better?", "compare", "temperature", [0.6, 1.0],
        "countdown"),
    Row("Does token or text merging train calculator better?", "compare", MERGE, ["token", "text"],
        "calculator"),
    Row("Which pool policy trains arithmetic better, task count or episode count?", "compare", POOL,
        ["task_count", "episode_count"], "arithmetic"),
    Row("which model trains arithmetic better, tiny or smollm2?", "compare", MODEL, ["tiny", "smollm2-135m"],
        "arithmetic"),
    Row("Which trains countdown fastest, lr 1e-5 or lr 1e-4?", "compare", LR, [1e-5, 1e-4], "countdown",
        statistic="auc"),
    Row("Which learning rate learns arithmetic quickest, 1e-5 or 1e-4?", "compare", LR, [1e-5, 1e-4],
        "arithmetic", statistic="auc"),
    Row("Does group size 4 or 8 train calculator most efficiently?", "compare", GS, [4, 8], "calculator",
        statistic="auc"),
    # -- effect: "does X matter", "effect of X", "how does X affect"
    Row("Does the merge mode matter for calculator?", "effect", MERGE, ["off", "token", "text"], "calculator"),
    Row("Does the pool policy matter for arithmetic?", "effect", POOL,
        ["episode_count", "task_count", "nondegenerate_task_count", "all_clients_agree", "any_client_agrees"],
        "arithmetic"),
    Row("Does LoRA matter for countdown?", "effect", LORA, [False, True], "countdown"),
    Row("Does the advantage estimator matter for countdown?", "effect", ADV, ["grpo", "rloo"], "countdown"),
    Row("Does group size (2, 4, 8) matter for countdown?", "effect", GS, [2, 4, 8], "countdown"),
    Row("does gradient clipping matter for arithmetic", "effect", "swarm.training.max_grad_norm", (0.1, 10.0),
        "arithmetic"),
    Row("What is the effect of the KL coefficient on the speed of learning countdown?", "effect", KL,
        (1e-3, 1e-1), "countdown", statistic="auc"),
    Row("how does max response length from 16 to 64 affect arithmetic", "effect", "max_tokens", (16, 64),
        "arithmetic"),
    Row("effect of group size 2 to 16 on calculator", "effect", GS, (2, 16), "calculator"),
    Row("effect of the entropy bonus on arithmetic", "effect", "swarm.algorithm.entropy_coef", (1e-4, 1e-2),
        "arithmetic"),
    Row("effect of weight decay on countdown with lora rank 8", "effect", "swarm.training.weight_decay",
        (1e-3, 1e-1), "countdown", fixed={RANK: 8, LORA: True}),
    Row("effect of lora dropout on calculator", "effect", "swarm.lora.dropout", (0.0, 0.2), "calculator",
        fixed=ON),
    # -- best: lists, sets and ranges as written
    Row("best batch size for arithmetic in {1, 2, 4}", "best", BS, [1, 2, 4], "arithmetic"),
    Row("best batch size for countdown in [1, 2, 4]", "best", BS, [1, 2, 4], "countdown"),
    Row("best group size for calculator: 1, 2 and 4", "best", GS, [1, 2, 4], "calculator"),
    Row("best max response length for countdown in 16, 32 or 64", "best", "max_tokens", [16, 32, 64],
        "countdown"),
    Row("best learning rate for countdown between 1e-6 and 1e-4", "best", LR, (1e-6, 1e-4), "countdown"),
    Row("best lr for countdown in [1e-6, 1e-4]", "best", LR, (1e-6, 1e-4), "countdown"),
    Row("tune the PPO epochs for arithmetic from 1 to 4", "best", "swarm.training.ppo_epochs", (1, 4),
        "arithmetic"),
    Row("find the best policy loss for countdown among gspo, dapo and ppo clip", "best", LOSS,
        ["gspo", "dapo", "ppo_clip"], "countdown"),
    Row("which loss aggregation works best for calculator", "best", "swarm.algorithm.agg",
        ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"], "calculator"),
    Row("best lora alpha for countdown with lora rank 16", "best", "swarm.lora.alpha", (8, 64), "countdown",
        fixed={RANK: 16, LORA: True}),
    Row("best temperature for countdown between 0.5 and 1.2, and whether the lora rank (4 to 32) changes that",
        "best", "temperature", (0.5, 1.2), "countdown", secondary=(RANK, (4, 32)), fixed=ON),
    # -- minimum / maximum
    Row("find the smallest batch size that still trains arithmetic efficiently (1 to 64), and whether max "
        "response length changes that", "minimum", BS, (1, 64), "arithmetic",
        secondary=("max_tokens", (16, 128)), statistic="auc"),
    Row("smallest batch size that trains countdown, batch size 1-4", "minimum", BS, (1, 4), "countdown"),
    Row("smallest batch size that reaches accuracy at least 0.5 on countdown", "minimum", BS, (1, 64),
        "countdown", criterion=("absolute", 0.5)),
    Row("smallest mini-batch size that still trains calculator", "minimum", "swarm.training.mini_batch_size",
        (4, 64), "calculator"),
    Row("what is the lowest KL coefficient that still trains countdown from 0.001 to 0.1", "minimum", KL,
        (0.001, 0.1), "countdown"),
    Row("largest group size that still trains arithmetic within 10% of the best", "maximum", GS, (2, 16),
        "arithmetic", criterion=("relative", 0.9)),
    Row("How high can the LoRA rank go and still train calculator with smollm2", "maximum", RANK, (2, 64),
        "calculator", fixed={**ON, **SMOLLM2}),
    Row("largest learning rate that still trains countdown between 1e-6 and 1e-3 in 20 steps", "maximum", LR,
        (1e-6, 1e-3), "countdown", steps=20),
]
# fmt: on


def _levels(factor) -> list | tuple:
    return factor.values if factor.values is not None else (factor.low, factor.high)


@pytest.mark.parametrize("row", ROWS, ids=[r.text[:60] for r in ROWS])
def test_phrasing_parses_to_the_whole_goal(row: Row):
    g = parse_goal(row.text)
    assert (g.shape, g.factor.key, g.task) == (row.shape, row.key, row.task)
    levels = _levels(g.factor)
    assert levels == row.levels and type(levels) is type(row.levels)  # two named values are never a sweep
    assert [type(v) for v in levels] == [type(v) for v in row.levels]  # 4, not 4.0; True, not 1
    secondary = (g.secondary.key, _levels(g.secondary)) if g.secondary is not None else None
    assert secondary == row.secondary
    assert g.statistic == row.statistic
    assert g.fixed == row.fixed
    assert g.steps == row.steps
    if row.criterion is None:
        assert g.criterion == Criterion()
    else:
        assert (g.criterion.kind, g.criterion.value) == (row.criterion[0], pytest.approx(row.criterion[1]))


def test_the_battery_covers_every_shape_task_and_listed_knob():
    assert {r.shape for r in ROWS} == {"minimum", "maximum", "best", "effect", "compare"}
    assert {r.task for r in ROWS} == {"arithmetic", "countdown", "calculator"}
    clip = {"swarm.algorithm.clip_low", "swarm.algorithm.clip_high"}
    listed = {MERGE, POOL, LORA, KL, "temperature", LR, BS, GS, "max_tokens", LOSS, ADV, RANK} | clip
    assert listed <= {r.key for r in ROWS}
    assert len(ROWS) >= 40


def test_grpo_against_a_loss_is_said_aloud():
    g = parse_goal("Is GSPO better than GRPO on the calculator task?")
    said = "'grpo' is compared as policy loss ppo_clip: GRPO is the grpo advantage with the token-level"
    assert any(a.startswith(said) for a in g.assumptions)
    assert "which policy loss trains calculator better, over policy loss in {gspo, ppo_clip}" in g.describe()


def test_speed_words_keep_the_auc_assumption():
    said = "speed of learning ('efficiently', 'fastest') is scored by the area under the held-out accuracy"
    for text in (
        "Which trains countdown fastest, lr 1e-5 or lr 1e-4?",
        "What is the effect of the KL coefficient on the speed of learning countdown?",
    ):
        assert any(a.startswith(said) for a in parse_goal(text).assumptions)


@pytest.mark.parametrize(
    "text, problem, understood",
    [
        (
            "Is GSPO better than RLOO on countdown?",
            "it names values of different variables (gspo (policy loss), rloo (advantage estimator))",
            "task=countdown, shape=compare",
        ),
        (
            "Compare temperature 0.7 on countdown",
            "names no two values of one variable",
            "shape=compare, variables=['sampling temperature']",
        ),
        (
            "Does batch size or group size matter?",
            "names no two values of one variable",
            "variables=['batch size', 'group size']",
        ),
        (
            "effect of the widget size on arithmetic",
            "it names no variable to study: 'widget size' is not a variable it knows (nearest: step size, group size",
            "task=arithmetic",
        ),
        ("Compare rank 4 with rank 4.5", "LoRA rank must be a whole number", "variable=LoRA rank"),
        (
            "best lr for countdown with full weights and lora rank 8",
            "LoRA rank needs swarm.lora.enabled=True, but the goal sets False",
            "fixed={'swarm.lora.rank': 8, 'swarm.lora.enabled': False}",
        ),
        (
            "Does LoRA matter for countdown, and whether lora rank changes that",
            "LoRA rank needs swarm.lora.enabled=True, which the goal varies",
            "variable=LoRA, range=LoRA in {False, True}",
        ),
    ],
)
def test_refused_phrasings_say_what_was_understood(text, problem, understood):
    with pytest.raises(GoalParseError) as info:
        parse_goal(text)
    msg = str(info.value)
    assert problem in msg and understood in msg
    assert "lower clip ratio" in msg  # the variables that do work are listed
