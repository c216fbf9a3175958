"""Pure tensor math of FedLoRA and its six baselines (no registration, no training loop).

FedLoRA (papers/fedlora_model_heterogeneous.txt): Eq. 5 local loss, the two adapter
structures of Sec. 4.3; the server rules (FedLoRA Eq. 10, plain FedAvg of the adapters,
and FD's / FedProto's per-class average) are in :mod:`fedbench.methods.aggregation`.
Baselines: FD (Jeong et al. 2018), FedProto (Tan et al. 2022), FML (Shen et al. 2020),
FedKD (Wu et al. 2022), LG-FedAvg (Liang et al. 2020).

Shapes: B batch, C classes, D representation width, K clients.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn
from torch.nn import functional as F


# ------------------------------------------------------------------------------ FedLoRA
def fedlora_local_loss(local_logits: torch.Tensor, adapter_logits: torch.Tensor, y: torch.Tensor,
                       mu: float) -> torch.Tensor:
    """FedLoRA Eq. 5: ``mu * CE(local, y) + (1 - mu) * CE(adapter, y)``.

    Step 1 of the iterative learning (Sec. 4.1): the adapter is frozen, this loss trains
    the local model; the adapter's CE still reaches it through the shared representation.
    Step 2 trains the adapter alone with ``CE(adapter, y)`` (Eq. 8), i.e. ``mu = 0`` with the
    local model frozen.
    """
    return mu * F.cross_entropy(local_logits, y) + (1.0 - mu) * F.cross_entropy(adapter_logits, y)


class DirectReductionAdapter(nn.Module):
    """FedLoRA Sec. 4.3, adapter 1 ("direct dimension reduction"), model-homogeneous setting.

    A narrow copy of the local model's last two FC layers: FC2 (``d_in -> 500``) reduced to
    ``d_in -> rank``, ReLU (as after FC2), then ``rank -> n_classes`` like FC3. ``d_in`` is
    the FC1 width of the local CNN (``TableOneCNN.hidden``), so all clients must share it:
    the paper uses it only when every client has CNN-1.
    """

    def __init__(self, d_in: int, rank: int, n_classes: int):
        super().__init__()
        self.reduce = nn.Linear(d_in, rank)  # (rank, d_in)
        self.out = nn.Linear(rank, n_classes)  # (C, rank)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.reduce(h)))  # (B, d_in) -> (B, C)


class MatrixDecompositionAdapter(nn.Module):
    """FedLoRA Sec. 4.3, adapter 2 ("matrix decomposition"), model-heterogeneous setting.

    The FC2 -> FC3 matrix (500 x C) is replaced by two factors ``500 x rank`` and
    ``rank x C`` with no non-linearity between them, a rank-``rank`` linear map in LoRA's
    sense (``weight()``). Its input is the 500-d representation every Table 1 CNN has
    (``TableOneCNN.features``), which is what makes it homogeneous across CNN-1..5.
    """

    def __init__(self, d_in: int, rank: int, n_classes: int):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False)  # (rank, 500)
        self.up = nn.Linear(rank, n_classes)  # (C, rank)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(h))  # (B, 500) -> (B, C)

    def weight(self) -> torch.Tensor:
        """The low-rank product (C, 500) = up (C, rank) @ down (rank, 500)."""
        return self.up.weight @ self.down.weight


# ------------------------------------------------------------------ per-class statistics
def class_means(values: torch.Tensor, y: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean of ``values`` (B, D) over labels ``y`` (B,): means (C, D), counts (C,).

    Classes absent from ``y`` get a zero row and count 0. Means of several batches combine
    exactly with :func:`fedbench.methods.aggregation.per_class_average` (stack them as K
    "clients").
    """
    counts = torch.bincount(y, minlength=n_classes).to(values.dtype)  # (C,)
    sums = torch.zeros(n_classes, values.shape[1], dtype=values.dtype, device=values.device)
    sums.index_add_(0, y, values)  # (C, D)
    return sums / counts.clamp(min=1)[:, None], counts


