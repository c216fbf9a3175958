"""Server rules of Fed-pilot and FedHL as pure tensor functions (beside
:mod:`fedbench.methods.aggregation`; no method state, no config objects).

- :func:`dwa_gains` / :func:`extrapolate`: Fed-pilot's Dynamic Weight Adjustment, a gain
  g_m >= 1 on the move of a module updated in fewer recent rounds than the average
  (Zhang et al., arXiv 2410.10200; the paper's equation was not retrievable: the rule is the
  spec's reconstruction, shared/docs/methods-2027.md Sec. 1).
- :func:`full_rank_merge`: FedHL's update of the full-rank global weight by the clients'
  dense LoRA products (Peng et al., arXiv 2505.18494; the spec's reading, Sec. 2).

Shapes: LoRA A (r, d_in), B (d_out, r); a dense weight (d_out, d_in).
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["dwa_gains", "extrapolate", "full_rank_merge"]


def dwa_gains(counts: Sequence[int], low: float = 1.0, high: float = 2.0) -> list[float]:
    """g_m = clip(u_bar / u_m, low, high), u_m = the rounds of the recent window in which
    module m was updated and u_bar their mean over all modules: a module updated less often
    than the average moves further towards this round's mean. A module never updated in the
    window (u_m = 0) gets 1 (it has no mean to move to)."""
    u_bar = sum(counts) / len(counts) if counts else 0.0
    return [1.0 if u == 0 else min(high, max(low, u_bar / u)) for u in counts]


def extrapolate(current: torch.Tensor, mean: torch.Tensor, gain: float) -> torch.Tensor:
    """current + gain * (mean - current) in float32, returned in ``current``'s dtype (gain 1:
    the mean itself)."""
    c = current.float()
    return (c + gain * (mean.float() - c)).to(current.dtype)


def full_rank_merge(weight: torch.Tensor, parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
                    coefs: Sequence[float]) -> torch.Tensor:
    """W + sum_k c_k B_k A_k in float32 (returned in float32: a bf16 merge would lose small
    updates): ``parts`` are the clients' (A_k (r_k, d_in), B_k (d_out, r_k)) of any ranks,
    ``coefs`` their aggregation weight times their LoRA scaling, c_k = w_k alpha / r_k."""
    out = weight.float().clone()
    for (a, b), c in zip(parts, coefs):
        out += float(c) * (b.float() @ a.float())
    return out
