"""Batched next-token sampling with per-row temperature, top-p and random generator.

Sampling uses the Gumbel-max trick: token = argmax(logits / T + Gumbel noise), with the row's noise drawn
from its own `torch.Generator`. A row's choice therefore depends only on its logits and its seed, never
on which other requests share the batch. Gumbel-max is also robust to the ~1e-7 logit differences that
different batch shapes cause (another BLAS blocking): the choice flips only if the two best perturbed
scores are that close, which has probability ~1e-6 per token. Inverse-CDF sampling over a 49k-entry
cumulative sum flips far more often, so seeded replies would change with the batch composition.

The returned log-probabilities are under the *untempered* policy, `log_softmax(raw logits)[token]`,
whatever temperature or top-p was used to pick the token. That is the quantity the trainer recomputes
with a plain forward pass, so the recorded "old" logprobs and the trainer's "new" logprobs agree up to
floating-point noise for on-policy data (importance ratio 1). Tempered/truncated logprobs would bake the
sampling transform into the ratio and bias every PPO-style update.
"""

from __future__ import annotations

import torch

# Temperatures at or below this are greedy: dividing by them would overflow float32 logits and the
# intended behaviour is argmax anyway.
GREEDY_TEMPERATURE = 1e-5


def _top_p_mask(scaled: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """True for tokens outside each row's nucleus: the smallest set of top tokens with mass >= top_p."""
    probs, order = torch.softmax(scaled, dim=-1).sort(-1, descending=True)
    # A token stays if the mass strictly before it is < top_p, so the most likely token always stays.
    drop_sorted = (probs.cumsum(-1) - probs) >= top_p.unsqueeze(-1)
    return torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)


def sample_next(
    logits: torch.Tensor,
    temperatures: list[float],
    top_ps: list[float],
    generators: list[torch.Generator],
) -> tuple[list[int], list[float]]:
    """Pick one token per row of `logits` [B, V] and return (token ids, untempered logprobs)."""
    logits = logits.float()
    sampled = [i for i, t in enumerate(temperatures) if t > GREEDY_TEMPERATURE]
    every = len(sampled) == len(temperatures)
    # Greedy rows' answer; when every row samples (training episodes) this argmax would be overwritten.
    tokens = None if every else logits.argmax(-1)
    if sampled:
        idx = torch.tensor(sampled, device=logits.device)
        temps = torch.tensor([temperatures[i] for i in sampled], device=logits.device, dtype=logits.dtype)
        scaled = (logits if every else logits.index_select(0, idx)) / temps.unsqueeze(-1)
        p = torch.tensor([top_ps[i] for i in sampled], device=logits.device, dtype=logits.dtype)
        nucleus = (p < 1.0).nonzero().squeeze(-1)
        if len(nucleus):  # sorting 49k logits is the costly part: only rows that ask for top-p pay it
            sub = scaled.index_select(0, nucleus)
            scaled[nucleus] = sub.masked_fill(_top_p_mask(sub, p[nucleus]), float("-inf"))
        # Each row's uniforms come from its own generator, drawn straight into one buffer (no stack copy).
        noise = scaled.new_empty(scaled.shape)
        for k, i in enumerate(sampled):
            torch.rand(logits.shape[-1], generator=generators[i], device=logits.device, out=noise[k])
        # In place, the same element-wise ops as scaled - log(-log(u)): -log(-log(u)) is Gumbel(0, 1);
        # u == 0 gives -inf noise, so that draw can never win.
        picked = scaled.sub_(noise.log_().neg_().log_()).argmax(-1)
        if every:
            tokens = picked
        else:
            tokens[idx] = picked
    logprobs = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return tokens.tolist(), logprobs.tolist()
