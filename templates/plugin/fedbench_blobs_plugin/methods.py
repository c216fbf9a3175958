"""The plugin's method: FedAvg with every client weighted equally (entry point ``uniform_avg``)."""

from __future__ import annotations

from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.base import Method, MethodState


class UniformAvg(Method):
    """FedAvg with every client weighted equally (not by its examples)."""

    def plan(self, rnd, clients, state, rng):
        from fedbench.methods.base import ClientPlan

        return {p.client: ClientPlan(p.client, p.tier, tuple(range(self.ctx.n_layers))) for p in clients}

    def aggregate(self, state, updates):
        return MethodState(weighted_mean_by_key(state.tensors, updates, "uniform"), state.extra)
