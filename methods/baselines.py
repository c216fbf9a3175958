"""Baselines shared by the FedRA and Fed-HeLLo papers.

- ``fedavg`` (alias ``all_large``; FedIT, "AllLarge (ceiling)"): every client trains all
  LoRA layers, example-weighted FedAvg. Ignores resource limits: it is the ceiling.
- ``all_small`` (FedRA): the global model is cut to the smallest client's depth; everyone
  trains and the server evaluates that shallow model.
- ``straggler`` (Fed-HeLLo): everyone trains only what the weakest tier can.
- ``exclusive`` (Fed-HeLLo): only full-capacity clients train; the others sit out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence


from fedbench.config import cfg_field
from fedbench.methods import METHODS
from fedbench.methods.base import ClientPlan, ClientProfile, Method, MethodConfig, MethodState


@METHODS.register("fedavg", "FedAvg/FedIT: every client trains all LoRA layers (the resource-blind ceiling)", aliases=("all_large",))
class FedAvg(Method):
    """FedAvg over LoRA + head (McMahan et al. 2017; FedIT, Zhang et al. 2024)."""
    family = "baselines"

    def plan(self, rnd, clients, state, rng):
        all_layers = tuple(range(self.ctx.n_layers))
        return {p.client: ClientPlan(p.client, p.tier, all_layers) for p in clients}


def smallest_budget(profiles: Sequence[ClientProfile]) -> int:
    return min(p.layers for p in profiles)


@METHODS.register("all_small", "FedRA's AllSmall: global model cut to the smallest client's depth")
class AllSmall(Method):
    """Everyone trains (and the server evaluates) the first ``min_i c_i`` blocks.

    The depth is fixed at the start from every client's budget (FedRA Table 1 "AllSmall").
    """
    family = "baselines"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.depth = smallest_budget(list(ctx.profiles.values()))

    def plan(self, rnd, clients, state, rng):
        blocks = tuple(range(self.depth))
        return {p.client: ClientPlan(p.client, p.tier, blocks, blocks=blocks) for p in clients}

    def eval_blocks(self, state: MethodState):
        return tuple(range(self.depth))


@dataclass(frozen=True)
class StragglerConfig(MethodConfig):
    layers: Literal["alternate", "first", "last"] = cfg_field(
        "alternate",
        "which layers the weakest budget covers: 'alternate' = every other layer (the Fed-HeLLo "
        "authors' fixed set [0,2,4,...]), 'first' or 'last' c layers",
    )


@METHODS.register("straggler", "Fed-HeLLo's Straggler: everyone trains only what the weakest tier can")
class Straggler(Method):
    """Every client trains the weakest client's budget c_min of LoRA layers (full-depth forward).

    With ``layers='alternate'`` the layers are spread evenly over the depth, which gives
    the authors' set {0, 2, ..., 10} for c_min = 6 of L = 12.
    """
    family = "baselines"

    config_cls = StragglerConfig

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        c, L = smallest_budget(list(ctx.profiles.values())), ctx.n_layers
        if config.layers == "alternate":
            # c indices spread evenly over [0, L): floor(k * L / c)
            self.layers = tuple(sorted({(k * L) // c for k in range(c)}))
        elif config.layers == "first":
            self.layers = tuple(range(c))
        else:
            self.layers = tuple(range(L - c, L))

    def plan(self, rnd, clients, state, rng):
        return {p.client: ClientPlan(p.client, p.tier, self.layers) for p in clients}


@METHODS.register("exclusive", "Fed-HeLLo's Exclusive: only clients that can train every layer take part")
class Exclusive(Method):
    """Clients whose budget is below L sit out (they receive and send nothing). A
    federation with no full-capacity client is refused (``requires_full_tier``): it would
    train nobody."""
    family = "baselines"

    requires_full_tier = True

    def plan(self, rnd, clients, state, rng):
        L = self.ctx.n_layers
        all_layers = tuple(range(L))
        return {
            p.client: ClientPlan(p.client, p.tier, all_layers, skip=p.layers < L)
            for p in clients
        }
