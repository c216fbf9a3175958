"""``server_step``: FedAvg with a server learning rate (Reddi et al. 2021, "Adaptive
Federated Optimization", Algorithm 1 with SGD as the server optimizer).

Each round the server moves every global tensor x a step eta along the clients' mean
update: x_{t+1} = x_t + eta * (mean_i x_i - x_t), the mean example-weighted over the
clients that uploaded the tensor (eta = 1 is FedAvg). The tutorial's example of a method
with a config of its own (docs/tutorial/add-method.md): saved as ``methods/server_step.py``
it is ``--method server_step``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.base import ClientPlan, Method, MethodConfig, MethodState


@dataclass(frozen=True)
class ServerStepConfig(MethodConfig):
    server_lr: float = cfg_field(1.0, "server learning rate eta: the step along the clients' mean update (1 = FedAvg)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "server_lr", 0.0 < self.server_lr <= 2.0, "must be a number in (0, 2]")


def server_step(current: Mapping[str, torch.Tensor], mean: Mapping[str, torch.Tensor],
                lr: float) -> dict[str, torch.Tensor]:
    """x + lr * (m - x) for every tensor x of ``current`` and its mean update m."""
    return {k: x + lr * (mean[k] - x) for k, x in current.items()}


@METHODS.register("server_step", "FedAvg with a server learning rate (Reddi et al. 2021)")
class ServerStep(Method):
    """Every client trains all LoRA layers and the head; the server steps ``server_lr``."""

    config_cls = ServerStepConfig

    def plan(self, rnd, clients, state, rng):
        layers = tuple(range(self.ctx.n_layers))
        return {p.client: ClientPlan(p.client, p.tier, layers) for p in clients}

    def aggregate(self, state, updates):
        mean = weighted_mean_by_key(state.tensors, updates, "examples")
        return MethodState(server_step(state.tensors, mean, self.config.server_lr), state.extra)
