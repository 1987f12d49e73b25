"""The HACPO training step of one learner in a collaboration group (specs/hacpo.md steps 8-10).

The batch is this learner's own episodes plus its peers' cross episodes (imported, re-tokenised). The
step builds the learner's view (engine.training.hacpo_batch: capability, advantages, omega, lp_src, own
first), cuts it in order into mini-batches of `training.mini_batch_size` (own and cross never mixed),
and takes one optimizer step per mini-batch with `hacpo_loss`, m counting those steps from 0 over every
epoch. The same code path runs the baselines: GSPO / GSPOx2 batches hold own samples only (the client
samples G or 2G per prompt and exchanges nothing), naive sharing sets HacpoConfig.naive_sharing.

Micro-batches accumulate exactly: `hacpo_loss` is a weighted mean over sequences with a trainable token,
so each micro-batch's loss is weighted by its share of the mini-batch's weight.

A mini-batch whose gradient is exactly zero (every cross sample clipped out of the band, or no advantage
anywhere) takes no optimizer step: AdamW would still move the weights through its momentum and weight decay
(about 0.7 x lr per step, measured), so a "HACPO" run would be GSPO plus momentum-only steps. The step logs
how many were skipped, and the share of cross samples inside the clip band [lo(m), 1] (which carry gradient),
per step and per m.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from engine.algorithms import CapabilityTracker, hacpo_loss
from engine.backends.torch.forward import ForwardPlan
from engine.config import SwarmConfig
from engine.training.batch import Collated, chunks, collate
from engine.training.hacpo_batch import learner_view, own_then_cross_minis
from engine.training.metrics import reward_by_client
from engine.types import EpisodeResult

from .trainer import OldLogprobGap, TorchTrainer


class HacpoTrainer(TorchTrainer):
    def __init__(self, model: torch.nn.Module, pad_id: int, cfg: SwarmConfig) -> None:
        super().__init__(model, pad_id, cfg)
        if cfg.collaboration is None:
            raise ValueError("HacpoTrainer needs cfg.collaboration (this server's agent and method)")
        self.collab = cfg.collaboration
        self.hacpo_cfg = cfg.collaboration.hacpo
        self.tracker = CapabilityTracker.from_config(self.hacpo_cfg)

    def extra_state(self) -> dict[str, Any]:
        return {"capability": self.tracker.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "capability" in state:
            self.tracker = CapabilityTracker.from_state_dict(state["capability"])

    def passes(self, micros: list[Collated]) -> tuple[list[ForwardPlan], list[list[int]]]:
        """The HACPO step runs each micro-batch through the network alone (`forward`); so does a recompute."""
        return [self.plan(c) for c in micros], [[i] for i in range(len(micros))]

    def train_step(self, batch: list[EpisodeResult]) -> dict[str, float]:
        t0 = time.perf_counter()
        t = self.cfg.training
        view = learner_view(batch, self.collab.agent, self.tracker, self.hacpo_cfg, t.merge)
        n = len(view.samples)
        lp_src = torch.tensor(view.lp_src, dtype=torch.float32)
        omega = torch.tensor(view.omega, dtype=torch.float32)
        cross = torch.tensor(view.cross, dtype=torch.bool)
        chars = torch.tensor(view.chars, dtype=torch.float32)
        minis = own_then_cross_minis(view.n_own, n, t.mini_batch_size)
        # Collated once: every epoch takes the same micro-batches (and recomputed old log-probs stay put).
        collated = [
            [(rows, collate([view.samples[i] for i in rows], self.pad_id)) for rows in _micro_rows(mini, n, t.micro_batch_size)]
            for mini in minis
        ]
        # Own samples' lp_src is this learner's old policy; recomputed (training.old_logprobs), the first own
        # mini-batch's comes with its forward and the later ones' from a forward before any update. Cross
        # samples keep the source's exported lp_src: the source recorded it at sampling time.
        own = [k for k, mini in enumerate(minis) if mini.start < view.n_own]
        gap = OldLogprobGap() if self.recomputes_old else None
        if gap is not None:
            for j in own[1:]:
                self.recompute_old([c for _, c in collated[j]], gap)
                for rows, c in collated[j]:
                    lp_src[rows] = _masked_mean(c.old_logp_BT, c.mask_BT)
        per_m: dict[str, list[float]] = {}
        grad_norms: list[float] = []
        n_tokens = 0
        skipped = 0
        cross_seen = cross_in_band = 0.0
        m = 0
        for epoch in range(t.ppo_epochs):
            for j, micros in enumerate(collated):
                self.zero_grad()
                total = sum(view.samples[i].weight for rows, _ in micros for i in rows)
                for rows, c in micros:
                    n_tokens += c.n_tokens
                    fw = self.forward(c, need_ref=self.hacpo_cfg.kl_coef > 0)
                    if gap is not None and epoch == 0 and own[:1] == [j]:  # no update yet: the old policy
                        gap.adopt(c, fw.start, fw.logp_BT, fw.mask_BT)
                        lp_src[rows] = _masked_mean(c.old_logp_BT, c.mask_BT)
                    loss, metrics = hacpo_loss(
                        logp_BT=fw.logp_BT,
                        mask_BT=fw.mask_BT,
                        lp_src_B=lp_src[rows],
                        advantages_B=c.advantages_B,
                        omega_B=omega[rows],
                        cross_B=cross[rows],
                        weights_B=c.weights_B,
                        m=m,
                        cfg=self.hacpo_cfg,
                        ref_logp_BT=fw.ref_logp_BT,
                        cross_chars_B=chars[rows],
                    )
                    share = float(c.weights_B.sum()) / total if total else 0.0
                    (loss * share).backward()
                    for k, v in metrics.items():
                        per_m.setdefault(k, []).append(float(v))
                    if metrics.get("own_clip_frac") is not None:
                        per_m.setdefault(f"own_clip_frac/m{m}", []).append(metrics["own_clip_frac"])
                    if metrics.get("cross_below_lo_frac") is not None:
                        per_m.setdefault(f"cross_below_lo_frac/m{m}", []).append(metrics["cross_below_lo_frac"])
                        n_cross = float((cross[rows] & (fw.mask_BT.sum(-1) > 0)).sum())  # as the loss counts
                        unclipped = self.hacpo_cfg.naive_sharing or not self.hacpo_cfg.cross_clip  # no band: all count
                        outside = 0.0 if unclipped else metrics["cross_below_lo_frac"] + metrics.get("cross_above_1_frac", 0.0)
                        in_band = n_cross * (1.0 - outside)
                        cross_seen, cross_in_band = cross_seen + n_cross, cross_in_band + in_band
                        per_m.setdefault(f"cross_in_band_frac/m{m}", []).append(in_band / n_cross)
                if _has_gradient(self.params):
                    grad_norms.append(self.optimizer_step())
                    per_m.setdefault(f"grad_norm/m{m}", []).append(grad_norms[-1])
                else:
                    skipped += 1
                m += 1
        self.zero_grad()
        self.global_step += 1
        rewards = [e.reward for e in batch]
        out = {k: sum(v) / len(v) for k, v in per_m.items()}
        if "cross_s_min" in per_m:  # extremes over the step, not means of per-micro extremes
            out["cross_s_min"], out["cross_s_max"] = min(per_m["cross_s_min"]), max(per_m["cross_s_max"])
        out.update(view.metrics)
        out.update(reward_by_client(batch))
        out.update(
            step=float(self.global_step),
            reward_mean=sum(rewards) / len(rewards),
            episodes=float(len(batch)),
            samples=float(n),
            tokens=float(n_tokens),
            grad_norm=sum(grad_norms) / max(1, len(grad_norms)),
            optimizer_steps=float(len(grad_norms)),
            optimizer_steps_skipped=float(skipped),
            train_time_s=time.perf_counter() - t0,
        )
        if cross_seen:
            out["cross_in_band_frac"] = cross_in_band / cross_seen
        if gap is not None:
            out.update(gap.metrics())
        return out


def _micro_rows(mini: slice, n: int, micro_batch_size: int) -> list[list[int]]:
    """The sample indices of each micro-batch of a mini-batch, in order."""
    idx = list(range(n))[mini]
    return [idx[k] for k in chunks(len(idx), micro_batch_size)]


def _masked_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Each row's mean over its trainable targets (0 for a row without one): lp_src as learner_view averages."""
    return (x_BT * mask_BT).sum(-1) / mask_BT.sum(-1).clamp(min=1)


def _has_gradient(params: list[torch.Tensor]) -> bool:
    """Whether any parameter's accumulated gradient is non-zero (a clipped sample contributes exact zeros)."""
    return any(p.grad is not None and bool(torch.any(p.grad != 0)) for p in params)
