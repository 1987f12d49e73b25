"""Vectorised per-group statistics over N samples (private helpers of the advantage estimators).

A grouping is `index_N` (int64, values in [0, G)) plus G; every statistic is returned per group (G,) and
callers broadcast back with `stat_G[index_N]`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

# Task group of each sample: an int tensor (N,) or any sequence of N hashables (task ids, prompt strings).
GroupIds = torch.Tensor | Sequence[Hashable]


def group_index(group_ids_N: GroupIds, device: torch.device | None = None) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids (int tensor or hashables) to (index_N in [0, G), G)."""
    if isinstance(group_ids_N, torch.Tensor):
        if group_ids_N.dim() != 1 or group_ids_N.is_floating_point():
            raise ValueError(
                f"group_ids_N must be a 1-D integer tensor, got {group_ids_N.dtype} {tuple(group_ids_N.shape)}"
            )
        uniq, index_N = torch.unique(group_ids_N, return_inverse=True)
        return index_N.to(device or group_ids_N.device), int(uniq.numel())
    codes: dict[object, int] = {}
    index = [codes.setdefault(g, len(codes)) for g in group_ids_N]
    return torch.tensor(index, dtype=torch.long, device=device), len(codes)


def group_sum(x_N: torch.Tensor, index_N: torch.Tensor, G: int) -> torch.Tensor:
    return torch.zeros(G, dtype=x_N.dtype, device=x_N.device).index_add_(0, index_N, x_N)  # (G,)


def group_mean(x_N: torch.Tensor, index_N: torch.Tensor, G: int) -> torch.Tensor:
    count_G = group_sum(torch.ones_like(x_N), index_N, G)
    return group_sum(x_N, index_N, G) / count_G.clamp_min(1)  # (G,)


def group_std(x_N: torch.Tensor, index_N: torch.Tensor, G: int, unbiased: bool) -> torch.Tensor:
    """sqrt(sum (x - mean)^2 / (n - 1 if unbiased else n)); 0 for one-sample groups."""
    count_G = group_sum(torch.ones_like(x_N), index_N, G)
    dev_N = x_N - group_mean(x_N, index_N, G)[index_N]
    dof_G = (count_G - 1 if unbiased else count_G).clamp_min(1)
    return (group_sum(dev_N**2, index_N, G) / dof_G).sqrt()  # (G,)


def group_uniform(x_N: torch.Tensor, index_N: torch.Tensor, G: int) -> torch.Tensor:
    """True for groups whose values are all exactly equal (incl. one-sample groups)."""
    hi_G = torch.full((G,), -torch.inf, dtype=x_N.dtype, device=x_N.device)
    hi_G = hi_G.scatter_reduce(0, index_N, x_N, "amax", include_self=False)
    lo_G = torch.full((G,), torch.inf, dtype=x_N.dtype, device=x_N.device)
    lo_G = lo_G.scatter_reduce(0, index_N, x_N, "amin", include_self=False)
    return hi_G == lo_G  # (G,) bool
