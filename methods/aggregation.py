"""Server aggregation rules as pure tensor functions (no method state, no config objects).

- :func:`weighted_mean_by_key`: per tensor, the mean over the clients that uploaded it,
  example-weighted or uniform (FedAvg, McMahan et al. 2017; FedRA's per-layer rule;
  Fed-HeLLo Eq. 3; InclusiveFL / DepthFL owner averaging; FedLoRA Eq. 10).
- :func:`component_mean`: per rank component, the mean over the clients that had it
  (HETLoRA's zero-padded aggregation, Cho et al. 2024).
- :func:`stack_lora`: FLoRA's stacking of LoRA factors along the rank axis (Wang et al. 2024).
- :func:`top_factors` / :func:`pad_rank`: FlexLoRA's redistribution of a dense update as
  its best rank-r LoRA factors (Bai et al. 2024).
- :func:`factor_means`: the means of the zero-padded A and B taken separately, the rule the
  Fed-HeLLo paper describes for FlexLoRA (its opt-in ``server_rule='authors_code'``).
- :func:`per_class_average`: per class, the count-weighted mean over clients (FD, Jeong et
  al. 2018; FedProto, Tan et al. 2022).
- :func:`slot_mean`: per rank-1 module j, the mean over the clients that trained it
  (Fed-PLoRA's Select-N-Fold server, Zhang, Hu & Xu 2026).
- :func:`rank_partition_update` / :func:`balanced_factors`: raFLoRA's rank-partition-weighted
  dense update and its SVD redistribution (arXiv 2602.13486; HLoRA without the weights).
- :func:`exact_lora_mean`: FedEx-LoRA's exact aggregation, the means of A and B plus the
  residual mean(B_k A_k) - mean(B) mean(A) (Singhal et al., ACL 2025).
- :func:`fair_correction` / :func:`ridge_correction`: LoRA-FAIR's server-side correction of
  the averaged B (Bian et al., ICCV 2025).
- :func:`sign_gradient_factors`: Fed-SB's initialisation of B, R, A from a sign-gradient
  step (Singhal et al. 2025).

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


def factor_means(parts: Sequence[tuple[torch.Tensor, torch.Tensor]], weights: Sequence[float],
                 b_scales: Sequence[float], r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A_bar = sum_i p_i pad(A_i) (r, d_in), B_bar = sum_i p_i c_i pad(B_i) (d_out, r): the
    factors averaged separately, each zero-padded to rank r (``weights`` p_i, ``b_scales`` c_i
    carry client i's scaling into B). B_bar A_bar is not sum_i p_i c_i B_i A_i: it adds the
    cross terms p_i p_j c_i B_i A_j, and a component only some clients have shrinks by the
    square of their weight share (FlexLoRA as the Fed-HeLLo paper describes it)."""
    a = sum(w * pad_rank(x.float(), y.float(), r)[0] for (x, y), w in zip(parts, weights))
    b = sum(w * c * pad_rank(x.float(), y.float(), r)[1] for (x, y), w, c in zip(parts, weights, b_scales))
    return a, b


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


def slot_mean(current: torch.Tensor, parts: Sequence[torch.Tensor], slots: Sequence[Sequence[int]],
              weights: Sequence[float], dim: int) -> torch.Tensor:
    """Fed-PLoRA's server for one LoRA tensor: per slot (rank-1 module) j along ``dim``, the
    weighted mean over the clients that trained it; slots nobody trained keep their value.

    Part i holds slots ``slots[i]`` in that order along ``dim``:
    ``new[j] = sum_{i: j in K_i} w_i x_i[pos_i(j)] / sum_{i: j in K_i} w_i``. Summed in
    float32 in the clients' order (with every client holding every slot this is
    :func:`weighted_mean_by_key`'s arithmetic, bit for bit).
    """
    r_max = current.shape[dim]
    num: torch.Tensor | None = None
    den = torch.zeros(r_max, dtype=torch.float32, device=current.device)
    for x, idx, w in zip(parts, slots, weights):
        idx_t = torch.as_tensor(list(idx), dtype=torch.long, device=current.device)
        if x.shape[dim] != len(idx_t) or (len(idx_t) and int(idx_t.max()) >= r_max):
            raise ValueError(f"a client sent {x.shape[dim]} modules for slots {list(idx)} of {r_max}")
        full = torch.zeros(current.shape, dtype=torch.float32, device=current.device)
        full.index_copy_(dim, idx_t, float(w) * x.to(full))
        num = full if num is None else num + full
        den[idx_t] += float(w)
    if num is None:
        return current
    shape = [1] * current.dim()
    shape[dim] = r_max
    den = den.view(shape)
    out = torch.where(den > 0, num / den.clamp_min(1e-30), current.float())
    return out.to(current.dtype)


