"""Shared plumbing of the alternating-factor methods: RoLoRA and RoLoRA-het
(methods/rolora.py) and LoRA-A2 (methods/lora_a2.py); their pure rules are in
methods/factor_rules.py.

Every round all clients train one LoRA factor (``Method.trained_factor``: B in rounds 1,
3, ..., A in rounds 2, 4, ...) and the head, the other factor frozen at its shared global
value, so the average of the trained factor is exact: sum_k p_k B_k A = (sum_k p_k B_k) A.
The adapter starts from B = 0 (peft's init, checked by ``init_state``) and the first round
trains B (checked by ``plan``): with B = 0, dL/dA = 0. Every client-round builds a fresh
optimizer, so no Adam moment of one factor's round survives into the next (the spec's
"rebuild optimiser state on each switch").

Traffic (spec methods-2027.md Secs. 3-4): down = the head + the factors the server changed
since the client was last sent the model (one factor for a client of the previous round,
both for one that missed a round; none in round 1, whose seeded initial adapter every
client builds itself, as FFA-LoRA's A); the payload the simulator ships (both factors and
the head every round) is recorded as a variant. Up = what the client trained.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from fedbench.methods.aggregation import client_weight, weighted_mean_by_key
from fedbench.methods.base import (LORA_FACTORS, ClientPlan, ClientProfile, ClientUpdate, LocalPhase, Method,
                                   MethodState, Traffic, tensor_bytes)
from fedbench.methods.factor_rules import (RANK_DIM, alternating_factor, changed_factors, masked_factor_mean,
                                           rank_mask)
from fedbench.methods.paper_defaults import with_paper_rank
from fedbench.methods.rank_hetero import check_tier_ranks, lora_modules

SENT = "sent_round"  # state.extra: {client id (str): the last round it was sent the model}
ROUND = "round"  # plan.extra: the round
CHANGED = "changed"  # plan.extra: the factors changed since the client last had the model
UPLOAD_RANK = "upload_rank"  # plan.extra (masked methods): ranks per module, on average, it trains and sends
RANKS = "ranks"  # plan.extra (masked methods): {module: [the ranks of the round's factor it trains]}
BUDGET = "upload_budget_bytes"  # plan.extra (masked methods): Method.upload_budget


class AlternatingLoRA(Method):
    family = "alternating factors (2025)"

    """Alternating factors over a global rank-``lora_r`` LoRA on every layer (module
    docstring); aggregation: the weighted mean of each uploaded tensor (the trained factor
    and the head), the frozen factor untouched. Subclasses set the weighting (``config.weighting``)."""

    SENT_LABEL = "as sent (both factors and the head every round)"

    def __init__(self, config, ctx):
        super().__init__(type(self).resolve_config(config, ctx.task_kind), ctx)
        self.modules = lora_modules(ctx.all_keys)
        self.r_max = int(self.config.lora_r)

    @classmethod
    def resolve_config(cls, config, task_kind):
        """``lora_r`` None -> the paper rank of the task kind (16 / 8, ``paper_defaults``)."""
        return with_paper_rank(config, task_kind)

    def trained_factor(self, rnd: int) -> str:
        return alternating_factor(rnd)

    def factor_keys(self, factor: str) -> list[str]:
        return [m + LORA_FACTORS[factor] for m in self.modules]

    def init_state(self, tensors):
        """The initial adapter, which must have B = 0 (peft's LoRA init): training B first
        then starts the model exactly at W0 and the first A-round has a B to train against."""
        nonzero = [k for k in self.factor_keys("B") if bool(tensors[k].any())]
        if nonzero:
            raise ValueError(f"{type(self).__name__} starts from B = 0 (it trains B first); {nonzero[0]} is not zero")
        return MethodState(dict(tensors), {SENT: {}})

    def plan(self, rnd, clients, state, rng):
        factor = self.trained_factor(rnd)
        if rnd == 1 and factor != "B":
            raise AssertionError(f"round 1 must train B (from B = 0, dL/dA = 0), not {factor}")
        sent = state.extra.get(SENT, {})
        layers = tuple(range(self.ctx.n_layers))
        return {p.client: ClientPlan(p.client, p.tier, layers, factor=factor,
                                     extra={ROUND: rnd, CHANGED: sorted(changed_factors(int(sent.get(str(p.client), 0)),
                                                                                        rnd)),
                                            **self.client_extra(p, state, factor)})
                for p in clients}

    def client_extra(self, profile: ClientProfile, state: MethodState, factor: str) -> dict[str, Any]:
        """More of ``plan.extra`` for ``profile``'s client in a round training ``factor``.
        Default: nothing."""
        return {}

    def traffic(self, plan, payload, upload):
        """Down: the head and the factors changed since the client last had the model (module
        docstring); up: :meth:`up_bytes`."""
        down = tensor_bytes({k: payload[k] for k in self.ctx.head_keys})
        down += sum(tensor_bytes({k: payload[k] for k in self.factor_keys(f)}) for f in plan.extra[CHANGED])
        return Traffic(down, self.up_bytes(plan, upload), {self.SENT_LABEL: tensor_bytes(payload)})

    def up_bytes(self, plan: ClientPlan, upload: Mapping[str, torch.Tensor]) -> int:
        """Bytes the client sends up. Default: its whole upload (the trained factor + head)."""
        return tensor_bytes(upload)

    def aggregate(self, state, updates):
        if not updates:
            return state
        sent = dict(state.extra.get(SENT, {}))
        for u in updates:
            sent[str(u.client)] = int(u.plan.extra[ROUND])
        return MethodState(self.merge(state, updates), {**state.extra, SENT: sent})

    def merge(self, state: MethodState, updates: Sequence[ClientUpdate]) -> dict[str, torch.Tensor]:
        """The new tensors: the weighted mean of each uploaded tensor (the frozen factor
        keeps its value; exact, since every client trained against the same one)."""
        return weighted_mean_by_key(state.tensors, updates, self.config.weighting)


class MaskedAlternating(AlternatingLoRA):
    """An alternating method whose clients train only some ranks of the round's factor:
    ``plan.extra[RANKS]`` names them per module (set by ``plan`` or chosen on the client,
    ``Method.client_select``); only they train (``LocalPhase.trained_slices``: the other ranks
    keep their global values in every executor) and only they count as sent, + the
    selection (one byte per rank and module); the server averages each rank with
    :func:`~fedbench.methods.factor_rules.masked_factor_mean` (``normalise``). Client k's
    rank budget r_k is its tier's rank (``ClientProfile.rank``, at most ``lora_r``)."""

    normalise: str = "all"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        check_tier_ranks(ctx.profiles.values(), self.r_max)

    def client_extra(self, profile, state, factor):
        """r_k and the upload budget it buys: the head, the selection (one byte per rank
        and module) and r_k M ranks of the largest rank size of ``factor`` (equal sizes, as
        q/v of a transformer: exactly r_k M of them)."""
        check_tier_ranks([profile], self.r_max)
        dim = RANK_DIM[factor]
        rank_bytes = max(t.numel() // t.shape[dim] * t.element_size()
                         for t in (state.tensors[k] for k in self.factor_keys(factor)))
        budget = (tensor_bytes({k: state.tensors[k] for k in self.ctx.head_keys}) + len(self.modules) * self.r_max
                  + int(profile.rank) * len(self.modules) * rank_bytes)
        return {UPLOAD_RANK: int(profile.rank), BUDGET: budget}

    def upload_budget(self, plan):
        return plan.extra[BUDGET]

    def local_phases(self, plan):
        dim = RANK_DIM[plan.factor]
        slices = tuple((m + LORA_FACTORS[plan.factor], dim, tuple(plan.extra[RANKS][m])) for m in self.modules)
        return (LocalPhase("train", tuple(self.upload_keys(plan)), trained_slices=slices),)

    def up_bytes(self, plan, upload):
        """The head, the selection (one byte per rank and module) and of the trained factor
        only the selected ranks."""
        dim = RANK_DIM[plan.factor]
        total = tensor_bytes({k: upload[k] for k in self.ctx.head_keys}) + len(self.modules) * self.r_max
        for m in self.modules:
            t = upload[m + LORA_FACTORS[plan.factor]]
            total += len(plan.extra[RANKS][m]) * (t.numel() // t.shape[dim]) * t.element_size()
        return total

    def merge(self, state, updates):
        heads = [ClientUpdate(u.client, {k: u.tensors[k] for k in self.ctx.head_keys}, u.n_examples, u.plan)
                 for u in updates]
        out = weighted_mean_by_key(state.tensors, heads, self.config.weighting)
        factor = updates[0].plan.factor
        weights = [client_weight(u, self.config.weighting) for u in updates]
        for m in self.modules:
            k = m + LORA_FACTORS[factor]
            masks = [rank_mask(self.r_max, u.plan.extra[RANKS][m]) for u in updates]
            out[k] = masked_factor_mean(state.tensors[k], [u.tensors[k] for u in updates], masks, weights,
                                        RANK_DIM[factor], self.normalise)
        return out
