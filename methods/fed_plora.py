"""Fed-PLoRA (Zhang, Hu & Xu, ICLR 2026, arXiv 2602.16936): Select-N-Fold under
heterogeneous budgets (shared plumbing: methods/rank_hetero.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedbench.config import cfg_field
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, client_weight, slot_mean, weighted_mean_by_key
from fedbench.methods.base import ClientPlan, ClientUpdate, MethodState, Traffic, tensor_bytes
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankConfig, RankMethod, base_key

SLOTS = "slots"  # plan.extra key: the rank-1 modules K_i a client trains, ascending


@dataclass(frozen=True)
class FedPLoRAConfig(RankConfig):
    budget: Literal["rank", "layers"] = cfg_field(
        "rank", "what a client's budget limits: 'rank' = it trains r_i (its tier's rank) of the R rank-1 modules "
                "of every layer, drawn each round, the rest folded into its frozen weights (the paper's); "
                "'layers' = it trains all R modules of c_i (its tier's layer budget) layers drawn each round, "
                "the other layers frozen at their global LoRA (a benchmark variant)")
    weighting: Weighting = cfg_field(
        "examples", "mean of each module over the clients that trained it: example-weighted (FedIT's, default; "
                    "the paper's weights were not found) or uniform")


@METHODS.register("fed_plora", "Fed-PLoRA: each client trains r_i of the R rank-1 LoRA modules (drawn each round) "
                               "and folds the rest into its frozen weights; per-module averaging over trainers")
class FedPLoRA(RankMethod):
    """Fed-PLoRA (Zhang, Hu & Xu, "Fed-PLoRA: ...", ICLR 2026; spec: shared/docs/methods-2026.md
    Sec. 6; the paper's full text and code were not retrievable).

    The global LoRA of rank R = ``lora_r`` is R rank-1 modules (B[:, j], A[j, :]), scaling
    s = alpha / R for all of them (a rank-r_i client's peft adapter has alpha r_i / R).

    - Round t, client i with rank budget r_i (``budget='rank'``): draw K_i, |K_i| = r_i,
      uniformly each round (one set for every LoRA module of the model); **fold** the rest
      into the frozen weight, W_i = W0 + s sum_{j not in K_i} B_j A_j, and train
      A[K_i, :], B[:, K_i] from their global values: the client starts exactly at the
      global model. A full-rank client draws every module and folds nothing.
    - Server: per module j, A_j and B_j are averaged separately over Q_j = the clients that
      trained j (example weights by default, :func:`~fedbench.methods.aggregation.slot_mean`);
      Q_j empty keeps the old value. W0 never changes. With every r_i = R this is FedIT,
      bit for bit (tests/methods/test_fed_plora.py runs both).
    - ``budget='layers'`` (benchmark variant, unit = (layer, j)): client i trains all R
      modules of c_i layers drawn uniformly each round; the LoRA of its other layers is
      frozen at the global values, the same function as folding it (and what the fold
      would send: R(d_in + d_out) per module); per-(layer, module) averaging over trainers.
    - Traffic: down = all R modules (the client needs them to fold), R (d_in + d_out) per
      LoRA module, + the head; the payload the simulator ships (dense folded weights and the
      selected factors) is recorded as a variant. K_i is not counted (r_i small integers,
      derivable from the round's seed). Up = the selected modules, r_i (d_in + d_out).
    Budgets: the tiers' ranks are ``run.tier_ranks`` (default: the task's paper ranks, 1 / 4 / 16
    for classification), so under 6:3:1 a sampled client trains about 0.21 of the LoRA where a
    layer-budget method's (3 / 5 / 6 of 6 layers) trains 0.65; ``benchmarks/plora_budget.py``
    measures what that costs in quality and runs ``budget='layers'`` and matched ranks beside it.
    Assumptions (spec, not confirmed by the paper): init B = 0, A random (peft's); the
    averaging weights; one K_i per client rather than one per module.
    """
    family = "rank heterogeneity"

    config_cls = FedPLoRAConfig
    SENT_LABEL = "as sent (dense folded weights of every LoRA module + the selected factors + head)"

    def _check_ranks(self, profiles) -> None:
        if self.config.budget == "rank":  # with layer budgets every client trains the global rank
            super()._check_ranks(profiles)

    def client_alpha(self, rank: int) -> float:
        return float(self.config.lora_alpha) * rank / self.r_max

    def client_rank(self, profile, state):
        return profile.rank if self.config.budget == "rank" else self.r_max

    def init_state(self, tensors):
        return MethodState(dict(tensors) | self.read_base(tensors), {})

    def plan(self, rnd, clients, state, rng):
        plans = super().plan(rnd, clients, state, rng)
        by_client = {p.client: p for p in clients}
        for c, plan in plans.items():
            if self.config.budget == "rank":
                plan.extra[SLOTS] = sorted(int(j) for j in rng.choice(self.r_max, size=plan.rank, replace=False))
            else:
                n = min(by_client[c].layers, self.ctx.n_layers)
                layers = tuple(int(j) for j in rng.choice(self.ctx.n_layers, size=n, replace=False))
                plans[c] = ClientPlan(c, plan.tier, layers, rank=plan.rank, lora_alpha=plan.lora_alpha,
                                      extra={SLOTS: list(range(self.r_max))})
        return plans

    def folds(self, plan: ClientPlan) -> bool:
        return len(plan.extra[SLOTS]) < self.r_max

    def client_payload(self, state, plan):
        out = self.head_tensors(state)
        keep = plan.extra[SLOTS]
        fold = [j for j in range(self.r_max) if j not in set(keep)]
        s = self.client_scaling(self.r_max)
        for m in self.modules:
            a, b = state.tensors[m + A_SFX], state.tensors[m + B_SFX]  # (R, d_in), (d_out, R)
            out[m + A_SFX], out[m + B_SFX] = a[keep], b[:, keep]  # (r_i, d_in), (d_out, r_i)
            if fold:
                w0 = state.tensors[base_key(m)]
                out[base_key(m)] = (w0.float() + s * (b[:, fold].float() @ a[fold].float())).to(w0.dtype)
        return out

    def model_keys(self, plan):
        keys = super().model_keys(plan)
        return keys + ([base_key(m) for m in self.modules] if self.folds(plan) else [])

    def traffic(self, plan, payload, upload):
        """Down: the R modules of every LoRA module (the paper's count) + the head."""
        factors = sum(self.r_max * (payload[m + A_SFX].shape[1] + payload[m + B_SFX].shape[0])
                      * payload[m + A_SFX].element_size() for m in self.modules)
        head = tensor_bytes({k: payload[k] for k in self.ctx.head_keys})
        return Traffic(factors + head, tensor_bytes(upload), {self.SENT_LABEL: tensor_bytes(payload)})

    def aggregate(self, state, updates):
        if not updates:
            return state
        w = self.config.weighting
        if self.config.budget == "layers":  # full-rank uploads of some layers: per key over its trainers
            return MethodState(weighted_mean_by_key(state.tensors, updates, w), state.extra)
        heads = [ClientUpdate(u.client, {k: u.tensors[k] for k in self.ctx.head_keys}, u.n_examples, u.plan)
                 for u in updates]
        out = weighted_mean_by_key(state.tensors, heads, w)
        weights = [client_weight(u, w) for u in updates]
        slots = [u.plan.extra[SLOTS] for u in updates]
        for m in self.modules:
            for k, dim in ((m + A_SFX, 0), (m + B_SFX, 1)):
                out[k] = slot_mean(state.tensors[k], [u.tensors[k] for u in updates], slots, weights, dim)
        return MethodState(out, state.extra)

    def eval_tensors(self, state):
        """The global rank-R LoRA + head; W0 is the model's own."""
        return {k: v for k, v in state.tensors.items() if k not in set(self.base_weights_needed())}
