"""Rank-heterogeneous federated LoRA: the shared base of HETLoRA (methods/hetlora.py),
FlexLoRA (methods/flexlora.py) and FLoRA (methods/flora.py).

Every client trains LoRA on all layers at its tier's rank r_i (``ClientProfile.rank``;
``--roc`` tiers default by task kind to Fed-HeLLo Sec. IV-A's r = 1/4/16 for
classification and 1/1/8 for instruction tuning); the global LoRA has rank r_max =
``lora_r`` (default by task kind: 16 / 8, so the default tiers fit). A client of rank r_i != r_max trains a peft
adapter of its own (``ClientPlan.rank``); its tensors keep their canonical names with
rank-r_i shapes: A (r_i, d_in), B (d_out, r_i).

**Scaling.** peft computes a LoRA layer's update as (alpha_i / r_i) B A with the adapter's
own alpha_i. Each method fixes alpha_i (``client_alpha``) and the server uses exactly
s_i = alpha_i / r_i (``client_scaling``) whenever it rebuilds a client's update:

- HETLoRA: alpha_i = alpha r_i / r_max, so s_i = alpha / r_max for everyone: the leading
  r_i components a client receives act on it exactly as they act in the global model.
- FlexLoRA, FLoRA: alpha_i = alpha (standard LoRA), s_i = alpha / r_i; the server folds
  s_i into what it rebuilds and sends. (The FLoRA authors' code gave the stacked adapter
  one scaling, alpha_stack / r_stack, that is not any client's own: the bug we avoid;
  ``tests/methods/test_flora.py`` checks the server's s_i against peft's.)

The dense base weight of a LoRA module is ``<module>.base_layer.weight`` (peft's name).
FLoRA sends merged base weights in its payload and FlexLoRA evaluates with them: the
runner applies base weights found in a payload / in ``eval_tensors`` to that client /
that evaluation only (``AdapterModel.base_overlay``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Sequence

import torch

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.base import (LORA_FACTORS, ClientPlan, ClientProfile, ClientUpdate, Method, MethodConfig,
                                   MethodState)
from fedbench.methods.paper_defaults import with_paper_rank

A_SFX, B_SFX = LORA_FACTORS["A"], LORA_FACTORS["B"]


# ----------------------------------------------------------------------------- helpers
def lora_modules(keys: Sequence[str]) -> list[str]:
    """Module names that have a LoRA pair among ``keys`` (in order)."""
    mods = [k[: -len(A_SFX)] for k in keys if k.endswith(A_SFX)]
    missing = [m for m in mods if m + B_SFX not in keys]
    if missing:
        raise ValueError(f"LoRA A without B for {missing[0]}")
    return mods


def base_key(module: str) -> str:
    return f"{module}.base_layer.weight"


def lora_product(a: torch.Tensor, b: torch.Tensor, scaling: float) -> torch.Tensor:
    """scaling * B A: the dense update of one LoRA module, (d_out, d_in)."""
    return scaling * (b.float() @ a.float())


def active_lora_pairs(model: torch.nn.Module) -> list[tuple[torch.nn.Parameter, torch.nn.Parameter]]:
    """(A, B) parameters of the active adapter of every peft LoRA layer in ``model``."""
    from peft.tuners.lora import LoraLayer  # peft on use: registering methods stays cheap

    out = []
    for m in model.modules():
        if isinstance(m, LoraLayer):
            name = m.active_adapters[0]
            out.append((m.lora_A[name].weight, m.lora_B[name].weight))
    return out


def check_tier_ranks(profiles: Iterable[ClientProfile], r_max: int) -> None:
    """Refuse (one line) a tier rank above the global rank ``r_max``."""
    too_big = sorted({p.rank for p in profiles if p.rank > r_max})
    if too_big:
        raise UserError(f"tier rank {too_big[-1]} exceeds the global rank lora_r={r_max}; "
                        f"set method.lora_r >= {too_big[-1]} or lower run.tier_ranks")


# ----------------------------------------------------------------------------- base class
@dataclass(frozen=True)
class RankConfig(MethodConfig):
    lora_r: int | None = cfg_field(
        None, "global LoRA rank r_max; every tier's rank must be <= it; None = by task kind (Fed-HeLLo Sec. IV-A): "
              "16 for classification, 8 for instruction tuning (the default tier ranks 1/4/16 and 1/1/8 fit)")



@dataclass(frozen=True)
class AuthorsRuleConfig(RankConfig):
    """FlexLoRA's and FLoRA's config: the papers' rules by default, and two opt-in departures
    that reproduce how the released code around Fed-HeLLo's runs differs (read in the methods'
    docstrings), so that a run can measure whether they explain Fed-HeLLo's Table III."""

    server_rule: Literal["paper", "authors_code"] = cfg_field(
        "paper", "'paper' (default): the method's paper; 'authors_code': the rule of the authors' code, opt-in "
                 "for measuring the Fed-HeLLo gap (FlexLoRA: the means of A and B taken separately, then SVD; FLoRA: "
                 "the stacked adapter merged at the global scaling alpha / lora_r, not each client's alpha / r_i)")
    train_head: bool = cfg_field(
        True, "clients train the head and the server averages it (default); false = the head stays at its "
              "initialisation, as in Fed-HeLLo's released code (BERT's classifier frozen, no head aggregated)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "server_rule", self.server_rule in ("paper", "authors_code"), "must be 'paper' or 'authors_code'")


class RankMethod(Method):
    """Shared plan/payload plumbing: all layers at the client's rank, full depth."""

    config_cls = RankConfig

    def __init__(self, config, ctx):
        super().__init__(type(self).resolve_config(config, ctx.task_kind), ctx)
        config = self.config
        self.r_max = config.lora_r
        self.modules = lora_modules(ctx.all_keys)
        self._check_ranks(ctx.profiles.values())

    @classmethod
    def resolve_config(cls, config, task_kind):
        """r_max = ``lora_r``, or None -> the paper's for the task kind (``paper_defaults``)."""
        return with_paper_rank(config, task_kind)

    def _check_ranks(self, profiles) -> None:
        check_tier_ranks(profiles, self.r_max)

    # -- scaling ---------------------------------------------------------------------
    def client_alpha(self, rank: int) -> float:
        """alpha of a rank-``rank`` client's peft adapter (standard LoRA: the config's)."""
        return float(self.config.lora_alpha)

    def client_scaling(self, rank: int) -> float:
        """alpha_i / r_i: the scaling peft applies to a rank-``rank`` client's B A."""
        return self.client_alpha(rank) / rank

    # -- hooks -----------------------------------------------------------------------
    def client_rank(self, profile, state: MethodState) -> int:
        return profile.rank

    def trains_head(self) -> bool:
        """Whether clients train (and the server averages) the head; default yes."""
        return True

    def plan(self, rnd, clients, state, rng):
        self._check_ranks(clients)
        layers = tuple(range(self.ctx.n_layers))
        plans = {}
        for p in clients:
            r = self.client_rank(p, state)
            alpha = None if r == self.r_max else self.client_alpha(r)
            plans[p.client] = ClientPlan(p.client, p.tier, layers, rank=r, lora_alpha=alpha,
                                         train_head=self.trains_head())
        return plans

    def aggregate(self, state, updates):
        """Average the head (every client trains it), then the method's LoRA merge."""
        if not updates:
            return state
        return self.merge(state, updates, self.head_mean(state, updates))

    def merge(self, state: MethodState, updates: Sequence[ClientUpdate],
              out: dict[str, torch.Tensor]) -> MethodState:
        """The new state from ``out`` (the averaged head) and the clients' LoRA factors."""
        raise NotImplementedError

    def head_mean(self, state: MethodState, updates: Sequence[ClientUpdate]) -> dict[str, torch.Tensor]:
        """Example-weighted mean of the head over the clients (methods.md: every client trains it)."""
        heads = [ClientUpdate(u.client, {k: u.tensors[k] for k in self.ctx.head_keys if k in u.tensors},
                              u.n_examples, u.plan) for u in updates]
        return weighted_mean_by_key(state.tensors, heads, "examples")

    def head_tensors(self, state: MethodState) -> dict[str, torch.Tensor]:
        return {k: state.tensors[k] for k in self.ctx.head_keys}

    def metered(self):
        """Server-side work (SVDs, dense merges) counted as server FLOPs when a server exists."""
        server = self.ctx.server
        return server.metered() if server is not None else contextlib.nullcontext()

    def base_weights_needed(self) -> list[str]:
        """Pretrained weights of the LoRA modules (FlexLoRA's and FLoRA's state holds them)."""
        return [base_key(m) for m in self.modules]

    def read_base(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The pretrained weights of the LoRA modules among the initial ``tensors``."""
        missing = [k for k in self.base_weights_needed() if k not in tensors]
        if missing:
            raise RuntimeError(f"{type(self).__name__}.init_state needs the base weights (e.g. {missing[0]})")
        return {k: tensors[k].detach().clone() for k in self.base_weights_needed()}
