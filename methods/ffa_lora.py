"""FFA-LoRA (Sun et al., ICLR 2024): A frozen at the seeded initialisation on every client,
only B (and the head) trained and averaged; a heterogeneous-rank variant (shared
plumbing: methods/rank_hetero.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.aggregation import component_mean
from fedbench.methods.base import LocalPhase, MethodState, Traffic, tensor_bytes
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankConfig, RankMethod

#: FFA-LoRA's learning rate over LoRA's: the paper's grids (third-party restatement of its
#: Sec. 5, SGD) are LoRA {0.01..0.1} and FFA {0.1..1.0}
FFA_LR_SCALE = 10.0


@dataclass(frozen=True)
class FFALoRAConfig(RankConfig):
    ranks: Literal["global", "tier"] = cfg_field(
        "global", "'global': every client trains B at the global rank (the paper's); 'tier': client k trains "
                  "B_k of its tier's rank r_k against the frozen A[:r_k] (FFA-LoRA-het, a benchmark variant)")
    het_mean: Literal["contributors", "zero_pad"] = cfg_field(
        "contributors", "ranks='tier': column j of B averaged over the clients with r_k > j (contributor-"
                        "normalised, default) or over every client with zeros where r_k <= j (the exact mean "
                        "of the clients' updates, which shrinks the upper columns)")
    lr_scale: float = cfg_field(
        FFA_LR_SCALE, "factor on the run's lr for FFA's local training: with A frozen only B moves the update, "
                      "so FFA needs a larger rate than LoRA (paper grids, SGD: LoRA 0.01-0.1, FFA 0.1-1.0)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "lr_scale", self.lr_scale > 0, "must be a number > 0")


@METHODS.register("ffa_lora", "FFA-LoRA: A frozen at the shared seeded init, only B (+ head) trained and averaged "
                              "(exact aggregation, half the traffic)")
class FFALoRA(RankMethod):
    """FFA-LoRA (Sun et al., "Improving LoRA in Privacy-preserving Federated Learning",
    ICLR 2024; spec: shared/docs/methods-2026.md Sec. 1; no official code).

    - A is peft's initialisation (kaiming-uniform) built once from the run's adapter seed:
      the initial global state every client's payload slices. It is never trained (not in
      any phase, never uploaded) and never changes, so it is bit-identical on every client
      in every round.
    - Clients train B and the head, from the global values; upload B_k (d_out x r) and the
      head. Server: B_bar = sum_k p_k B_k (example weights), head likewise. Exact:
      sum_k p_k s B_k A = s B_bar A.
    - Learning rate: ``lr_scale`` (default 10) times the run's, through ``LocalPhase.lr_scale``
      (see its docstring for what the training loop does with it).
    - ``ranks='tier'`` (FFA-LoRA-het, a benchmark variant): client k gets A[:r_k] and
      B[:, :r_k] and trains B_k (d_out x r_k) at scaling alpha / r_max (adapter alpha
      alpha r_k / r_max); ``het_mean`` says how column j is averaged: 'contributors' = over
      the clients with r_k > j (HETLoRA's rule); 'zero_pad' = over every client with zeros
      where r_k <= j (the exact mean of the clients' s B_k A[:r_k]).
    - Traffic: down = B + head; A costs nothing (every client builds it from the shared
      adapter seed; a one-time broadcast would be r d_in per module per client, once). The
      payload the simulator ships (A re-sent every round, as both reference codes do) is
      recorded as a variant. Up = B + head.
    """
    family = "LoRA aggregation (2024-2026)"

    config_cls = FFALoRAConfig
    SENT_LABEL = "as sent (A re-sent every round, as both reference codes)"

    def _check_ranks(self, profiles) -> None:
        if self.config.ranks == "tier":
            super()._check_ranks(profiles)

    def client_alpha(self, rank: int) -> float:
        return float(self.config.lora_alpha) * rank / self.r_max

    def client_rank(self, profile, state):
        return profile.rank if self.config.ranks == "tier" else self.r_max

    def client_payload(self, state, plan):
        out = {}
        for m in self.modules:
            out[m + A_SFX] = state.tensors[m + A_SFX][: plan.rank]  # (r_k, d_in), the seeded init
            out[m + B_SFX] = state.tensors[m + B_SFX][:, : plan.rank]  # (d_out, r_k)
        return out | self.head_tensors(state)

    def upload_keys(self, plan):
        return [m + B_SFX for m in self.modules] + list(self.ctx.head_keys)

    def local_phases(self, plan):
        return (LocalPhase("train", tuple(self.upload_keys(plan)), lr_scale=self.config.lr_scale),)

    def traffic(self, plan, payload, upload):
        """Down: B + head (A from the shared seed)."""
        down = tensor_bytes({k: v for k, v in payload.items() if not k.endswith(A_SFX)})
        return Traffic(down, tensor_bytes(upload), {self.SENT_LABEL: tensor_bytes(payload)})

    def merge(self, state, updates, out):
        weights = [float(u.n_examples) for u in updates]
        for m in self.modules:
            key = m + B_SFX
            current = state.tensors[key]  # (d_out, r_max)
            parts = [u.tensors[key] for u in updates]
            if self.config.het_mean == "zero_pad":
                padded = [torch.nn.functional.pad(p.float(), (0, self.r_max - p.shape[1])) for p in parts]
                total = sum(weights)
                out[key] = (sum(w * p for w, p in zip(weights, padded)) / total).to(current.dtype)
            else:
                out[key] = component_mean(current, parts, weights, dim=1)
        return MethodState(out, state.extra)  # A: the state's own, untouched
