"""Rank-heterogeneous federated LoRA: HETLoRA, FlexLoRA, FLoRA.

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
import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import torch

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.methods.base import (ClientPlan, ClientUpdate, Method, MethodConfig, MethodState, payload_bytes,
                                   weighted_mean_by_key)

A_SFX, B_SFX = ".lora_A.weight", ".lora_B.weight"


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


def stack_lora(parts: Sequence[tuple[torch.Tensor, torch.Tensor]], coefs: Sequence[float]):
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


def active_lora_pairs(model: torch.nn.Module) -> list[tuple[torch.nn.Parameter, torch.nn.Parameter]]:
    """(A, B) parameters of the active adapter of every peft LoRA layer in ``model``."""
    from peft.tuners.lora import LoraLayer  # peft on use: registering methods stays cheap

    out = []
    for m in model.modules():
        if isinstance(m, LoraLayer):
            name = m.active_adapters[0]
            out.append((m.lora_A[name].weight, m.lora_B[name].weight))
    return out


# ----------------------------------------------------------------------------- base class
#: r_max by task kind (Fed-HeLLo Sec. IV-A: LoRA rank 16 for classification, 8 for
#: instruction tuning; the rank baselines' tiers 1/4/16 and 1/1/8 fit under it)
PAPER_R_MAX = {"classification": 16, "generation": 8}


@dataclass(frozen=True)
class RankConfig(MethodConfig):
    lora_r: int | None = cfg_field(
        None, "global LoRA rank r_max; every tier's rank must be <= it; None = by task kind (Fed-HeLLo Sec. IV-A): "
              "16 for classification, 8 for instruction tuning (the default tier ranks 1/4/16 and 1/1/8 fit)")

    def __post_init__(self) -> None:
        check(self, "lora_r", self.lora_r is None or self.lora_r >= 1, "must be an integer >= 1 (or none: by task kind)")
        check(self, "lora_dropout", 0.0 <= self.lora_dropout < 1.0, "must be in [0, 1)")


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
        """r_max = ``lora_r``, or None -> the paper's for the task kind (``PAPER_R_MAX``)."""
        if config.lora_r is None:
            config = dataclasses.replace(config, lora_r=PAPER_R_MAX.get(task_kind, PAPER_R_MAX["classification"]))
        return config

    def _check_ranks(self, profiles) -> None:
        too_big = sorted({p.rank for p in profiles if p.rank > self.r_max})
        if too_big:
            raise UserError(f"tier rank {too_big[-1]} exceeds the global rank lora_r={self.r_max}; "
                            f"set method.lora_r >= {too_big[-1]} or lower run.tier_ranks")

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

    def plan(self, rnd, clients, state, rng):
        self._check_ranks(clients)
        layers = tuple(range(self.ctx.n_layers))
        plans = {}
        for p in clients:
            r = self.client_rank(p, state)
            alpha = None if r == self.r_max else self.client_alpha(r)
            plans[p.client] = ClientPlan(p.client, p.tier, layers, rank=r, lora_alpha=alpha)
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
        return weighted_mean_by_key(state.tensors, heads, {u.client: float(u.n_examples) for u in updates})

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


# ----------------------------------------------------------------------------- HETLoRA
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


# ----------------------------------------------------------------------------- FlexLoRA
DELTA_SFX = ".flexlora_delta"  # state key of a module's dense global update (d_out, d_in)


@METHODS.register("flexlora", "FlexLoRA: average the clients' full-size B_i A_i, SVD, send each client its top r_i")
class FlexLoRA(RankMethod):
    """FlexLoRA (Bai et al., "Federated Fine-tuning of Large Language Models under
    Heterogeneous Tasks and Client Resources", NeurIPS 2024).

    Server, per LoRA module: dW = sum_i p_i s_i B_i A_i with p_i example weights and
    s_i = alpha / r_i (the client's own peft scaling); SVD dW = U S V^T; client i gets
    A = V_{r_i}^T, B = U_{r_i} S_{r_i} / s_i, so its model starts from the best rank-r_i
    approximation of dW. The state keeps the top-r_max factors (payloads are slices of
    them) and dW itself: the global model evaluated is W0 + dW exactly (merged into the
    base weights for the evaluation). Round 1 sends the initial LoRA (A0[:r_i], B = 0).
    Traffic: what is sent, the rank-r_i factors each way (the paper's tables count
    full-size matrices; the Fed-HeLLo paper's 57 MB/round for FlexLoRA does the same).
    """

    def init_state(self, tensors):
        st = dict(tensors) | self.read_base(tensors)
        for m in self.modules:
            w = st[base_key(m)]
            st[m + DELTA_SFX] = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        return MethodState(st, {"aggregated": False})

    def client_payload(self, state, plan):
        # state LoRA = top-r_max factors at the global scaling alpha / r_max
        rescale = self.client_scaling(self.r_max) / self.client_scaling(plan.rank)
        out = {}
        for m in self.modules:
            out[m + A_SFX] = state.tensors[m + A_SFX][: plan.rank]  # (r_i, d_in)
            out[m + B_SFX] = state.tensors[m + B_SFX][:, : plan.rank] * rescale  # (d_out, r_i)
        return out | self.head_tensors(state)

    def merge(self, state, updates, out):
        total = float(sum(u.n_examples for u in updates))
        s_max = self.client_scaling(self.r_max)
        with self.metered():
            for m in self.modules:
                delta = sum((u.n_examples / total) * lora_product(
                    u.tensors[m + A_SFX], u.tensors[m + B_SFX], self.client_scaling(u.plan.rank)) for u in updates)
                a, b = top_factors(delta, self.r_max, s_max)
                a, b = pad_rank(a, b, self.r_max)  # a module smaller than r_max
                out[m + DELTA_SFX] = delta
                out[m + A_SFX] = a.to(state.tensors[m + A_SFX].dtype)
                out[m + B_SFX] = b.to(state.tensors[m + B_SFX].dtype)
        return MethodState(out, {**state.extra, "aggregated": True})

    def eval_tensors(self, state):
        """W0 + dW in the base weights, the default adapter's B zero, the head."""
        out = self.head_tensors(state)
        for m in self.modules:
            w0 = state.tensors[base_key(m)]
            out[base_key(m)] = (w0.float() + state.tensors[m + DELTA_SFX]).to(w0.dtype)
            out[m + A_SFX] = state.tensors[m + A_SFX]
            out[m + B_SFX] = torch.zeros_like(state.tensors[m + B_SFX])
        return out