def rank_partition_update(parts: Sequence[tuple[torch.Tensor, torch.Tensor]], weights: Sequence[float],
                          levels: Sequence[int], scaling: float, partition_weights: bool = True,
                          fallback: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """raFLoRA's aggregated dense update of one LoRA module (arXiv 2602.13486, Eq. 8).

    ``parts``: each client's (A_k (r_k, d_in), B_k (d_out, r_k)); ``levels``: the rank
    levels rho_1 < ... < rho_m (rho_0 = 0). Partition h = components (rho_{h-1}, rho_h]:
    C_h = {k : r_k >= rho_h} and

        dW_h = sum_{k in C_h} (w_k / W_h) s B_k[:, rho_{h-1}:rho_h] A_k[rho_{h-1}:rho_h, :]

    with W_h = sum_{k in C_h} w_k (``partition_weights``: raFLoRA) or W = sum_k w_k over all
    clients (off: HLoRA's rank-agnostic W' = sum_k (w_k / W) s B_k A_k, under which the upper
    partitions shrink by W_h / W every round). Returns sum_h dW_h (d_out, d_in), float32.
    A partition no client covers adds ``fallback``'s slice (the previous global factors
    (A, B), raFLoRA) or nothing (HLoRA, or no fallback).
    """
    a0, b0 = parts[0]
    delta = torch.zeros(b0.shape[0], a0.shape[1], dtype=torch.float32, device=a0.device)
    total = float(sum(weights))
    lo = 0
    for hi in sorted(set(int(v) for v in levels)):
        members = [(a, b, float(w)) for (a, b), w in zip(parts, weights) if a.shape[0] >= hi]
        norm = sum(w for _, _, w in members) if partition_weights else total
        if members and norm > 0:
            for a, b, w in members:
                delta += (w / norm) * scaling * (b[:, lo:hi].float() @ a[lo:hi].float())
        elif partition_weights and fallback is not None:
            fa, fb = fallback
            delta += scaling * (fb[:, lo:hi].float() @ fa[lo:hi].float())
        lo = hi
    return delta


def balanced_factors(delta: torch.Tensor, r: int, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """raFLoRA's redistribution: SVD delta = U S V^T, A = sqrt(S) V^T / sqrt(s) (r, d_in),
    B = U sqrt(S) / sqrt(s) (d_out, r), truncated to r (zero-padded where delta has fewer
    singular values), so that s B A is delta's best rank-r approximation."""
    u, sv, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    k = min(r, sv.numel())
    root = (sv[:k] / scaling).sqrt()
    return pad_rank(root[:, None] * vh[:k], u[:, :k] * root, r)


def exact_lora_mean(parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
                    weights: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FedEx-LoRA's exact aggregation of one LoRA module (Singhal et al., ACL 2025, Sec. 3).

    With p_k = w_k / sum w: A_bar = sum p_k A_k (r, d_in), B_bar = sum p_k B_k (d_out, r) and
    the residual Res = sum p_k B_k A_k - B_bar A_bar (d_out, d_in), oriented like the
    weight (no transpose: the authors' GLUE code adds Res^T, which square q/v hide). Folding
    s Res into the frozen weight makes W0 + s Res + s B_bar A_bar the weighted mean of the
    clients' W0 + s B_k A_k exactly. All in float32.
    """
    total = float(sum(weights))
    p = [float(w) / total for w in weights]
    a_bar = sum(pk * a.float() for pk, (a, _) in zip(p, parts))
    b_bar = sum(pk * b.float() for pk, (_, b) in zip(p, parts))
    mean_product = sum(pk * (b.float() @ a.float()) for pk, (a, b) in zip(p, parts))
    return a_bar, b_bar, mean_product - b_bar @ a_bar


def flat_cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """cos(x, y) of the flattened matrices (the last two axes; 0 when either is 0)."""
    dims = (-2, -1)
    return (x * y).sum(dims) / (x.norm(dim=dims) * y.norm(dim=dims)).clamp_min(1e-30)


def fair_correction(a_bar: torch.Tensor, b_bar: torch.Tensor, target: torch.Tensor, lam: float, steps: int,
                    lr: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LoRA-FAIR's correction of the averaged B (Bian et al., ICCV 2025, Sec. 3):
    dB* = argmin_dB [1 - cos(target, (B_bar + dB) A_bar)] + lam ||dB / sigma||_F^2, the cosine
    over the flattened matrices, by ``steps`` plain SGD steps of rate ``lr`` from dB = 0 in
    float32 (the spec's fixed solver). A_bar (..., r, d_in), B_bar (..., d_out, r), target
    (..., d_out, d_in): leading axes are independent problems (modules of one shape solved
    together). Returns dB (..., d_out, r) and the cosines before and after (...). Per
    problem the iterate with the lowest objective is returned (dB = 0 included), so the
    cosine never drops below B_bar A_bar's (the objective falls by at least lam ||dB / sigma||^2).

    **Scale-free** (benchmark reading): the paper states its objective as a cosine, which
    does not depend on the factors' scale, plus lam ||dB||^2 with no unit. Solved as written
    (absolute ||dB||^2, SGD at rate 0.01) the result depends on the scale: at |dW| ~ 1e-3
    dB came out 3x B_bar, and the same problem x1000 was left unchanged (audit, 2026-11-28).
    So dB is measured in units of sigma = ||target||_F / ||A_bar||_F (the size of a B whose
    product with A_bar has the target's size): the SGD runs on u = dB / sigma and B_bar /
    sigma, with lam ||u||^2. Scaling (B_bar, target) by c scales dB by c; scaling (A_bar,
    target) by c leaves dB unchanged; the cosines are the same (tests/methods/test_lora_fair.py).

    The gradient is written out (no autograd: the server runs this T times per round):
    with X = (B_bar / sigma + u) A_bar and c = cos(T, X), d c / d X = T / (|T| |X|) - c X / |X|^2,
    so a step is u -= lr (-(d c / d X) A_bar^T + 2 lam u)."""
    a, b0, t = a_bar.detach().float(), b_bar.detach().float(), target.detach().float()
    dims = (-2, -1)
    t_norm = t.norm(dim=dims, keepdim=True).clamp_min(1e-30)
    a_norm = a.norm(dim=dims, keepdim=True)
    sigma = torch.where((t.norm(dim=dims, keepdim=True) > 0) & (a_norm > 0), t_norm / a_norm.clamp_min(1e-30),
                        torch.ones_like(t_norm))  # (..., 1, 1)
    b = b0 / sigma
    db = torch.zeros_like(b)
    best = torch.full(b.shape[:-2], float("inf"))
    best_db = db
    for step in range(steps + 1):
        x = (b + db) @ a  # (..., d_out, d_in)
        x_norm = x.norm(dim=dims, keepdim=True).clamp_min(1e-30)
        cos = (t * x).sum(dims, keepdim=True) / (t_norm * x_norm)
        loss = 1 - cos[..., 0, 0] + lam * db.square().sum(dims)
        better = loss < best
        best = torch.where(better, loss, best)
        best_db = torch.where(better[..., None, None], db, best_db)
        if step == steps:
            break
        d_cos = t / (t_norm * x_norm) - cos * x / x_norm ** 2  # (..., d_out, d_in)
        db = db - lr * (-(d_cos @ a.transpose(-2, -1)) + 2 * lam * db)
    best_db = best_db * sigma
    return best_db, flat_cosine(t, b0 @ a), flat_cosine(t, (b0 + best_db) @ a)


def ridge_correction(a_bar: torch.Tensor, b_bar: torch.Tensor, target: torch.Tensor, lam: float) -> torch.Tensor:
    """The deterministic variant: dB = (target - B_bar A_bar) A_bar^T (A_bar A_bar^T + lam I)^-1
    (d_out, r), the ridge least-squares fit of the residual in A_bar's row space."""
    a = a_bar.float()
    gram = a @ a.T + lam * torch.eye(a.shape[0], dtype=a.dtype, device=a.device)  # (r, r)
    rhs = (target.float() - b_bar.float() @ a) @ a.T  # (d_out, r)
    return torch.linalg.solve(gram, rhs.T).T


def sign_gradient_factors(grad: torch.Tensor, r: int, step: float,
                          scaling: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fed-SB's initialisation (LoRA-SB ``find_and_initialize_grad``): G_hat = -step sign(G);
    the SVD G_hat^T = U S V^T gives A = U_r^T (r, d_in), B = V_r (d_out, r) and
    R0 = diag(S_r) / s (r, r), so that s B R0 A is G_hat's best rank-r approximation (one
    sign-gradient step from W0; the authors' code uses R0 = diag(S_r), equal at alpha = r).
    Exact SVD (the authors call ``torch.svd_lowrank``, which draws from the global RNG); a
    matrix with fewer than r singular values is zero-padded."""
    g_hat = -step * torch.sign(grad.float())  # (d_out, d_in)
    u, sv, vh = torch.linalg.svd(g_hat.T, full_matrices=False)  # u (d_in, k), vh (k, d_out)
    k = min(r, sv.numel())
    a, b = pad_rank(u[:, :k].T.contiguous(), vh[:k].T.contiguous(), r)
    r0 = torch.zeros(r, r, dtype=torch.float32, device=grad.device)
    r0[:k, :k] = torch.diag(sv[:k]) / scaling
    return a, b, r0
