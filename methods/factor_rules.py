"""Pure rules of the alternating-factor methods (RoLoRA, methods/rolora.py; LoRA-A2,
methods/lora_a2.py): which factor trains in a round, LoRA-A2's rank scores and whole-model
rank selection, and the masked average of a trained factor. No method state, no config
objects; beside :mod:`fedbench.methods.aggregation`, whose rules the methods also use.

Shapes: LoRA A (R, d_in), B (d_out, R); one rank i is row A[i, :] and column B[:, i].
"""

from __future__ import annotations

from typing import Literal, Mapping, Sequence

import torch

Factor = Literal["A", "B"]
RANK_DIM = {"A": 0, "B": 1}  # the axis of a factor that indexes the ranks


def alternating_factor(rnd: int) -> Factor:
    """The factor every client trains in round ``rnd`` (1-based): B in rounds 1, 3, 5, ...,
    A in rounds 2, 4, ... LoRA-A2 (project page, "Alternating Freeze"): A frozen in even
    rounds, B in odd ones, rounds counted from 0, and "since the standard convention of LoRA
    initializes B to zero, we first train B"; our round 1 is its round 0. With B = 0,
    training A first would be a wasted round: dL/dA = s B^T (dL/dW) x^T = 0."""
    if rnd < 1:
        raise ValueError(f"rounds are 1-based, got {rnd}")
    return "B" if (rnd - 1) % 2 == 0 else "A"


def changed_factors(last_round: int, rnd: int) -> set[str]:
    """The factors the server changed since a client last received the model: it was sent
    the model in round ``last_round`` (0: never; it knows the seeded initial adapter), so
    rounds ``max(last_round, 1)`` .. ``rnd - 1`` each changed that round's factor."""
    return {alternating_factor(u) for u in range(max(last_round, 1), rnd)}


def rank_scores(factor: Factor, a: torch.Tensor, b: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """LoRA-A2's importance of each rank i of one module for the round's trained factor, (R,):
    A-round ``||B[:, i]|| ||G_A[i, :]||``, B-round ``||G_B[:, i]|| ||A[i, :]||`` (G the
    gradient of the trained factor, the shape of that factor): the first-order size of rank
    i's contribution to the change of dW = B A. The paper's criterion (Sec. 4.2, Eq. 2:
    "how much each rank contributes to the change in dW") has a body our sources do not
    show: this product is the spec's reconstruction (methods-2027.md Sec. 3)."""
    a, b, grad = a.float(), b.float(), grad.float()
    if factor == "A":
        return b.norm(dim=0) * grad.norm(dim=1)
    return grad.norm(dim=0) * a.norm(dim=1)


def select_top_ranks(scores: Mapping[str, torch.Tensor], budget: int) -> dict[str, list[int]]:
    """LoRA-A2's rank selection (Sec. 4.2): the ``budget`` = r_k M highest-scoring (module,
    rank) pairs over the **whole model**, so a module may get several ranks or none.
    Returns the selected ranks per module, ascending. Ties go to the earlier module, then the
    lower rank (a stable order: the same scores give the same selection on every machine)."""
    mods = list(scores)
    flat = torch.cat([scores[m].float().flatten() for m in mods]) if mods else torch.zeros(0)
    order = torch.sort(-flat, stable=True).indices[: max(0, min(int(budget), flat.numel()))]
    chosen = torch.zeros(flat.numel(), dtype=torch.bool)
    chosen[order] = True
    out, start = {}, 0
    for m in mods:
        n = scores[m].numel()
        out[m] = chosen[start:start + n].nonzero().flatten().tolist()
        start += n
    return out


def rank_mask(r_max: int, ranks: Sequence[int]) -> torch.Tensor:
    """A bool (r_max,) mask of ``ranks``."""
    mask = torch.zeros(r_max, dtype=torch.bool)
    mask[list(ranks)] = True
    return mask


def masked_factor_mean(current: torch.Tensor, parts: Sequence[torch.Tensor], masks: Sequence[torch.Tensor],
                       weights: Sequence[float], dim: int, normalise: Literal["all", "selectors"]) -> torch.Tensor:
    """The server's average of one trained factor whose ranks each client selected (rank
    ``i`` of ``current`` is its slice ``i`` along ``dim``); part k equals ``current`` on the
    ranks mask k leaves out.

    - ``all`` (zero-filled): F + sum_k p_k M_k (F_k - F), p_k = w_k / sum w over every
      uploading client: the weighted mean of the clients' factors, so with the other factor
      frozen and shared the global dW is the weighted mean of theirs (exact).
    - ``selectors`` (LoRA-A2 ``contrib`` variant, RoLoRA-het's per-index averaging): rank i
      averaged over the clients that selected it, F_i + sum_{k: i in M_k} w_k (F_k - F)_i /
      sum_{k: i in M_k} w_k; a rank nobody selected keeps its value.

    Summed in float32, returned in ``current``'s dtype."""
    shape = [1] * current.dim()
    shape[dim] = current.shape[dim]
    num = torch.zeros(current.shape, dtype=torch.float32, device=current.device)
    den = torch.zeros(shape, dtype=torch.float32, device=current.device)
    base = current.float()
    for part, mask, w in zip(parts, masks, weights):
        m = mask.to(device=current.device, dtype=torch.float32).reshape(shape)
        num += float(w) * m * (part.to(num) - base)
        den += float(w) * m
    if normalise == "all":
        total = float(sum(weights))
        return (base + num / total).to(current.dtype) if total > 0 else current
    return torch.where(den > 0, base + num / den.clamp_min(1e-30), base).to(current.dtype)
