"""RAVAN (Raje, Askin, Jhunjhunwala & Joshi, "Ravan: Multi-Head Low-Rank Adaptation for
Federated Fine-Tuning", NeurIPS 2025, arXiv 2506.05568): multi-head LoRA whose frozen,
shared bases make the average of the trained cores exact."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from fedbench.methods import METHODS
from fedbench.methods.aggregation import client_weight, slot_mean, weighted_mean_by_key
from fedbench.methods.base import (
    EXTRA_PREFIX,
    ClientPlan,
    LocalPhase,
    Method,
    MethodConfig,
    MethodState,
    Traffic,
    extra_module,
    tensor_bytes,
)
from fedbench.methods.rank_hetero import A_SFX, lora_modules
from torch import nn

from fedbench.config import cfg_field, check
from fedbench.errors import UserError

NAME = "ravan"  # the extra module holding every adapted matrix's core
HEADS = "heads"  # plan.extra: per module (in ``Ravan.modules`` order), the heads the client trains
PRODUCT = ".P"  # the uploaded statistic of a module: s_i H_i of its trained heads, (h_k, r, r)
HOOK = "_fedbench_ravan_hook"  # the handle of the core hook on a patched lora_A
VARIANT = ("variant: bases = disjoint blocks of seeded orthonormal bases, H = 0 and s = 1 at the start and after "
           "each round, weaker tiers train the heads of largest |s_i| ||H_i||; the paper's init, head rule and "
           "restart were not readable")


def core_name(module: str) -> str:
    """The key of ``module``'s core in the extra ModuleDict (no dots allowed there)."""
    return module.replace(".", "__")


class RavanCore(nn.Module):
    """One adapted matrix's trainables: the cores ``H`` (h, r, r) and scalars ``s`` (h,)."""

    def __init__(self, heads: int, r: int):
        super().__init__()
        self.H = nn.Parameter(torch.zeros(heads, r, r))
        self.s = nn.Parameter(torch.ones(heads))

    def product(self) -> torch.Tensor:
        """P_i = s_i H_i, (h, r, r)."""
        return self.s[:, None, None] * self.H


def apply_cores(y: torch.Tensor, product: torch.Tensor) -> torch.Tensor:
    """z = blockdiag(P_1..P_h) y on the last axis: ``y`` (..., h r) = the stacked A_i x,
    ``product`` (h, r, r); then B z = sum_i B_i P_i A_i x (Eq. of the abstract)."""
    h, r, _ = product.shape
    z = torch.einsum("...hq,hpq->...hp", y.reshape(*y.shape[:-1], h, r), product.to(y.dtype))
    return z.reshape(y.shape)


