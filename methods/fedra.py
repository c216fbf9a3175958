"""FedRA: random allocation of blocks (Su et al., "FedRA: A Random Allocation Strategy for
Federated Tuning to Unleash the Power of Heterogeneous Clients", arXiv 2311.11227).

Each round the server draws an allocation matrix M (clients x L) whose row i has c_i ones
at layers chosen uniformly at random. Client i builds its model from the embedding, the
chosen blocks **in ascending order**, the final norm and the head (the other blocks are
skipped entirely, so forward and backward cost drop) and trains their LoRA + the head.

Aggregation of layer j (the paper's r_j): example-weighted mean of the LoRA of the clients
that held j. Layers nobody held keep last round's value (``coverage='keep'``, the default,
Eq. 3 in the issue's numbering) or the allocation is redrawn until every layer is covered
(``coverage='redraw'``, Eq. 4), with bounded retries.

Deviations from the authors' code (see docs/methods.md): we weight by example count (the
code averages uniformly; ``weighting='uniform'`` reproduces it) and LoRA never touches the
patch embedding (the task's LoRA target list only names block modules).
LoRA targets: the tasks' profile ``proj_fc2`` (attention output projection + MLP fc2, what
FedRA targets), the default of ``lora_targets``. It used to be called ``fedra``, a name
still accepted (deprecated alias, same modules): records and configs that say
``lora_targets: fedra`` re-run to the same metrics under their own run id; a run that
leaves the default says ``proj_fc2``, so its run id differs from an old default run's
while its metrics are the same.
Traffic, two counts (``traffic``): the frozen block weights never change, so
by default a client is assumed to have them and the headline counts LoRA + head;
``count_frozen_blocks=True`` makes the headline also count shipping the chosen frozen
blocks each round (the paper's literal sub-model download). Whichever is the headline,
``cost.traffic_alt_mb_per_client_round`` records the other, labelled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, weighted_mean_by_key
from fedbench.methods.base import ClientPlan, Method, MethodConfig, MethodState, Traffic, tensor_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FedRAConfig(MethodConfig):
    lora_targets: str = cfg_field("proj_fc2", "LoRA targets: FedRA puts LoRA on the attention output projection and "
                                              "MLP fc2 (profile 'proj_fc2'; 'fedra' is its deprecated name)")
    coverage: Literal["keep", "redraw"] = cfg_field(
        "keep", "layers nobody trained: 'keep' last round's value (Eq. 3) or 'redraw' the allocation (Eq. 4)"
    )
    weighting: Weighting = cfg_field("examples", "aggregation weights per client")
    max_redraws: int = cfg_field(100, "bound on allocation redraws for coverage='redraw'")
    count_frozen_blocks: bool = cfg_field(False, "count the frozen weights of the chosen blocks in down traffic")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "max_redraws", self.max_redraws >= 1, "must be an integer >= 1")


def allocation_matrix(budgets: list[int], n_layers: int, rng: np.random.Generator) -> np.ndarray:
    """M[i, j] = 1 iff client i trains layer j; row i has budgets[i] ones, uniform at random."""
    m = np.zeros((len(budgets), n_layers), dtype=np.int64)
    for i, c in enumerate(budgets):
        m[i, rng.choice(n_layers, size=c, replace=False)] = 1
    return m


@METHODS.register("fedra", "FedRA (sub-model, as the FedRA paper ran it): each client runs and trains only c_i "
                           "random blocks, stacked in ascending order")
class FedRA(Method):
    """FedRA as its paper ran it: client i's model is physically the c_i allocated blocks
    (embedding, those blocks in ascending order, final norm, head), so its forward,
    backward and activation memory all shrink with c_i. See ``fedra_fulldepth`` for the
    protocol Fed-HeLLo's tables fit."""
    family = "layer / depth subsets"

    config_cls = FedRAConfig

    def allocation(self, clients, rng) -> np.ndarray:
        """The allocation matrix M (clients x L) of this round, redrawn for coverage='redraw'."""
        L = self.ctx.n_layers
        budgets = [p.layers for p in clients]
        m = allocation_matrix(budgets, L, rng)
        if self.config.coverage == "redraw":
            if sum(budgets) < L:
                log.warning("fedra: budgets %s cannot cover %d layers; keeping uncovered layers", budgets, L)
            else:
                tries = 0
                while (m.sum(axis=0) == 0).any() and tries < self.config.max_redraws:
                    m = allocation_matrix(budgets, L, rng)
                    tries += 1
                if (m.sum(axis=0) == 0).any():
                    log.warning("fedra: no covering allocation in %d redraws", self.config.max_redraws)
        return m

    def plan(self, rnd, clients, state, rng):
        m = self.allocation(clients, rng)
        plans = {}
        for i, p in enumerate(clients):
            layers = tuple(int(j) for j in np.flatnonzero(m[i]))
            plans[p.client] = ClientPlan(p.client, p.tier, layers, blocks=layers)
        return plans

    def aggregate(self, state: MethodState, updates):
        return MethodState(weighted_mean_by_key(state.tensors, updates, self.config.weighting), state.extra)

    WITH_BLOCKS = "frozen base weights of the received blocks + LoRA + head (sub-model download)"
    WITHOUT_BLOCKS = "LoRA + head only (frozen blocks assumed on the client)"

    def frozen_bytes(self, plan: ClientPlan) -> int:
        blocks = range(self.ctx.n_layers) if plan.blocks is None else plan.blocks
        return sum(self.ctx.block_bytes.get(j, 0) for j in blocks)

    def traffic(self, plan, payload, upload):
        """Headline down: LoRA + head, + the frozen blocks with ``count_frozen_blocks``; the
        other count is the labelled variant."""
        lora, blocks = tensor_bytes(payload), self.frozen_bytes(plan)
        if self.config.count_frozen_blocks:
            return Traffic(lora + blocks, tensor_bytes(upload), {self.WITHOUT_BLOCKS: lora})
        return Traffic(lora, tensor_bytes(upload), {self.WITH_BLOCKS: lora + blocks})