# ----------------------------------------------------------------------------- FLoRA
@METHODS.register("flora", "FLoRA: stack the clients' LoRA along the rank axis, merge into the base, fresh LoRA each round (traffic: the stack; merged weights as alt)")
class FLoRA(RankMethod):
    """FLoRA (Wang et al., "FLoRA: Federated Fine-Tuning Large Language Models with
    Heterogeneous Low-Rank Adaptations", NeurIPS 2024).

    Aggregation per LoRA module: A_s = concat_i(p_i s_i A_i), B_s = concat_i(B_i), so
    B_s A_s = sum_i p_i (alpha / r_i) B_i A_i exactly (the client's own scaling s_i folded
    into its block of A_s; methods.md writes the merge as (alpha / r) B_s A_s, which is
    only right when all ranks are equal). The merged weights W_{t+1} = W_t + B_s A_s are
    the new base every client starts from with a fresh LoRA.

    Payload: W_t of every LoRA module (the merged weights), a fresh A (peft's init,
    uniform(+-1/sqrt(d_in)), seeded per client and round) with B = 0, and the head.

    Traffic, two counts (``down_bytes`` / ``down_bytes_variants``): the headline
    ``cost.traffic_mb_per_client_round`` counts what the FLoRA and Fed-HeLLo papers count,
    the stacked adapter of the last aggregation, sum_i r_i (d_in + d_out) numbers per
    module (from which a client rebuilds W_t = W_{t-1} + B_s A_s itself; nothing in round
    1), + the head; the fresh A is not counted (a client draws it locally; we ship it only
    so the simulated client has no other source). ``cost.traffic_alt_mb_per_client_round``
    ["merged weights ..."] counts the literal payload: the dense W_t of every LoRA module
    + the fresh LoRA + the head.
    Known issue (methods.md): the authors' runs diverge over many rounds; nothing here
    corrects that.
    """

    def init_state(self, tensors):
        return MethodState(dict(tensors) | self.read_base(tensors), {})

    MERGED_LABEL = "merged weights (dense W_t of every LoRA module + fresh LoRA + head, as sent)"

    def plan(self, rnd, clients, state, rng):
        plans = super().plan(rnd, clients, state, rng)
        for p in plans.values():
            p.extra["init_seed"] = int(rng.integers(2**31 - 1))
            p.extra["stack_rank"] = int(state.extra.get("stack_rank", 0))  # sum_i r_i of the last merge
        return plans

    def down_bytes(self, plan, payload):
        """The stacked adapter (sum_i r_i (d_in + d_out) per module, the papers' count) + the head."""
        r_stack = int(plan.extra.get("stack_rank", 0))
        stack = 0
        for m in self.modules:
            w = payload[base_key(m)]  # (d_out, d_in)
            stack += r_stack * (w.shape[0] + w.shape[1]) * w.element_size()
        return stack + payload_bytes({k: payload[k] for k in self.ctx.head_keys if k in payload})

    def down_bytes_variants(self, plan, payload):
        return {self.MERGED_LABEL: payload_bytes(payload)}

    def client_payload(self, state, plan):
        gen = torch.Generator().manual_seed(plan.extra["init_seed"])
        out = {}
        for m in self.modules:
            w = state.tensors[base_key(m)]  # (d_out, d_in)
            d_out, d_in = w.shape
            bound = 1.0 / math.sqrt(d_in)
            a = (torch.rand(plan.rank, d_in, generator=gen) * 2 - 1) * bound
            out[base_key(m)] = w
            out[m + A_SFX] = a.to(device=w.device, dtype=w.dtype)  # (r_i, d_in)
            out[m + B_SFX] = torch.zeros(d_out, plan.rank, dtype=w.dtype, device=w.device)  # (d_out, r_i)
        return out | self.head_tensors(state)

    def merge(self, state, updates, out):
        total = float(sum(u.n_examples for u in updates))
        coefs = [(u.n_examples / total) * self.client_scaling(u.plan.rank) for u in updates]
        with self.metered():
            for m in self.modules:
                a, b = stack_lora([(u.tensors[m + A_SFX], u.tensors[m + B_SFX]) for u in updates], coefs)
                w = state.tensors[base_key(m)]
                out[base_key(m)] = (w.float() + b @ a).to(w.dtype)  # (d_out, d_in)
        return MethodState(out, {**state.extra, "stack_rank": int(sum(u.plan.rank for u in updates))})