def orthonormal_blocks(d: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` orthonormal columns in R^d (QR of a seeded Gaussian), (d, n); n <= d."""
    q, r = torch.linalg.qr(torch.randn(d, n, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()  # sign-fixed: the same basis on every platform's QR


def ravan_merge(global_product: torch.Tensor, products: Sequence[torch.Tensor], heads: Sequence[Sequence[int]],
                weights: Sequence[float]) -> torch.Tensor:
    """The server's new cores of one matrix (then s = 1): per head i, the weighted mean of
    the uploaded P_i = s_i H_i over the clients that trained head i,
    ``H_i <- sum_{k: i in K_k} w_k P_i^k / sum_{k: i in K_k} w_k``; a head nobody trained
    keeps its product s_i H_i (``global_product``). With shared bases this is the exact mean
    of the clients' updates: sum_k w_k sum_i B_i P_i^k A_i = sum_i B_i (sum_k w_k P_i^k) A_i."""
    return slot_mean(global_product, products, heads, weights, dim=0)


@dataclass(frozen=True)
class RavanConfig(MethodConfig):
    heads: int = cfg_field(4, "h: LoRA heads per adapted matrix; each head's rank is lora_r / h (lora_r = h r is the "
                              "rank of the stacked frozen bases)")
    basis_seed: int = cfg_field(0, "seed of the frozen bases every client rebuilds (variant: the paper's init "
                                   "scheme was not readable; disjoint blocks of orthonormal bases)")
    head_rule: Literal["largest", "random"] = cfg_field(
        "largest", "which heads a client of fewer heads trains: those of largest |s_i| ||H_i||_F in the global "
                   "model (ties at random) or random ones (variant: the paper's rule was not readable)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "heads", self.heads >= 1, "must be an integer >= 1")
        check(self, "lora_r", self.lora_r % self.heads == 0, f"must be a multiple of heads ({self.heads})")
        check(self, "head_rule", self.head_rule in ("largest", "random"), "must be 'largest' or 'random'")


@METHODS.register(NAME, "RAVAN: dW = sum_i s_i B_i H_i A_i over h heads, frozen shared bases B_i, A_i, only the "
                        "cores H_i and scalars s_i train, clients upload s_i H_i, averaged exactly; tiers train a "
                        f"fraction of the heads; {VARIANT}")
class Ravan(Method):
    """RAVAN (NeurIPS 2025, arXiv 2506.05568). Sources: the abstract (arXiv HTML v1,
    OpenReview gyn4n8oC9B), the sciencestack.ai summary and the paperhub.cn reviews (the
    LoRA-XS-style factorisation, effective rank, exact aggregation); the method section,
    its equations and the supplementary code were not retrievable (searched 2026-11-29):
    a **variant** of the paper wherever it says so below. Spec: shared/docs/methods-2027.md Sec. 5.

    - Adapter (paper, abstract): dW = sum_{i=1}^h s_i B_i H_i A_i with B_i (d_out x r) and
      A_i (r x d_in) frozen and shared, the cores H_i (r x r) and scalars s_i trained. Here
      peft's LoRA of rank h r holds the stacked bases (``lora_A`` rows i r..(i+1) r = A_i,
      ``lora_B`` columns = B_i, never trained) and a forward hook on each ``lora_A`` puts
      blockdiag(s_1 H_1, .., s_h H_h) between them (:func:`apply_cores`;
      :meth:`patch_model`), so the model computes W0 x + (alpha / (h r)) sum_i B_i s_i H_i A_i x:
      peft's constant alpha / (h r) is a fixed rescaling of H (``lora_alpha``). The cores
      live in the extra module ``ravan`` (:class:`RavanCore`).
    - Init (variant, the spec's choice): A_i and B_i are disjoint blocks of r columns of
      orthonormal bases of R^d_in and R^d_out (QR of a Gaussian drawn from ``basis_seed``),
      so the heads span disjoint subspaces and dW has rank up to h r; every client rebuilds
      them from the seed when it builds its model, as it holds the pretrained weights (they
      are never sent). H_i = 0 (dW = 0 at the start), s_i = 1.
    - Round (paper, abstract: "clients upload s_i H_i directly"): a client gets H and s and
      the head, trains its heads' H_i, s_i and the head, and uploads P_i = s_i H_i of the heads
      it trained (a client statistic, h_k r^2 per matrix) and the head. Server
      (:func:`ravan_merge`): P_i averaged with example weights over the clients that trained
      head i (exact, the bases being shared); restart H_i = mean P_i, s_i = 1 (variant: the
      paper's restart was not readable; it keeps every product).
    - Compute heterogeneity (the abstract names computational heterogeneity, the summary and
      reviews a head-selection ablation; that a weaker client trains a subset of the heads is
      the spec's reading and the rule below the spec's, a variant): a tier of layer budget n_k trains h_k = ceil(h n_k / L) heads of
      every adapted matrix (--roc 6:3:1: 1/2, 3/4, all), those of largest |s_i| ||H_i||_F
      in the global model (ties, e.g. round 1, at random, as on ``meta`` tensors, which have no
      values: ``fedbench plan``; ``head_rule=random``: random);
      the others stay frozen at their global values (``LocalPhase.trained_slices``).
    - Traffic: up = h_k r^2 per matrix + the head; down = H, h r^2 per matrix + the head
      (headline: s = 1 after every aggregation, known); the payload as sent, with s, is the
      alternative count. BERT-base q/v, h = 4, r = 55: 24 * 4 * 55^2 = 290,400 each way.
    - Cost: the frozen bases are parameters of every client's model (h r (d_in + d_out) per
      matrix) and the adapter's FLOPs per token are h r (d_in + d_out) + h r^2 per matrix:
      the meters count both.
    """

    config_cls = RavanConfig
    family = "LoRA aggregation (2024-2026)"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.modules = lora_modules(ctx.all_keys)
        layer = {k: j for j, keys in ctx.layer_keys.items() for k in keys}
        self.layer_of = [layer[m + A_SFX] for m in self.modules]
        self.h, self.r = config.heads, config.lora_r // config.heads

    # -- the model --------------------------------------------------------------------
    @classmethod
    def extra_modules(cls, config, ctx, head):
        cores = {core_name(m): RavanCore(config.heads, config.lora_r // config.heads) for m in lora_modules(ctx.all_keys)}
        return {NAME: nn.ModuleDict(cores)}

    @classmethod
    def patch_model(cls, config, model):
        """The frozen bases (seeded, the same in every model) and the forward hooks that put
        each matrix's cores between its bases."""
        cores = model.get_submodule(f"{EXTRA_PREFIX}.{NAME}")
        g = torch.Generator().manual_seed(int(config.basis_seed))
        for name, core in cores.items():
            target = model.get_submodule(name.replace("__", "."))
            lin_a, lin_b = target.lora_A["default"], target.lora_B["default"]
            (rank, d_in), d_out = lin_a.weight.shape, lin_b.weight.shape[0]
            if rank > min(d_in, d_out):
                raise UserError(f"ravan: lora_r = heads x head rank = {rank} exceeds the width of "
                                f"{name.replace('__', '.')} ({d_out} x {d_in}); lower lora_r")
            with torch.no_grad():
                lin_a.weight.copy_(orthonormal_blocks(d_in, rank, g).T)  # rows i r..(i+1) r: A_i
                lin_b.weight.copy_(orthonormal_blocks(d_out, rank, g))  # columns: B_i
            old = lin_a.__dict__.pop(HOOK, None)  # patched again (extra modules attached anew): one hook only
            if old is not None:
                old.remove()
            lin_a.__dict__[HOOK] = lin_a.register_forward_hook(
                lambda _m, _args, y, core=core: apply_cores(y, core.product()))

    def core_key(self, i: int, tensor: str) -> str:
        return f"{EXTRA_PREFIX}.{NAME}.{core_name(self.modules[i])}.{tensor}"

    def core_keys(self) -> list[str]:
        return [self.core_key(i, t) for i in range(len(self.modules)) for t in ("H", "s")]

    def init_state(self, tensors):
        """The cores and the head; the frozen bases are the model's own (rebuilt from the seed)."""
        keys = self.core_keys() + list(self.ctx.head_keys)
        return MethodState({k: tensors[k] for k in keys})

    # -- planning ---------------------------------------------------------------------
    def n_heads(self, layers: int) -> int:
        return max(1, math.ceil(self.h * min(layers, self.ctx.n_layers) / self.ctx.n_layers))

    def plan(self, rnd, clients, state, rng):
        plans = {}
        for p in clients:
            n = self.n_heads(p.layers)
            heads = []
            for i in range(len(self.modules)):
                order = rng.permutation(self.h)  # ties (and head_rule=random) at random
                if self.config.head_rule == "largest" and not state.tensors[self.core_key(i, "H")].is_meta:
                    score = (state.tensors[self.core_key(i, "s")].abs()
                             * state.tensors[self.core_key(i, "H")].flatten(1).norm(dim=1)).tolist()
                    order = sorted(order.tolist(), key=lambda j: -score[j])
                heads.append(sorted(int(j) for j in list(order)[:n]))
            plans[p.client] = ClientPlan(p.client, p.tier, tuple(range(self.ctx.n_layers)), extra={HEADS: heads})
        return plans

    # -- local training ----------------------------------------------------------------
    def local_phases(self, plan):
        trainable = self.core_keys() + (list(self.ctx.head_keys) if plan.train_head else [])
        slices = tuple((self.core_key(i, t), 0, tuple(hs)) for i, hs in enumerate(plan.extra[HEADS])
                       if len(hs) < self.h for t in ("H", "s"))
        return (LocalPhase("train", tuple(trainable), trained_slices=slices),)

    def client_statistics(self, task, model, batches, plan):
        """P_i = s_i H_i of the heads the client trained, per matrix (h_k, r, r)."""
        cores = extra_module(model, NAME)
        return {self.core_key(i, "H")[: -len(".H")] + PRODUCT: cores[core_name(m)].product()[list(hs)].detach().clone()
                for i, (m, hs) in enumerate(zip(self.modules, plan.extra[HEADS]))}

    # -- exchange ---------------------------------------------------------------------
    def client_payload(self, state, plan):
        return {k: state.tensors[k] for k in self.core_keys() + list(self.ctx.head_keys)}

    def model_keys(self, plan):
        return self.core_keys() + list(self.ctx.head_keys)

    def upload_keys(self, plan):
        return list(self.ctx.head_keys) if plan.train_head else []

    def traffic(self, plan, payload, upload):
        scalars = tensor_bytes({k: v for k, v in payload.items() if k.endswith(".s")})
        return Traffic(tensor_bytes(payload) - scalars, tensor_bytes(upload),
                       {"as sent: H, s (h r^2 + h per matrix) + head": tensor_bytes(payload)})

    def aggregate(self, state, updates):
        if not updates:
            return state
        head = {k: state.tensors[k] for k in self.ctx.head_keys}
        heads_only = [dataclasses.replace(u, tensors={k: u.tensors[k] for k in head if k in u.tensors}) for u in updates]
        out = dict(state.tensors) | weighted_mean_by_key(head, heads_only, "examples")
        weights = [client_weight(u, "examples") for u in updates]
        for i in range(len(self.modules)):
            kh, ks = self.core_key(i, "H"), self.core_key(i, "s")
            current = state.tensors[ks][:, None, None] * state.tensors[kh]
            products = [u.tensors[kh[: -len(".H")] + PRODUCT] for u in updates]
            out[kh] = ravan_merge(current, products, [u.plan.extra[HEADS][i] for u in updates], weights)
            out[ks] = torch.ones_like(state.tensors[ks])
        return MethodState(out, state.extra)

    def layout(self):
        return {"ravan": f"h = {self.h} heads of rank {self.r} per matrix ({VARIANT})"}