@METHODS.register("fedra_fulldepth",
                  "FedRA full-depth (as Fed-HeLLo's tables fit): full-depth forward, LoRA of c_i random layers "
                  "trained, the rest frozen")
class FedRAFullDepth(FedRA):
    """FedRA's random allocation run the way Fed-HeLLo's Tables II/III account for it.

    Same allocation matrix M (c_i layers uniformly at random per client and round, the
    same ``coverage`` / ``weighting`` options) and the same per-layer owner aggregation as
    ``fedra``, but every client runs the **full-depth** model: the LoRA of its c_i layers
    is trained, all other LoRA layers are frozen and still in the forward (this is
    Fed-HeLLo's GD-HLA "Uniform" pattern with FedRA's example-weighted aggregation).

    Which paper used which: the FedRA paper (Su et al.) builds a physically smaller model
    from the allocated blocks (``fedra``: forward, backward and activation memory shrink
    with c_i, and the frozen weights of those blocks could be shipped). Fed-HeLLo
    (Zhang et al., Tables II/III) reports FedRA with the same backward TFLOPs as Fed-HeLLo
    and nearly the same memory, which fits this full-depth protocol: it saves only the
    weight gradients and optimizer state of the frozen LoRA layers and the backward below
    the lowest trained layer; the forward is always full depth. No frozen blocks travel
    (the client holds the whole backbone), so down traffic is LoRA + head. To match
    Fed-HeLLo's setup also set ``lora_targets=qv lora_r=16 lora_dropout=0.1``.
    """
    family = "layer / depth subsets"

    def plan(self, rnd, clients, state, rng):
        m = self.allocation(clients, rng)
        return {p.client: ClientPlan(p.client, p.tier, tuple(int(j) for j in np.flatnonzero(m[i])))
                for i, p in enumerate(clients)}

    def traffic(self, plan, payload, upload):
        """The payload and the upload, no variants: the full backbone is on the client."""
        return Traffic(tensor_bytes(payload), tensor_bytes(upload))
