"""Server aggregation rules as pure tensor functions (no method state, no config objects).

- :func:`weighted_mean_by_key`: per tensor, the mean over the clients that uploaded it,
  example-weighted or uniform (FedAvg, McMahan et al. 2017; FedRA's per-layer rule;
  Fed-HeLLo Eq. 3; InclusiveFL / DepthFL owner averaging; FedLoRA Eq. 10).
- :func:`component_mean`: per rank component, the mean over the clients that had it
  (HETLoRA's zero-padded aggregation, Cho et al. 2024).
- :func:`stack_lora`: FLoRA's stacking of LoRA factors along the rank axis (Wang et al. 2024).
- :func:`top_factors` / :func:`pad_rank`: FlexLoRA's redistribution of a dense update as
  its best rank-r LoRA factors (Bai et al. 2024).
- :func:`per_class_average`: per class, the count-weighted mean over clients (FD, Jeong et
  al. 2018; FedProto, Tan et al. 2022).

Shapes: K clients, C classes, D width; LoRA A (r, d_in), B (d_out, r).
"""

from __future__ import annotations

from typing import Literal, Mapping, Protocol, Sequence

import torch

Weighting = Literal["examples", "uniform"]
WEIGHTINGS: tuple[str, ...] = ("examples", "uniform")


class Upload(Protocol):
    """What an aggregation rule reads of a client's update (``ClientUpdate`` has both)."""

    tensors: Mapping[str, torch.Tensor]
    n_examples: int


def client_weight(upload: Upload, weighting: Weighting) -> float:
    """A client's aggregation weight: its example count n_i ('examples') or 1 ('uniform')."""
    if weighting == "examples":
        return float(upload.n_examples)
    if weighting == "uniform":
        return 1.0
    raise ValueError(f"unknown weighting {weighting!r} (choose from: {', '.join(WEIGHTINGS)})")


def weighted_mean_by_key(current: Mapping[str, torch.Tensor], uploads: Sequence[Upload],
                         weighting: Weighting = "examples") -> dict[str, torch.Tensor]:
    """Per tensor: the weighted mean over the clients that uploaded it; the others unchanged.

    ``new[k] = sum_i w_i x_i[k] / sum_i w_i`` over the clients i whose upload has key k,
    with w_i = n_i ('examples') or 1 ('uniform', Fed-HeLLo Eq. 3 and the FedRA authors'
    code); a client of weight 0 counts for nothing. Summed in float32, returned in each
    tensor's own dtype.
    """
    out = dict(current)
    sums: dict[str, torch.Tensor] = {}
    totals: dict[str, float] = {}
    for u in uploads:
        w = client_weight(u, weighting)
        if w <= 0:
            continue
        for k, t in u.tensors.items():
            t = t.to(device=current[k].device, dtype=torch.float32)
            sums[k] = sums[k] + w * t if k in sums else w * t
            totals[k] = totals.get(k, 0.0) + w
    for k, s in sums.items():
        out[k] = (s / totals[k]).to(current[k].dtype)
    return out


def component_mean(current: torch.Tensor, parts: Sequence[torch.Tensor], weights: Sequence[float],
                   dim: int) -> torch.Tensor:
    """HETLoRA's zero-padded aggregation of one LoRA tensor along its rank axis ``dim``.

    ``current`` has r_max components along ``dim``; part i has its first r_i. Component k:
    sum_{i: r_i > k} w_i x_i[k] / sum_{i: r_i > k} w_i; a component nobody had keeps its
    current value.
    """
    r_max = current.shape[dim]
    num = torch.zeros(current.shape, dtype=torch.float32, device=current.device)
    den = torch.zeros(r_max, dtype=torch.float32, device=current.device)
    for x, w in zip(parts, weights):
        r = x.shape[dim]
        if r > r_max:
            raise ValueError(f"a client sent {r} components, more than the global rank {r_max}")
        num.narrow(dim, 0, r).add_(float(w) * x.to(num))
        den[:r] += float(w)
    shape = [1] * current.dim()
    shape[dim] = r_max
    den = den.view(shape)
    out = torch.where(den > 0, num / den.clamp_min(1e-30), current.float())
    return out.to(current.dtype)


def stack_lora(parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
               coefs: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """FLoRA's stacking: A_s = concat_i(c_i A_i) (sum r_i, d_in), B_s = concat_i(B_i)
    (d_out, sum r_i), so that B_s A_s = sum_i c_i B_i A_i exactly."""
    a = torch.cat([c * a.float() for (a, _), c in zip(parts, coefs)], dim=0)
    b = torch.cat([b.float() for _, b in parts], dim=1)
    return a, b


def top_factors(delta: torch.Tensor, r: int, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FlexLoRA's redistribution: the best rank-r approximation of ``delta`` as LoRA factors
    of scaling ``scaling``: A = V_r^T (r, d_in), B = U_r S_r / scaling (d_out, r)
    (Eckart-Young: U_r S_r V_r^T minimises ||delta - X||_F over rank-r X)."""
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(r, s.numel())
    return vh[:r].contiguous(), (u[:, :r] * s[:r]) / scaling


def pad_rank(a: torch.Tensor, b: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad LoRA factors A (k, d_in), B (d_out, k) to rank r >= k."""
    k = a.shape[0]
    return (torch.cat([a, a.new_zeros(r - k, a.shape[1])], 0),
            torch.cat([b, b.new_zeros(b.shape[0], r - k)], 1))


def per_class_average(means: torch.Tensor, counts: torch.Tensor,
                      leave_out: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Server side of FD and FedProto: per class, the count-weighted mean over clients.

    ``global[c] = sum_k n_kc m_kc / sum_k n_kc`` with means (K, C, D) and counts (K, C);
    returns (C, D) and the totals (C,); a class no client has stays a zero row, total 0.
    FedProto's aggregation weights each client's prototype by its class size |D_k,c| like
    this (PFLlib averages unweighted: pass ``(counts > 0)`` as counts for that).
    ``leave_out=k`` drops client k's own contribution: FD's Alg. 1 distils each device
    towards the others' average.
    """
    w = counts.to(means.dtype).clone()  # (K, C)
    if leave_out is not None:
        w[leave_out] = 0
    total = w.sum(0)  # (C,)
    glob = (w[..., None] * means).sum(0) / total.clamp(min=1e-12)[:, None]  # (C, D)
    return torch.where(total[:, None] > 0, glob, torch.zeros_like(glob)), total
