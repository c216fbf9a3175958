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
Traffic: the frozen block weights never change, so by default a client is assumed to have
them; ``count_frozen_blocks=True`` also counts shipping the chosen frozen blocks each
round (the paper's literal sub-model download).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.base import ClientPlan, Method, MethodConfig, weighted_mean_by_key, MethodState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FedRAConfig(MethodConfig):
    lora_targets: str = cfg_field("fedra", "LoRA targets: FedRA puts LoRA on the attention output projection and MLP fc2")
    coverage: Literal["keep", "redraw"] = cfg_field(
        "keep", "layers nobody trained: 'keep' last round's value (Eq. 3) or 'redraw' the allocation (Eq. 4)"
    )
    weighting: Literal["examples", "uniform"] = cfg_field("examples", "aggregation weights per client")
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


@METHODS.register("fedra", "FedRA: each client trains a random subset of blocks, stacked in ascending order")
class FedRA(Method):
    config_cls = FedRAConfig

    def plan(self, rnd, clients, state, rng):
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
        plans = {}
        for i, p in enumerate(clients):
            layers = tuple(int(j) for j in np.flatnonzero(m[i]))
            plans[p.client] = ClientPlan(p.client, p.tier, layers, blocks=layers)
        return plans

    def aggregate(self, state: MethodState, updates):
        if self.config.weighting == "uniform":
            weights = {u.client: 1.0 for u in updates}
        else:
            weights = {u.client: float(u.n_examples) for u in updates}
        return MethodState(weighted_mean_by_key(state.tensors, updates, weights), state.extra)

    def extra_down_bytes(self, plan: ClientPlan) -> int:
        if not self.config.count_frozen_blocks or plan.blocks is None:
            return 0
        return sum(self.ctx.block_bytes[j] for j in plan.blocks)
