"""HETLoRA (Cho et al., EMNLP 2024): rank-heterogeneous LoRA by truncation, zero-padded
per-component aggregation, rank self-pruning (shared plumbing: methods/rank_hetero.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping

import torch

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.base import MethodState
from fedbench.methods.aggregation import component_mean
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankConfig, RankMethod, active_lora_pairs, lora_product


@dataclass(frozen=True)
class HetLoRAConfig(RankConfig):
    reg_lambda: float = cfg_field(0.01, "lambda of the rank self-pruning regulariser (0 = off)")
    reg_gamma: float = cfg_field(0.9, "gamma: the regulariser acts on components floor(gamma r_i)..r_i-1")
    aggregation: Literal["sparsity", "examples"] = cfg_field(
        "sparsity", "client weights per component: ||B_i A_i||_F per module (the paper's sparsity-weighted "
                    "aggregation, default), or example counts")
    prune: bool = cfg_field(True, "rank self-pruning (the paper's): a client whose regularised tail shrank "
                                  "trains floor(gamma r_i) next time (false = fixed ranks)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "reg_lambda", self.reg_lambda >= 0, "must be a number >= 0 (0 = off)")
        check(self, "reg_gamma", 0 < self.reg_gamma <= 1, "must be in (0, 1]")


@METHODS.register("hetlora", "HETLoRA: leading r_i rank components per client, rank self-pruning, "
                             "sparsity-weighted zero-padded aggregation")
class HetLoRA(RankMethod):
    """HETLoRA (Cho et al., "Heterogeneous LoRA for Federated Fine-tuning of On-Device
    Foundation Models", EMNLP 2024). Defaults are the published method (sparsity-weighted
    aggregation and rank self-pruning); example weighting and fixed ranks are options.

    - Distribution by truncation: client i gets A[:r_i, :] and B[:, :r_i] of the global
      rank-r_max LoRA of every layer (+ the head).
    - Local objective (the paper's rank self-pruning regulariser):
      min F_i(W) + lambda sum_modules ||A[t_i:r_i, :]||_F ||B[:, t_i:r_i]||_F with
      t_i = max(1, floor(gamma r_i)), on the live peft parameters (so it has a gradient; the
      FlexLoRA authors' re-implementation used ``.data``, which has none).
    - Self-pruning (``prune``, default on): if the regularised tail norm of the client's
      upload is below the one it received (the regulariser is winning), its rank becomes
      r_i <- t_i = floor(gamma r_i) for later rounds (``state.extra['ranks']``).
    - Aggregation: zero-pad every client's factors to r_max and average each rank
      component k over the clients that had it (r_i > k). Weights (``aggregation``):
      'sparsity' (default, the paper's sparsity-weighted aggregation)
      p_i = ||S_i||_F / sum_{j: r_j > k} ||S_j||_F with S_i = B_i A_i of that module, so
      clients whose update is larger count more; 'examples' = n_i / sum n_j (FedAvg's).
      The head is averaged with example weights (every client trains it).
    Scaling: alpha_i = alpha r_i / r_max, so every client's components act with the global
    model's alpha / r_max (see the module docstring).
    """
    family = "rank heterogeneity"

    config_cls = HetLoRAConfig

    def client_alpha(self, rank: int) -> float:
        return float(self.config.lora_alpha) * rank / self.r_max

    def client_rank(self, profile, state):
        pruned = state.extra.get("ranks", {}).get(str(profile.client))
        return profile.rank if pruned is None else min(profile.rank, int(pruned))

    def tail_start(self, rank: int) -> int:
        return max(1, math.floor(self.config.reg_gamma * rank))

    def client_payload(self, state, plan):
        out = {}
        for m in self.modules:
            out[m + A_SFX] = state.tensors[m + A_SFX][: plan.rank]  # (r_i, d_in)
            out[m + B_SFX] = state.tensors[m + B_SFX][:, : plan.rank]  # (d_out, r_i)
        return out | self.head_tensors(state)

    def local_loss(self, model, batch, outputs, plan):
        t = self.tail_start(plan.rank)
        if self.config.reg_lambda == 0 or t >= plan.rank:
            return None
        reg = sum(a[t:].norm() * b[:, t:].norm() for a, b in active_lora_pairs(model))
        return self.config.reg_lambda * reg

    def tail_norm(self, tensors: Mapping[str, torch.Tensor], rank: int) -> float:
        t = self.tail_start(rank)
        return float(sum(tensors[m + A_SFX][t:rank].norm() * tensors[m + B_SFX][:, t:rank].norm()
                         for m in self.modules))

    def merge(self, state, updates, out):
        for m in self.modules:
            parts = [(u.tensors[m + A_SFX], u.tensors[m + B_SFX]) for u in updates]
            if self.config.aggregation == "sparsity":
                w = [float(lora_product(a, b, 1.0).norm()) for a, b in parts]
                if sum(w) <= 0:
                    w = [1.0] * len(parts)
            else:
                w = [float(u.n_examples) for u in updates]
            out[m + A_SFX] = component_mean(state.tensors[m + A_SFX], [a for a, _ in parts], w, dim=0)
            out[m + B_SFX] = component_mean(state.tensors[m + B_SFX], [b for _, b in parts], w, dim=1)
        extra = dict(state.extra)
        if self.config.prune:
            ranks = dict(extra.get("ranks", {}))
            for u in updates:
                r = u.plan.rank
                if self.tail_start(r) < r and self.tail_norm(u.tensors, r) < self.tail_norm(state.tensors, r):
                    ranks[str(u.client)] = self.tail_start(r)
            extra["ranks"] = ranks
        return MethodState(out, extra)
