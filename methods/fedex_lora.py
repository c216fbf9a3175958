"""FedEx-LoRA (Singhal et al., ACL 2025): exact aggregation, the residual of averaging the
factors folded into the frozen weight."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from fedbench.config import cfg_field
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, client_weight, exact_lora_mean, weighted_mean_by_key
from fedbench.methods.base import ClientPlan, ClientUpdate, Method, MethodConfig, MethodState, Traffic, tensor_bytes
from fedbench.methods.rank_hetero import A_SFX, B_SFX, base_key, lora_modules

MISSED = "missed_residuals"  # plan.extra: clients N_t of each aggregation the client has not received


@dataclass(frozen=True)
class FedExLoRAConfig(MethodConfig):
    lora_r: int = cfg_field(4, "LoRA rank (the authors' GLUE runs: 4)")
    lora_alpha: float = cfg_field(8.0, "LoRA alpha (the authors' GLUE runs: 8)")
    lora_dropout: float = cfg_field(0.1, "dropout on the LoRA input (the authors' GLUE runs: 0.1)")
    weighting: Weighting = cfg_field(
        "uniform", "client weights p_k in all three means (A, B, B A) and the head: uniform (the authors' code) "
                   "or example counts")


@METHODS.register("fedex_lora", "FedEx-LoRA: average A and B, fold the residual mean(B_k A_k) - B_bar A_bar into "
                                "the frozen weight (exact; the residual counted in down traffic)")
class FedExLoRA(Method):
    """FedEx-LoRA (Singhal et al., "FedEx-LoRA: Exact Aggregation for Federated and Efficient
    Fine-Tuning of Foundation Models", ACL 2025; spec: shared/docs/methods-2026.md Sec. 3).

    Clients train A, B and the head from the global (A_bar, B_bar, W0^t) on every layer
    (budgets are ignored, as FedAvg). Server, per LoRA module, with weights p_k
    (:func:`~fedbench.methods.aggregation.exact_lora_mean`): A_bar = sum p_k A_k,
    B_bar = sum p_k B_k, Res = sum p_k B_k A_k - B_bar A_bar and
    W0^{t+1} = W0^t + s Res (s = alpha / r), head averaged. Then W0^{t+1} + s B_bar A_bar is
    the p-weighted mean of the clients' effective weights exactly. Res is added as it is,
    d_out x d_in like the weight (the authors' GLUE aggregator adds Res^T, a bug square
    q/v hide; their LLM code does not), and W0^t is kept in float32.

    Traffic: up A_k, B_k + head. Down A_bar, B_bar + head + every residual the client has
    not received yet (a client that sat out rounds receives all of them; the payload
    carries W0^t, which has them all). Res_t = sum_k p_k B_k (A_k - A_bar) has rank
    <= N_t r (N_t: the clients aggregated in round t), so the headline counts it factored,
    N_t r (d_in + d_out) per module and missed round; the variants record both conventions:
    factored (= the headline) and dense (one d_out x d_in matrix per module, the sum of
    the missed residuals, as the official code ships the state dict).
    """
    family = "LoRA aggregation (2024-2026)"

    config_cls = FedExLoRAConfig
    FACTORED_LABEL = "residual factored (N_t r (d_in + d_out) per module and missed round, = the headline)"
    DENSE_LABEL = "residual dense (d_out x d_in per module once, as the official code ships it)"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.modules = lora_modules(ctx.all_keys)

    def base_weights_needed(self) -> list[str]:
        return [base_key(m) for m in self.modules]

    def init_state(self, tensors):
        st = dict(tensors)
        for k in self.base_weights_needed():
            st[k] = tensors[k].detach().float().clone()  # W0^t in float32
        return MethodState(st, {"residual_clients": [], "synced": {}})

    def plan(self, rnd, clients, state, rng):
        layers = tuple(range(self.ctx.n_layers))
        done = state.extra["residual_clients"]
        plans = {}
        for p in clients:
            missed = done[int(state.extra["synced"].get(str(p.client), 0)):]
            plans[p.client] = ClientPlan(p.client, p.tier, layers, extra={MISSED: list(missed)})
        return plans

    def client_payload(self, state, plan):
        return super().client_payload(state, plan) | {k: state.tensors[k] for k in self.base_weights_needed()}

    def model_keys(self, plan):
        return super().model_keys(plan) + self.base_weights_needed()

    def traffic(self, plan, payload, upload):
        adapter = tensor_bytes({k: v for k, v in payload.items() if k not in set(self.base_weights_needed())})
        factored = dense = 0
        for m in self.modules:
            a, b = payload[m + A_SFX], payload[m + B_SFX]  # (r, d_in), (d_out, r)
            size = a.element_size()
            factored += sum(n * a.shape[0] * (a.shape[1] + b.shape[0]) for n in plan.extra[MISSED]) * size
            dense += (b.shape[0] * a.shape[1] * size) if plan.extra[MISSED] else 0
        return Traffic(adapter + factored, tensor_bytes(upload),
                       {self.FACTORED_LABEL: adapter + factored, self.DENSE_LABEL: adapter + dense})

    def aggregate(self, state, updates):
        if not updates:
            return state
        w = self.config.weighting
        weights = [client_weight(u, w) for u in updates]
        heads = [ClientUpdate(u.client, {k: u.tensors[k] for k in self.ctx.head_keys}, u.n_examples, u.plan)
                 for u in updates]
        out = weighted_mean_by_key(state.tensors, heads, w)
        s = self.config.lora_alpha / self.config.lora_r
        server = self.ctx.server
        with server.metered() if server is not None else contextlib.nullcontext():
            for m in self.modules:
                a_key, b_key, w_key = m + A_SFX, m + B_SFX, base_key(m)
                parts = [(u.tensors[a_key], u.tensors[b_key]) for u in updates]
                a_bar, b_bar, residual = exact_lora_mean(parts, weights)
                out[a_key] = a_bar.to(state.tensors[a_key].dtype)
                out[b_key] = b_bar.to(state.tensors[b_key].dtype)
                out[w_key] = state.tensors[w_key] + s * residual  # (d_out, d_in), float32
        done = list(state.extra["residual_clients"])
        synced = dict(state.extra["synced"]) | {str(u.client): len(done) for u in updates}
        return MethodState(out, {"residual_clients": done + [len(updates)], "synced": synced})
