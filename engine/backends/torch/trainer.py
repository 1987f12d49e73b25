"""The torch trainer: one policy-gradient step on a batch of finished episodes, in place on the live model.

The model object is shared with the inference engine; the server pauses inference around `train_step`,
so when it resumes the new weights are already the ones serving (no copy, no sync). Full weights or a
peft LoRA adapter train the same way: only parameters with requires_grad reach the optimizer.

Old log-probs: the server drains in-flight training episodes before a step (ROLLING_POST), so every
episode in a batch was sampled from the current weights, and the recorded values are log_softmax of the
same untempered logits the trainer computes. In float32 on the torch backend the two agree to about 1e-5
nats a token, so the ratio uses the recorded values. In bfloat16, or from vLLM's kernels, they differ by
about 0.04 nats a token, enough for a GSPO sequence clip of 3e-3 to treat most samples as off-policy; there
(`training.old_logprobs`, see `engine.training.algo_config.recomputes_old_logprobs`) the trainer
recomputes them on the step's weights before the first update: the first mini-batch's come free with its
own forward, later mini-batches' cost a forward without gradient. The step logs how far the recorded values
were (`old_logp_gap`, per trainable token; `old_logp_gap_seq_max`, the largest gap of a sequence's mean).
The model stays in eval mode while training so dropout cannot make the two disagree.

A half-precision model (`model.dtype` bfloat16 or float16) trains through float32 master copies of its
trainable parameters: AdamW steps the copies and the model gets them rounded. Stepping bfloat16 weights
directly loses the update: at lr 1e-5 one AdamW step changed 2% of SmolLM2-135M's bfloat16 weights (the
rest rounded back), where it changes every float32 one. A checkpoint holds the model's half-precision
weights, so a resumed run restarts its masters from them.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from engine.algorithms import get_advantage_estimator, get_policy_loss
from engine.algorithms.losses import aggregate_denominator, entropy_from_logits, token_logprobs
from engine.backends.torch.forward import (
    ForwardPlan,
    Layout,
    packed_length,
    pass_groups,
    plan_forward,
    scatter_rows,
    supports_packing,
    trainable_logits,
    trainable_logits_stacked,
    trainable_mask,
)
from engine.backends.torch.kv import cache_kwarg
from engine.config import SwarmConfig
from engine.training.algo_config import advantage_config, loss_config, recomputes_old_logprobs
from engine.training.batch import Collated, build_samples, chunks, collate, prompt_then_length
from engine.training.metrics import reward_by_client
from engine.types import EpisodeResult


def adamw(params: list[torch.nn.Parameter], **kw: Any) -> torch.optim.AdamW:
    """AdamW with torch's fused kernel where it supports these parameters (CPU and CUDA floating point),
    else the plain one. Same update up to float rounding; on SmolLM2-135M on CPU a step took 0.2 s
    instead of 0.7-0.8 s. (transformers' Trainer also defaults to the fused kernel.)"""
    try:
        return torch.optim.AdamW(params, fused=True, **kw)
    except RuntimeError:  # a device or dtype the fused kernel does not cover
        return torch.optim.AdamW(params, **kw)


@dataclass
class MicroForward:
    """One micro-batch's forward: columns from `start` on (see engine.backends.torch.forward)."""

    start: int
    logp_BT: torch.Tensor  # (B, T') log pi of each target, with grad
    mask_BT: torch.Tensor  # (B, T') trainable targets
    ref_logp_BT: torch.Tensor | None  # (B, T') reference policy, no grad
    entropy_BT: torch.Tensor | None  # (B, T')


@dataclass
class OldLogprobGap:
    """Recomputed old log-probs replacing the recorded ones, and how far apart the two were."""

    abs_sum: float = 0.0
    tokens: int = 0
    seq_max: float = 0.0  # the largest |difference of a sequence's mean| over its trainable tokens

    def adopt(self, c: Collated, start: int, logp_BT: torch.Tensor, mask_BT: torch.Tensor) -> None:
        """Write `logp_BT` (the old policy's log-probs from column `start` on) into `c.old_logp_BT` at the
        trainable targets, in place, and count the gap."""
        old_BT = c.old_logp_BT[:, start:]
        m_BT = mask_BT > 0
        new_BT = logp_BT.detach().to(old_BT.dtype)
        d_BT = torch.where(m_BT, new_BT - old_BT, torch.zeros_like(old_BT))
        n_B = m_BT.sum(-1)
        self.abs_sum += float(d_BT.abs().sum())
        self.tokens += int(n_B.sum())
        if bool((n_B > 0).any()):
            seq_B = d_BT.sum(-1)[n_B > 0] / n_B[n_B > 0]
            self.seq_max = max(self.seq_max, float(seq_B.abs().max()))
        old_BT.copy_(torch.where(m_BT, new_BT, old_BT))

    def metrics(self) -> dict[str, float]:
        return {"old_logp_gap": self.abs_sum / max(1, self.tokens), "old_logp_gap_seq_max": self.seq_max}


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """Log-softmax in at least float32: half-precision logits are upcast, a float64 model keeps float64 (the
    accumulation tests compare gradients in float64, where summation order costs ~1e-16, not ~1e-7)."""
    return t if t.dtype == torch.float64 else t.float()


class TorchTrainer:
    def __init__(self, model: torch.nn.Module, pad_id: int, cfg: SwarmConfig) -> None:
        self.model = model
        self.pad_id = pad_id
        self.cfg = cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("model has no trainable parameters")
        t = cfg.training
        # float32 masters for half-precision parameters (see the module docstring); None: the model's own.
        self.masters = (
            [p.detach().float().clone() for p in self.params]
            if any(p.dtype in (torch.bfloat16, torch.float16) for p in self.params)
            else None
        )
        self.optimizer = adamw(self.masters or self.params, lr=t.lr, weight_decay=t.weight_decay)
        self.advantage_fn = get_advantage_estimator(cfg.algorithm.advantage)
        self.loss_fn = get_policy_loss(cfg.algorithm.policy_loss)
        self.adv_cfg = advantage_config(cfg)
        self.loss_cfg = loss_config(cfg)
        self.recomputes_old = recomputes_old_logprobs(cfg)
        self.global_step = 0
        self.cache_kwarg = cache_kwarg(model)
        self.packable = supports_packing(model)
        self.hidden_size = getattr(getattr(model, "config", None), "hidden_size", None)

    def _reference(self):
        """Context in which the model computes reference log-probs: LoRA disables its adapter."""
        disable = getattr(self.model, "disable_adapter", None)
        return disable() if disable is not None else nullcontext()

    def extra_state(self) -> dict[str, Any]:
        """Trainer state beyond weights and optimizer that a checkpoint must keep (JSON-serialisable)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore `extra_state()` from a checkpoint's state."""

    def plan(self, c: Collated) -> ForwardPlan:
        """How a collated micro-batch goes through the network (see engine.backends.torch.forward)."""
        return plan_forward(
            c, share_prefix=self.cfg.training.share_prefix, pack=self.packable, hidden_size=self.hidden_size
        )

    def forward(self, c: Collated, *, need_ref: bool, entropy: bool = False) -> MicroForward:
        """Per-token log-probs of a collated micro-batch's targets from its first trainable column on
        (grad), its trainable mask there, and when asked reference log-probs and entropy."""
        return self.forward_pass([c], [self.plan(c)], need_ref=need_ref, entropy=entropy)[0]

    def forward_pass(
        self, cs: list[Collated], plans: list[ForwardPlan], *, need_ref: bool, entropy: bool = False
    ) -> list[MicroForward]:
        """`forward` of several micro-batches in one pass through the network (all packed, see
        `trainable_logits_stacked`; a single micro-batch may take any layout)."""

        def logits() -> list[torch.Tensor]:
            if len(cs) == 1:
                return [trainable_logits(self.model, cs[0], plans[0], self.cache_kwarg)]
            return trainable_logits_stacked(self.model, cs, plans)

        ref_logits: list[torch.Tensor | None] = [None] * len(cs)
        if need_ref:
            with torch.no_grad(), self._reference():
                ref_logits = list(logits())
        return [
            self._micro_forward(c, plan, lg, ref, entropy)
            for c, plan, lg, ref in zip(cs, plans, logits(), ref_logits, strict=True)
        ]

    def _micro_forward(
        self, c: Collated, plan: ForwardPlan, logits_NV: torch.Tensor, ref_logits_NV: torch.Tensor | None, entropy: bool
    ) -> MicroForward:
        """Log-probs (and reference log-probs, entropy) from a micro-batch's logits at its trainable targets,
        scattered back to [B, T'] with zeros where no loss is taken."""
        sel = trainable_mask(c, plan)
        targets_1N = c.target_ids_BT[:, plan.start :][sel][None]
        ref_logp = None
        if ref_logits_NV is not None:
            ref_logp = scatter_rows(sel, token_logprobs(at_least_float32(ref_logits_NV)[None], targets_1N)[0])
        logits_1NV = at_least_float32(logits_NV)[None]
        ent = None
        if entropy and self.loss_cfg.entropy_coef > 0:
            ent = scatter_rows(sel, entropy_from_logits(logits_1NV)[0])
        elif entropy:
            with torch.no_grad():
                ent = scatter_rows(sel, entropy_from_logits(logits_1NV.detach())[0])
        logp = scatter_rows(sel, token_logprobs(logits_1NV, targets_1N)[0])
        return MicroForward(plan.start, logp, c.mask_BT[:, plan.start :], ref_logp, ent)

    def passes(self, micros: list[Collated]) -> tuple[list[ForwardPlan], list[list[int]]]:
        """Each micro-batch's plan, and which micro-batches go through the network together: packed ones
        share a pass up to `training.pass_max_tokens` (one forward/backward, so each weight's gradient is
        written once per pass, not once per micro-batch)."""
        plans = [self.plan(c) for c in micros]
        sizes = [packed_length(c, p) if p.layout is Layout.PACKED else None for c, p in zip(micros, plans, strict=True)]
        return plans, pass_groups(sizes, self.cfg.training.pass_max_tokens)

    def recompute_old(self, micros: list[Collated], gap: OldLogprobGap) -> None:
        """Adopt the current weights' log-probs as the old policy's for these micro-batches, computed in the
        same passes the update will take (so in half precision the same rounding), without gradient."""
        plans, groups = self.passes(micros)
        with torch.no_grad():
            for group in groups:
                fws = self.forward_pass([micros[i] for i in group], [plans[i] for i in group], need_ref=False)
                for i, fw in zip(group, fws, strict=True):
                    gap.adopt(micros[i], fw.start, fw.logp_BT, fw.mask_BT)

    def zero_grad(self) -> None:
        """Drop the accumulated gradient (the model's, and the masters' when there are masters)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.masters is not None:
            for p in self.params:
                p.grad = None

    def optimizer_step(self) -> float:
        """Clip the accumulated gradient, step, and return its norm before clipping."""
        if self.masters is not None:
            for m, p in zip(self.masters, self.params, strict=True):
                m.grad = None if p.grad is None else p.grad.float()
        stepped = self.masters or self.params
        gn = torch.nn.utils.clip_grad_norm_(stepped, self.cfg.training.max_grad_norm)
        self.optimizer.step()
        if self.masters is not None:
            with torch.no_grad():
                for m, p in zip(self.masters, self.params, strict=True):
                    p.copy_(m)
        if self.optimizer.defaults.get("fused"):
            # The fused kernel writes the parameters without bumping their version counters, and the
            # inference engine's packed weights (packed_linear) notice new weights by those counters.
            torch.autograd.graph.increment_version(self.params)
        return float(gn)

    def train_step(self, batch: list[EpisodeResult]) -> dict[str, float]:
        t0 = time.perf_counter()
        t = self.cfg.training
        rewards_N = torch.tensor([e.reward for e in batch], dtype=torch.float32)
        adv_N = self.advantage_fn(
            rewards_N=rewards_N, group_ids_N=[e.task_id for e in batch], cfg=self.adv_cfg
        )
        samples = build_samples(batch, t, adv_N)
        # Same prompt side by side, then similar lengths: a micro-batch is then mostly one group, whose
        # prompt the forward pass runs once (see forward.py), with little padding. Deterministic order.
        samples.sort(key=prompt_then_length)
        totals: dict[str, float] = {}
        n_micro = 0
        grad_norms: list[float] = []
        n_tokens = 0
        # Where the step's time goes, as the host sees it (on a GPU kernels run asynchronously, so the
        # split is approximate there; the total is not).
        phase = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        # Collated once: every epoch takes the same mini-batches (and recomputed old log-probs stay put).
        minis = [
            [collate(samples[mini][m], self.pad_id) for m in chunks(len(samples[mini]), t.micro_batch_size)]
            for mini in chunks(len(samples), t.mini_batch_size)
        ]
        gap = OldLogprobGap() if self.recomputes_old else None
        if gap is not None:
            t_re = time.perf_counter()
            for micros in minis[1:]:  # before any update; the first mini-batch's come with its own forward
                self.recompute_old(micros, gap)
            phase["recompute_old"] = time.perf_counter() - t_re
        for epoch in range(t.ppo_epochs):
            for j, micros in enumerate(minis):
                self.zero_grad()
                dens = [
                    float(aggregate_denominator(c.mask_BT, c.weights_B, self.loss_cfg.agg)) for c in micros
                ]
                total = sum(dens)
                plans, groups = self.passes(micros)
                for group in groups:
                    t_fw = time.perf_counter()
                    fws = self.forward_pass(
                        [micros[i] for i in group],
                        [plans[i] for i in group],
                        need_ref=self.loss_cfg.kl_coef > 0,
                        entropy=True,
                    )
                    terms: list[torch.Tensor] = []
                    for i, fw in zip(group, fws, strict=True):
                        c, den = micros[i], dens[i]
                        n_tokens += c.n_tokens
                        if gap is not None and epoch == 0 and j == 0:  # no update yet: this forward is the old policy
                            gap.adopt(c, fw.start, fw.logp_BT, fw.mask_BT)
                        loss, m = self.loss_fn(
                            logp_BT=fw.logp_BT,
                            old_logp_BT=c.old_logp_BT[:, fw.start :],
                            advantages_B=c.advantages_B,
                            mask_BT=fw.mask_BT,
                            weights_B=c.weights_B,
                            cfg=self.loss_cfg,
                            ref_logp_BT=fw.ref_logp_BT,
                            entropy_BT=fw.entropy_BT,
                        )
                        # Each micro-batch's loss is normalised by its own count; its share of the
                        # mini-batch's count makes the accumulated gradient the mini-batch's exactly.
                        terms.append(loss * (den / total if den else 0.0))
                        for k, v in m.items():
                            totals[k] = totals.get(k, 0.0) + float(v)
                        n_micro += 1
                    t_bw = time.perf_counter()
                    phase["forward"] += t_bw - t_fw
                    torch.stack(terms).sum().backward()
                    phase["backward"] += time.perf_counter() - t_bw
                t_opt = time.perf_counter()
                grad_norms.append(self.optimizer_step())
                phase["optimizer"] += time.perf_counter() - t_opt
        self.zero_grad()
        self.global_step += 1
        out = {k: v / max(1, n_micro) for k, v in totals.items()}
        out.update(reward_by_client(batch))
        out.update(
            step=float(self.global_step),
            reward_mean=float(rewards_N.mean()),
            reward_std=float(rewards_N.std()) if len(batch) > 1 else 0.0,
            episodes=float(len(batch)),
            samples=float(len(samples)),
            tokens=float(n_tokens),
            grad_norm=sum(grad_norms) / max(1, len(grad_norms)),
            optimizer_steps=float(len(grad_norms)),
            train_time_s=time.perf_counter() - t0,
            train_forward_s=phase["forward"],
            train_backward_s=phase["backward"],
            train_optimizer_s=phase["optimizer"],
        )
        if gap is not None:
            out.update(gap.metrics(), train_recompute_old_s=phase["recompute_old"])
        return out
