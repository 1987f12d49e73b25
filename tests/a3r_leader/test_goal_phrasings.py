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
CLIP, STEPS = "swarm.algorithm.clip", "swarm.training.max_steps"
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
    refine: bool = False  # the goal asks for values between the named ones


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

# Issue 25: how researchers ask, written as they write (mixed forms, lists, ranges, units, typos). The first
# ten are the phrasings a new user tried on main edc2a27: misread (the first four) or refused (the rest).
ROWS += [
    Row('What max_tokens budget does countdown need: 32, 64 or 128?', 'minimum', 'max_tokens', [32, 64, 128], 'countdown'),
    Row("What's the best learning rate for the calculator task, somewhere from 3e-6 to 1e-4?", 'best', LR, (3e-06, 0.0001), 'calculator'),
    Row('Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?', 'best', LR, [3e-06, 1.5e-05, 6e-05], 'arithmetic'),
    Row('Which learning rate trains arithmetic fastest: 3e-6, 1.5e-5 or 6e-5?', 'best', LR, [3e-06, 1.5e-05, 6e-05], 'arithmetic', statistic='auc'),
    Row('best clip ratio for countdown: 0.1, 0.2 or 0.3', 'best', CLIP, [0.1, 0.2, 0.3], 'countdown'),
    Row('which of temperature 0.6, 0.9 and 1.2 gives the best accuracy on countdown?', 'best', 'temperature', [0.6, 0.9, 1.2], 'countdown'),
    Row('Does token-mode merging train calculator better than text-mode merging?', 'compare', MERGE, ['token', 'text'], 'calculator'),
    Row('how many training steps does arithmetic need: 10, 20 or 40?', 'minimum', STEPS, [10, 20, 40], 'arithmetic'),
    Row('minimum number of episodes per batch that still trains arithmetic', 'minimum', BS, (1, 64), 'arithmetic'),
    Row('how many episodes per batch are enough for arithmetic: 8, 16 or 32?', 'minimum', BS, [2, 4, 8], 'arithmetic'),
    Row('whats the best learnign rate for aritmetic: 1e-5 / 3e-5 / 1e-4', 'best', LR, [1e-05, 3e-05, 0.0001], 'arithmetic'),
    Row('How small can the group size be for countdown?', 'minimum', GS, (2, 16), 'countdown'),
    Row('How few training steps does countdown need (5 to 40)?', 'minimum', STEPS, (5, 40), 'countdown'),
    Row('Is 16 max tokens enough for arithmetic, or do we need 32 or 64?', 'minimum', 'max_tokens', [16, 32, 64], 'arithmetic'),
    Row("What's the smallest batch size we can get away with on calculator: 2, 4, 8 or 16?", 'minimum', BS, [2, 4, 8, 16], 'calculator'),
    Row('which KL coefficient works best on countdown: 0, 0.01 or 0.1?', 'best', KL, [0.0, 0.01, 0.1], 'countdown'),
    Row('Which lora rank is best for arithmetic: 4, 8, 16 or 32?', 'best', RANK, [4, 8, 16, 32], 'arithmetic', fixed={LORA: True}),
    Row('best lr for countdown (1e-6 to 1e-4), refine around the best', 'best', LR, (1e-06, 0.0001), 'countdown'),
    Row('Which temperature gives the best held-out accuracy on arithmetic, anywhere between 0.3 and 1.5?', 'best', 'temperature', (0.3, 1.5), 'arithmetic'),
    Row('optimal group size for calculator in 2/4/8/16', 'best', GS, [2, 4, 8, 16], 'calculator'),
    Row('Tune the learning rate for countdown over 1e-6..1e-4', 'best', LR, (1e-06, 0.0001), 'countdown'),
    Row('What is the best clip epsilon for arithmetic between 0.1 and 0.4?', 'best', CLIP, (0.1, 0.4), 'arithmetic'),
    Row('compare clip ratio 0.2 with 0.3 on arithmetic', 'compare', CLIP, [0.2, 0.3], 'arithmetic'),
    Row('Does the clip ratio matter for countdown?', 'effect', CLIP, (0.1, 0.3), 'countdown'),
    Row('clip-higher ratio 0.28 vs 0.2 on countdown with dapo', 'compare', 'swarm.algorithm.clip_high', [0.28, 0.2], 'countdown', fixed={LOSS: 'dapo'}),
    Row('Which merge mode trains calculator best: off, token or text?', 'best', MERGE, ['off', 'token', 'text'], 'calculator'),
    Row('does timeline merging matter for the calculator agent?', 'effect', MERGE, ['off', 'token', 'text'], 'calculator'),
    Row('Compare no merging with token merging on calculator', 'compare', MERGE, ['off', 'token'], 'calculator'),
    Row('text-level vs token-level merging on calculator', 'compare', MERGE, ['text', 'token'], 'calculator'),
    Row('Is merging by tokens better than merging by text for calculator?', 'compare', MERGE, ['token', 'text'], 'calculator'),
    Row('smallest max_new_tokens that still trains countdown', 'minimum', 'max_tokens', (16, 128), 'countdown'),
    Row("What's the least number of training steps that still trains arithmetic (5 to 40)?", 'minimum', STEPS, (5, 40), 'arithmetic'),
    Row('How many optimizer steps does countdown need: 10, 20, 30 or 40?', 'minimum', STEPS, [10, 20, 30, 40], 'countdown'),
    Row('effect of training steps from 5 to 40 on arithmetic', 'effect', STEPS, (5, 40), 'arithmetic'),
    Row('Does it matter if we train for 10 or 20 training steps on arithmetic?', 'compare', STEPS, [10, 20], 'arithmetic'),
    Row('minimum episodes per batch for countdown: 16, 32 or 64', 'minimum', BS, [4, 8, 16], 'countdown'),
    Row('how small can episodes per step be while still training arithmetic (8 to 64 episodes per step)', 'minimum', BS, (2, 16), 'arithmetic'),
    Row('With group size 8, how many episodes per batch does arithmetic need: 16, 32 or 64?', 'minimum', BS, [2, 4, 8], 'arithmetic', fixed={GS: 8}),
    Row('episodes per batch 12 vs 16 on arithmetic', 'compare', BS, [3, 4], 'arithmetic'),
    Row('Is batch size 4 or 16 better for countdown?', 'compare', BS, [4, 16], 'countdown'),
    Row('Which is better for countdown, batch size 4 or batch size 16?', 'compare', BS, [4, 16], 'countdown'),
    Row('bs 4 vs bs 16 vs bs 64 on arithmetic', 'best', BS, [4, 16, 64], 'arithmetic'),
    Row('batch size: 2, 4, 8 or 16 -- which trains arithmetic best?', 'best', BS, [2, 4, 8, 16], 'arithmetic'),
    Row('Which group size trains countdown best, 2, 4 or 8?', 'best', GS, [2, 4, 8], 'countdown'),
    Row('num generations 4 vs 8 on arithmetic', 'compare', GS, [4, 8], 'arithmetic'),
    Row("What's the best number of completions per prompt for countdown, 2 to 16?", 'best', GS, (2, 16), 'countdown'),
    Row('Does KL matter for arithmetic?', 'effect', KL, (0.001, 0.1), 'arithmetic'),
    Row('Is a KL penalty of 0.05 better than none (0) on countdown?', 'compare', KL, [0.05, 0.0], 'countdown'),
    Row('best kl beta for calculator in {0, 0.001, 0.01, 0.1}', 'best', KL, [0.0, 0.001, 0.01, 0.1], 'calculator'),
    Row('How large can the KL coefficient be and still train arithmetic?', 'maximum', KL, (0.001, 0.1), 'arithmetic'),
    Row('Which sampling temperature trains countdown best: 0.7 or 1.0?', 'compare', 'temperature', [0.7, 1.0], 'countdown'),
    Row('Does temperature affect how fast arithmetic learns?', 'effect', 'temperature', (0.5, 1.5), 'arithmetic', statistic='auc'),
    Row('temperature 0.6 vs 1.0 on countdown', 'compare', 'temperature', [0.6, 1.0], 'countdown'),
    Row('best temp for arithmetic between 0.4 and 1.2', 'best', 'temperature', (0.4, 1.2), 'arithmetic'),
    Row('effect of temperature (0.5 to 1.5) on countdown', 'effect', 'temperature', (0.5, 1.5), 'countdown'),
    Row('lowest temperature that still trains countdown', 'minimum', 'temperature', (0.5, 1.5), 'countdown'),
    Row('What LoRA rank does arithmetic need: 4, 8 or 16?', 'minimum', RANK, [4, 8, 16], 'arithmetic', fixed={LORA: True}),
    Row('how small can the LoRA rank be on countdown with smollm2?', 'minimum', RANK, (2, 64), 'countdown', fixed={MODEL: 'smollm2-135m', LORA: True}),
    Row('Does lora rank matter for calculator (2 to 64)?', 'effect', RANK, (2, 64), 'calculator', fixed={LORA: True}),
    Row('lora rank 8 versus 64 on countdown', 'compare', RANK, [8, 64], 'countdown', fixed={LORA: True}),
    Row('Is LoRA better than full weights on arithmetic?', 'compare', LORA, [True, False], 'arithmetic'),
    Row('full fine-tuning vs lora on countdown', 'compare', LORA, [False, True], 'countdown'),
    Row('LoRA or full-parameter training: which trains arithmetic better?', 'compare', LORA, [True, False], 'arithmetic'),
    Row('best lora alpha for arithmetic: 8, 16, 32 or 64', 'best', 'swarm.lora.alpha', [8, 16, 32, 64], 'arithmetic', fixed={LORA: True}),
    Row('Is PPO better than GSPO on countdown?', 'compare', LOSS, ['ppo_clip', 'gspo'], 'countdown'),
    Row('which policy loss trains arithmetic best: gspo, dapo or ppo_clip?', 'best', LOSS, ['gspo', 'dapo', 'ppo_clip'], 'arithmetic'),
    Row('gspo vs dapo vs ppo on countdown', 'best', LOSS, ['gspo', 'dapo', 'ppo_clip'], 'countdown'),
    Row('Compare GRPO with RLOO advantages on calculator', 'compare', ADV, ['grpo', 'rloo'], 'calculator'),
    Row('Does the advantage estimator matter for arithmetic?', 'effect', ADV, ['grpo', 'rloo'], 'arithmetic'),
    Row('Is Dr. GRPO better than GRPO on countdown?', 'compare', STD, [False, True], 'countdown', fixed={ADV: 'grpo'}),
    Row("what's the effect of std scaling on countdown", 'effect', STD, [False, True], 'countdown'),
    Row('smallest learning rate that still trains arithmetic in {1e-7, 1e-6, 1e-5}', 'minimum', LR, [1e-07, 1e-06, 1e-05], 'arithmetic'),
    Row('Largest lr that still trains countdown, between 1e-5 and 1e-3', 'maximum', LR, (1e-05, 0.001), 'countdown'),
    Row('How high can the learning rate go on calculator before training breaks (1e-5 to 1e-3)?', 'maximum', LR, (1e-05, 0.001), 'calculator'),
    Row('lr 1e-5 or 3e-5: which trains countdown faster?', 'compare', LR, [1e-05, 3e-05], 'countdown', statistic='auc'),
    Row('Compare learning rates 1e-5, 3e-5 and 1e-4 on arithmetic', 'best', LR, [1e-05, 3e-05, 0.0001], 'arithmetic'),
    Row('Which learning rate, 1e-5 or 1e-4, trains calculator best?', 'compare', LR, [1e-05, 0.0001], 'calculator'),
    Row('learning rate sweep 1e-6 to 1e-4 on countdown', 'effect', LR, (1e-06, 0.0001), 'countdown'),
    Row('Does the learning rate matter between 1e-6 and 1e-4 for countdown?', 'effect', LR, (1e-06, 0.0001), 'countdown'),
    Row('effect of lr on calculator with batch size 8 and group size 4', 'effect', LR, (1e-06, 0.0001), 'calculator', fixed={BS: 8, GS: 4}),
    Row('best lr for arithmetic in [1e-6, 1e-4] using gspo in 30 steps', 'best', LR, (1e-06, 0.0001), 'arithmetic', fixed={LOSS: 'gspo'}, steps=30),
    Row('What learning rate should I use for countdown: 3 x 10^-6, 1.5 x 10^-5 or 6 x 10^-5?', 'best', LR, [3e-06, 1.5e-05, 6e-05], 'countdown'),
    Row('best learning-rate for arithmetic: .00001, .00003 or .0001', 'best', LR, [1e-05, 3e-05, 0.0001], 'arithmetic'),
    Row('best lr for arithmetic: 1e-5, 3e-5, 1e-4, and refine between them', 'best', LR, [1e-05, 3e-05, 0.0001], 'arithmetic', refine=True),
    Row('How does max response length (16 to 128) affect countdown?', 'effect', 'max_tokens', (16, 128), 'countdown'),
    Row('Does the token budget matter for calculator?', 'effect', 'max_tokens', (16, 128), 'calculator'),
    Row('max tokens 32 vs 128 on countdown', 'compare', 'max_tokens', [32, 128], 'countdown'),
    Row("What's the smallest response length that still trains calculator, 16 to 256?", 'minimum', 'max_tokens', (16, 256), 'calculator'),
    Row('what generation length does arithmetic need, 8, 16 or 32 tokens?', 'minimum', 'max_tokens', [8, 16, 32], 'arithmetic'),
    Row('best PPO epochs for countdown: 1, 2 or 4', 'best', 'swarm.training.ppo_epochs', [1, 2, 4], 'countdown'),
    Row('Does weight decay matter for arithmetic?', 'effect', 'swarm.training.weight_decay', (0.001, 0.1), 'arithmetic'),
    Row('best weight decay for countdown between 0.001 and 0.1', 'best', 'swarm.training.weight_decay', (0.001, 0.1), 'countdown'),
    Row('Does gradient clipping matter (0.1 to 10) for countdown?', 'effect', 'swarm.training.max_grad_norm', (0.1, 10.0), 'countdown'),
    Row('effect of the entropy bonus on calculator', 'effect', 'swarm.algorithm.entropy_coef', (0.0001, 0.01), 'calculator'),
    Row('lowest entropy coefficient that still trains countdown from 1e-4 to 1e-2', 'minimum', 'swarm.algorithm.entropy_coef', (0.0001, 0.01), 'countdown'),
    Row('best mini-batch size for arithmetic in {8, 16, 32}', 'best', 'swarm.training.mini_batch_size', [8, 16, 32], 'arithmetic'),
    Row('which pool policy is best for countdown: task count, episode count or dynamic sampling?', 'best', POOL, ['task_count', 'episode_count', 'nondegenerate_task_count'], 'countdown'),
    Row('Is dynamic sampling better than task count on arithmetic?', 'compare', POOL, ['nondegenerate_task_count', 'task_count'], 'arithmetic'),
    Row('Does the loss aggregation matter for countdown?', 'effect', 'swarm.algorithm.agg', ['token_mean', 'seq_mean_token_mean', 'seq_mean_token_sum_norm'], 'countdown'),
    Row('token_mean vs seq_mean_token_mean aggregation on arithmetic', 'compare', 'swarm.algorithm.agg', ['token_mean', 'seq_mean_token_mean'], 'arithmetic'),
    Row('smallest batch size that reaches accuracy 0.6 on arithmetic, 1 to 32', 'minimum', BS, (1, 32), 'arithmetic', criterion=('absolute', 0.6)),
    Row('smallest group size within 10% of the best on countdown, group size 2 to 16', 'minimum', GS, (2, 16), 'countdown', criterion=('relative', 0.9)),
    Row('minimal batch size that still keeps 80% of the best gain on calculator (2 to 32)', 'minimum', BS, (2, 32), 'calculator', criterion=('relative', 0.8)),
    Row('best lr for countdown between 1e-6 and 1e-4, and whether group size (4 to 16) changes that', 'best', LR, (1e-06, 0.0001), 'countdown', secondary=(GS, (4, 16))),
    Row('smallest batch size for arithmetic (1 to 64); does the learning rate change it?', 'minimum', BS, (1, 64), 'arithmetic', secondary=(LR, (1e-06, 0.0001))),
    Row('Which learning rate (1e-5, 3e-5 or 1e-4) learns countdown quickest?', 'best', LR, [1e-05, 3e-05, 0.0001], 'countdown', statistic='auc'),
    Row('what is the fewest number of tasks per step that still trains calculator?', 'minimum', BS, (1, 64), 'calculator'),
    Row('how much does the batch size matter for countdown?', 'effect', BS, (1, 64), 'countdown'),
    Row('is the group size important for arithmetic?', 'effect', GS, (2, 16), 'arithmetic'),
    Row('sweep the kl coef from 0.001 to 0.1 on arithmetic', 'effect', KL, (0.001, 0.1), 'arithmetic'),
    Row('best lr for countdonw in {1e-5, 3e-5}', 'best', LR, [1e-05, 3e-05], 'countdown'),
    Row('smalest batch size that still trains arithmetic', 'minimum', BS, (1, 64), 'arithmetic'),
    Row('Whcih temperature is best for arithmetic: 0.6, 0.8 or 1.0?', 'best', 'temperature', [0.6, 0.8, 1.0], 'arithmetic'),
    Row('effect of the tempreature on countdown', 'effect', 'temperature', (0.5, 1.5), 'countdown'),
]