def class_mean_logits(logits: torch.Tensor, y: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FD (Jeong et al. 2018, Alg. 1): a device's average logit vector per label, (C, C), counts (C,)."""
    return class_means(logits, y, n_classes)


# ---------------------------------------------------------------------------------- FD
def fd_distill_loss(logits: torch.Tensor, y: torch.Tensor, global_logits: torch.Tensor,
                    global_counts: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """FD (Jeong et al. 2018, Alg. 1) distillation term: KL towards the global logits of y.

    ``mean_b KL(softmax(g_{y_b} / T) || softmax(z_b / T))`` over examples whose class has a
    global logit (``global_counts[y] > 0``); 0 if none. KL, not MSE: FD regularises with
    the cross-entropy between the softened global and local outputs (Hinton-style
    distillation); KL has the same gradient and is 0 when they agree. ``T = 1`` as in FD.
    """
    keep = global_counts[y] > 0  # (B,)
    if not keep.any():
        return logits.sum() * 0.0
    target = F.softmax(global_logits[y[keep]] / temperature, dim=-1)  # (B', C)
    logp = F.log_softmax(logits[keep] / temperature, dim=-1)
    return F.kl_div(logp, target, reduction="batchmean")


# ---------------------------------------------------------------------------- FedProto
def proto_loss(features: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, proto_counts: torch.Tensor,
               lam: float) -> torch.Tensor:
    """FedProto (Tan et al. 2022, Eq. 8: ``L_S + lam * L_R``) regulariser on the reference
    scale: ``lam * mean_b mean_d (f(x_b)_d - P_{y_b,d})^2``, the authors' ``nn.MSELoss()``
    (mean over the batch and the D dims; PFLlib's is the same).

    Over examples whose class has a global prototype; 0 if none. (Before this, the squared
    L2 was summed over the D dims: D times the reference scale.)
    """
    keep = proto_counts[y] > 0
    if not keep.any():
        return features.sum() * 0.0
    return lam * (features[keep] - protos[y[keep]]).pow(2).mean()


def prototype_distances(features: torch.Tensor, protos: torch.Tensor, proto_counts: torch.Tensor) -> torch.Tensor:
    """FedProto's distances (Tan et al. 2022, Sec. 4 inference): squared L2 from each of the
    (B, D) features to each (C, D) global prototype, (B, C); inf for a class without a
    prototype (count 0)."""
    dist = torch.cdist(features, protos).pow(2)  # (B, C)
    return dist.masked_fill(proto_counts[None, :] <= 0, float("inf"))


def nearest_prototype(features: torch.Tensor, protos: torch.Tensor, proto_counts: torch.Tensor) -> torch.Tensor:
    """FedProto inference: the class whose global prototype is nearest in L2, (B,) labels.

    Classes without a prototype (count 0) are never predicted.
    """
    return prototype_distances(features, protos, proto_counts).argmin(-1)


# --------------------------------------------------------------------------------- FML
def _kl_to(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(p_teacher || p_student), teacher detached: the student learns from the teacher only."""
    return F.kl_div(F.log_softmax(student_logits, -1), F.softmax(teacher_logits.detach(), -1), reduction="batchmean")


def fml_losses(local_logits: torch.Tensor, meme_logits: torch.Tensor, y: torch.Tensor, alpha: float,
               beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FML (Shen et al. 2020): deep mutual learning of the private and meme models.

    ``L_local = alpha * CE(local, y) + (1 - alpha) * KL(p_meme || p_local)``,
    ``L_meme = beta * CE(meme, y) + (1 - beta) * KL(p_local || p_meme)``; each KL treats
    the other model's prediction as a constant. Only the meme (shared) model is averaged.
    """
    l_local = alpha * F.cross_entropy(local_logits, y) + (1 - alpha) * _kl_to(local_logits, meme_logits)
    l_meme = beta * F.cross_entropy(meme_logits, y) + (1 - beta) * _kl_to(meme_logits, local_logits)
    return l_local, l_meme


# ------------------------------------------------------------------------------- FedKD
def fedkd_losses(teacher_logits: torch.Tensor, student_logits: torch.Tensor, y: torch.Tensor,
                 teacher_hidden: torch.Tensor | None = None, student_hidden: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """FedKD (Wu et al. 2022, "adaptive mutual distillation"): losses of the local teacher
    (private, large) and the shared student (small), in that order.

    ``w = 1 / (CE_t + CE_s)`` (computed from the current batch, used as a constant weight):
    distillation is strong when both predict well and weak while they are still wrong.
    ``L_t = CE_t + w * KL(p_s || p_t) [+ w * MSE(H_t, H_s)]``,
    ``L_s = CE_s + w * KL(p_t || p_s) [+ w * MSE(H_s, H_t)]``. Hidden states, when given,
    must have the same width (a learned projection, as FedKD uses for mismatched widths,
    belongs to the caller). FedKD's SVD compression of the uploaded student is
    :func:`svd_compress`, a separate option.
    """
    ce_t, ce_s = F.cross_entropy(teacher_logits, y), F.cross_entropy(student_logits, y)
    w = 1.0 / (ce_t + ce_s).detach()
    l_t = ce_t + w * _kl_to(teacher_logits, student_logits)
    l_s = ce_s + w * _kl_to(student_logits, teacher_logits)
    if teacher_hidden is not None and student_hidden is not None:
        l_t = l_t + w * F.mse_loss(teacher_hidden, student_hidden.detach())
        l_s = l_s + w * F.mse_loss(student_hidden, teacher_hidden.detach())
    return l_t, l_s


def svd_compress(weight: torch.Tensor, energy: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FedKD's upload compression of a 2-D matrix (m, n): ``U[:, :k], S[:k], Vh[:k]`` with
    the smallest k whose singular values keep ``energy`` of ``sum S^2``; the receiver
    rebuilds ``U diag(S) Vh``."""
    u, s, vh = torch.linalg.svd(weight, full_matrices=False)  # (m, r), (r,), (r, n)
    kept = torch.cumsum(s.pow(2), 0) / s.pow(2).sum().clamp(min=1e-30)  # (r,)
    k = int(torch.searchsorted(kept, torch.tensor(energy, dtype=kept.dtype) - 1e-12).item()) + 1
    k = min(k, len(s))
    return u[:, :k], s[:k], vh[:k]


# --------------------------------------------------------------------------- LG-FedAvg
def split_keys(keys: Iterable[str], shared_prefixes: Iterable[str] = ("head",)) -> tuple[list[str], list[str]]:
    """LG-FedAvg (Liang et al. 2020): (local keys, shared keys) of a state dict.

    LG-FedAvg keeps each client's representation (feature extractor) local and averages
    the global part, here the classifier (FedLoRA's baseline setting: ``head`` = FC3 of the
    Table 1 CNNs). A prefix matches a whole module path: ``head`` matches ``head.weight``,
    not ``header.weight``.
    """
    prefixes = [p.rstrip(".") for p in shared_prefixes]
    local, shared = [], []
    for k in keys:
        (shared if any(k == p or k.startswith(p + ".") for p in prefixes) else local).append(k)
    return local, shared