# A primary variable's range or values with a second knob's values: numbers written before a unit ("8 and 32
# training steps", "16 and 64 max tokens") belong to that knob, which is crossed as the second factor, and a
# range in parentheses after the variable's name is its range. The first was read as lr in {8, 32}.
ROWS += [
    Row('best learning rate for arithmetic (1e-6 to 1e-4) at 8 and 32 training steps', 'best', LR, (1e-06, 0.0001), 'arithmetic', secondary=(STEPS, [8, 32])),
    Row('best learning rate for arithmetic (1e-6 to 1e-4) at 8 or 32 training steps', 'best', LR, (1e-06, 0.0001), 'arithmetic', secondary=(STEPS, [8, 32])),
    Row('best lr for countdown between 1e-6 and 1e-4 at 8 and 32 steps', 'best', LR, (1e-06, 0.0001), 'countdown', secondary=(STEPS, [8, 32])),
    Row('which batch size trains best (2, 4 or 8) with 16 and 64 max tokens', 'best', BS, [2, 4, 8], 'arithmetic', secondary=('max_tokens', [16, 64])),
    Row('best batch size for calculator: 2, 4 or 8, at 16 and 64 max tokens', 'best', BS, [2, 4, 8], 'calculator', secondary=('max_tokens', [16, 64])),
    Row('minimum steps (1-8) at lr 3e-6 and 3e-5', 'minimum', STEPS, (1, 8), 'arithmetic', secondary=(LR, [3e-06, 3e-05])),
    Row('smallest group size (2 to 16) for countdown at 10 and 40 training steps', 'minimum', GS, (2, 16), 'countdown', secondary=(STEPS, [10, 40])),
    Row('best lr (1e-6 to 1e-4) for countdown with batch size 4 and 8', 'best', LR, (1e-06, 0.0001), 'countdown', secondary=(BS, [4, 8])),
    Row('best temperature for countdown (0.5 to 1.5) at max tokens 32 and 64', 'best', 'temperature', (0.5, 1.5), 'countdown', secondary=('max_tokens', [32, 64])),
    Row('which lr is best for arithmetic, 1e-5, 3e-5 or 1e-4, at 16 and 64 tokens', 'best', LR, [1e-05, 3e-05, 0.0001], 'arithmetic', secondary=('max_tokens', [16, 64])),
    Row('best lr for countdown (1e-6 to 1e-4) at 20 training steps', 'best', LR, (1e-06, 0.0001), 'countdown', steps=20),
    Row('which group size is best for countdown: 2, 4 or 8, at batch sizes 4 and 16', 'best', GS, [2, 4, 8], 'countdown', secondary=(BS, [4, 16])),
    Row('effect of group size (2 to 16) on calculator at lr 1e-5 and 1e-4', 'effect', GS, (2, 16), 'calculator', secondary=(LR, [1e-05, 0.0001])),
    Row('smallest max tokens (16 to 128) for countdown at temperature 0.6 and 1.0', 'minimum', 'max_tokens', (16, 128), 'countdown', secondary=('temperature', [0.6, 1.0])),
    Row('how many training steps does arithmetic need (5 to 40) at batch sizes 4 and 16', 'minimum', STEPS, (5, 40), 'arithmetic', secondary=(BS, [4, 16])),
    Row('best kl coef for countdown in {0, 0.01, 0.1} with group sizes 4 and 8', 'best', KL, [0.0, 0.01, 0.1], 'countdown', secondary=(GS, [4, 8])),
    Row('compare lr 1e-5 with 1e-4 at 10 and 40 training steps on countdown', 'compare', LR, [1e-05, 0.0001], 'countdown', secondary=(STEPS, [10, 40])),
    Row('best lr for countdown between 1e-6 and 1e-4 with batch size 4 to 16', 'best', LR, (1e-06, 0.0001), 'countdown', secondary=(BS, (4, 16))),
    Row('best lr for calculator: 1e-5, 3e-5 or 1e-4, at 8 and 32 training steps with group size 8', 'best', LR, [1e-05, 3e-05, 0.0001], 'calculator', secondary=(STEPS, [8, 32]), fixed={GS: 8}),
    # a bare unit after numbers takes only those numbers: the values after it are the studied variable's
    Row('best lr for arithmetic in 20 steps: 1e-5, 3e-5 or 1e-4', 'best', LR, [1e-05, 3e-05, 0.0001], 'arithmetic', steps=20),
    Row('which batch size is best for countdown with 32 tokens: 4, 8 or 16', 'best', BS, [4, 8, 16], 'countdown', fixed={'max_tokens': 32}),
    Row('best lr for countdown at 8 and 32 steps: 1e-5 or 1e-4', 'best', LR, [1e-05, 0.0001], 'countdown', secondary=(STEPS, [8, 32])),
    Row('Which learning rate (1e-5, 3e-5 or 1e-4) trains countdown fastest at 16 and 32 max tokens?', 'best', LR, [1e-05, 3e-05, 0.0001], 'countdown', secondary=('max_tokens', [16, 32]), statistic='auc'),
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
    assert g.refine == row.refine
    if row.criterion is None:
        assert g.criterion == Criterion()
    else:
        assert (g.criterion.kind, g.criterion.value) == (row.criterion[0], pytest.approx(row.criterion[1]))


def test_the_battery_covers_every_shape_task_and_listed_knob():
    assert {r.shape for r in ROWS} == {"minimum", "maximum", "best", "effect", "compare"}
    assert {r.task for r in ROWS} == {"arithmetic", "countdown", "calculator"}
    clip = {"swarm.algorithm.clip_low", "swarm.algorithm.clip_high"}
    listed = {
        MERGE,
        POOL,
        LORA,
        KL,
        "temperature",
        LR,
        BS,
        GS,
        "max_tokens",
        LOSS,
        ADV,
        RANK,
        CLIP,
        STEPS,
    } | clip
    assert listed <= {r.key for r in ROWS}
    assert len(ROWS) >= 120 and len({r.text for r in ROWS}) == len(ROWS)


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


@pytest.mark.parametrize(
    "text, unknown",
    [
        ("what's the best widget count for countdown: 2, 4 or 8?", "'widget count' is not a variable it knows"),
        ("effect of the reward shaping on arithmetic", "'reward shaping' is not a variable it knows"),
        ("find the smallest vocabulary that still trains calculator", "'vocabulary' is not a variable it knows"),
    ],
)
def test_a_refusal_names_what_it_did_not_understand_and_the_closest_forms_that_work(text, unknown):
    with pytest.raises(GoalParseError) as info:
        parse_goal(text)
    e = info.value
    assert unknown in e.problem and unknown in str(e)
    assert len(e.closest) == 3 and "Closest forms that work:\n  - " + e.closest[0] in str(e)
    for form in e.closest:  # the forms it offers are ones it reads
        parse_goal(form)


@pytest.mark.parametrize(
    "text, problem",
    [
        # numbers in a unit that names no variable: whose levels they are is unknown, so never a guess
        ("best lr for arithmetic (1e-6 to 1e-4) with 100 and 200 episodes", "'100 and 200 episodes' gives values in 'episodes'"),
        ("which temperature is best for countdown (0.5 to 1.5) with 50 or 100 rollouts", "'50 or 100 rollouts' gives values in 'rollouts'"),
        # one variable given a range and a separate set
        ("best lr for countdown (1e-6 to 1e-4) in {1e-5, 3e-5}", "both a range (1e-6 to 1e-4) and a set of values (1e-5, 3e-5)"),
        # levels for two variables besides the studied one: none is dropped
        (
            "best lr for arithmetic (1e-6 to 1e-4) at batch size 4 and 8 and 10 and 20 training steps",
            "it gives levels to more than one variable besides learning rate (batch size (4, 8), training steps (10, 20))",
        ),
        (
            "best lr for arithmetic (1e-6 to 1e-4) at 8 and 32 training steps, and whether group size changes that",
            "more than one variable besides learning rate (group size from 2 to 16, training steps (8, 32))",
        ),
        # numbers on both sides of a variable the goal does not study: whose they are is not said
        ("best lr for countdown with 32 max tokens between 1e-6 and 1e-4", "'32 max tokens' is followed by more numbers (1e-06 to 0.0001)"),
        ("best lr for countdown with 32 max tokens, 1e-5 or 1e-4", "'32 max tokens' is followed by more numbers (1e-05, 0.0001)"),
        # no question asked: refused, not read as some shape
        ("lr from 1e-5 to 1e-4 at batch sizes 4 and 8", "it asks no recognised question"),
    ],
)
def test_numbers_it_cannot_attribute_are_refused_by_name(text, problem):
    with pytest.raises(GoalParseError) as info:
        parse_goal(text)
    assert problem in str(info.value)


def test_closest_forms_keep_the_variable_and_task_it_did_understand():
    with pytest.raises(GoalParseError) as info:
        parse_goal("group size for countdown, please")
    e = info.value
    assert e.problem.startswith("it asks no recognised question")
    assert all("group size" in f and "countdown" in f for f in e.closest)
    assert all(parse_goal(f).factor.key == GS for f in e.closest)


def test_spelling_slips_are_read_through_and_said_aloud():
    g = parse_goal("whats the best learnign rate for aritmetic: 1e-5 / 3e-5 / 1e-4")
    assert "read 'learnign' as 'learning'" in g.assumptions and "read 'aritmetic' as 'arithmetic'" in g.assumptions
    # inflections and short words are not slips: "trained" stays, "lr" stays
    g = parse_goal("smallest lr that still trained countdown, 1e-6 to 1e-4")
    assert not [a for a in g.assumptions if a.startswith("read '")]


def test_episodes_per_batch_are_divided_by_the_group_size_and_said_aloud():
    g = parse_goal("how many episodes per batch are enough for arithmetic: 8, 16 or 32?")
    assert g.factor.values == [2, 4, 8]
    assert "16, 32, 64" not in " ".join(g.assumptions)
    assert any("8, 16, 32 episodes at group size 4 are batch size 2, 4, 8" in a for a in g.assumptions)
    with pytest.raises(GoalParseError, match="not all multiples of 4"):
        parse_goal("episodes per batch 10 vs 16 on arithmetic")
