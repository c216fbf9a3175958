"""Fed-pilot (Zhang, Hu, Liu & Xu, "Fed-pilot: Optimizing LoRA Allocation for Efficient
Federated Fine-Tuning with Heterogeneous Clients", arXiv 2410.10200; v1 "Fed-piLot"):
memory-budget LoRA module selection by a client-side knapsack, spatial-temporal aggregation."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.aggregation_hetero import dwa_gains, extrapolate
from fedbench.methods.base import ClientPlan, Method, MethodConfig, MethodState, Traffic, tensor_bytes
from fedbench.methods.memory_plan import MemoryCostModel, ig_values, select_under_budget
from fedbench.methods.rank_hetero import A_SFX, B_SFX, lora_modules, lora_product

SELECTED, BUDGET, COST, GLOBAL = "modules", "memory_budget_bytes", "memory_cost_model", "global_scores"
HISTORY = "updated_modules"  # state.extra: per recent round, the modules some client trained
INDEX_BYTES = SCORE_BYTES = 4  # a module index (int32) up, a global score (float32) down


@dataclass(frozen=True)
class FedPilotConfig(MethodConfig):
    lam: float = cfg_field(0.5, "IG-Score mix: value = lam * local + (1 - lam) * global, each normalised to sum 1 "
                                "(variant: the paper's Local-Global IG-Score was not readable; the spec's choice)")
    score_batches: int = cfg_field(1, "local batches the client's gradient score is computed on (variant)")
    dwa: bool = cfg_field(True, "Dynamic Weight Adjustment of under-updated modules (false: the noDWA ablation, g = 1)")
    window: int = cfg_field(10, "T: the recent rounds whose updates DWA counts (variant: the spec's choice)")
    gain_max: float = cfg_field(2.0, "upper clip of the DWA gain (variant: the spec's choice)")
    grid: int = cfg_field(4096, "capacity units of the knapsack's dynamic programme (weights rounded up: a choice "
                                "never exceeds the budget; exact for budgets <= grid bytes)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "lam", 0.0 <= self.lam <= 1.0, "must be in [0, 1]")
        check(self, "score_batches", self.score_batches >= 1, "must be an integer >= 1")
        check(self, "window", self.window >= 1, "must be an integer >= 1")
        check(self, "gain_max", self.gain_max >= 1.0, "must be a number >= 1")
        check(self, "grid", self.grid >= 1, "must be an integer >= 1")


@METHODS.register("fed_pilot", "Fed-pilot: each client picks the LoRA modules of most IG-Score that fit its memory "
                               "budget (knapsack over the measured memory cost model), modules averaged over their "
                               "trainers with a DWA gain for under-updated ones; variant: IG-Score, cost model and "
                               "DWA are the spec's reconstructions, the paper's equations were not readable")
class FedPilot(Method):
    """Fed-pilot (arXiv 2410.10200). Sources: the v2 abstract and Fig. 1 caption
    (https://arxiv.org/html/2410.10200v2), the v1 abstract (IG-Score, STAgg, DWA by name);
    the method section, equations and code were not retrievable (searched 2026-12: arXiv
    HTML, review mirrors, the authors' TNI-playground repositories): a **variant** of the
    paper wherever it says so below. Spec: shared/docs/methods-2027.md Sec. 1.

    A LoRA *module* is one adapted matrix (its A and B). Per round:

    - Server: every client gets the whole adapter and the head (its forward needs every
      module; paper, abstract: clients train a subset of the LoRA modules) and one global
      score per module (below).
    - Budget (variant: the paper's budgets were not read): a tier of layer budget n_k has the
      memory budget M_k = the accounted bytes of training the LoRA of the top n_k layers and
      the head (``ClientProfile.layers``; ``--roc`` 6:3:1 = 1/2, 3/4, all layers; with
      ``--devices`` the largest n_k whose step fits the device), measured by the run's memory
      accountant (``MethodContext.memory``).
    - Client (paper, abstract: a knapsack per client, item = module, weight = its memory
      cost, capacity = the client's memory): the memory cost model
      (:class:`~fedbench.methods.memory_plan.MemoryCostModel`, not additive: activations
      depend on the lowest trained layer) from L + 1 measured steps; the values are the
      IG-Score (variant, the spec's reconstruction): lam * local_m + (1 - lam) * global_m,
      local_m = ||dL/dA_m||^2 + ||dL/dB_m||^2 on ``score_batches`` local batches
      (``Method.client_select`` on the client's own data; the scoring FLOPs are the client's,
      its memory is not held to the budget), global_m = ||s (B'A' - BA)||_F of module m's
      last global update, each term normalised to sum 1 (uniform before any update). The
      exact solver (:func:`~fedbench.methods.memory_plan.select_under_budget`) tries every
      lowest layer. The client trains the chosen modules' A and B and the head (the others
      frozen at their global values) and uploads them with the modules' indices.
    - Server, STAgg (paper, v1 abstract: spatial-temporal aggregation with dynamic weight
      adjustment that compensates under-updated layers; the rule is the spec's
      reconstruction, a variant): spatial, each module's A and B averaged over the clients
      that trained it with example weights (a module nobody trained keeps its value; the
      head over every client); temporal, u_m = the rounds of the last ``window`` in which
      module m was updated, g_m = clip(mean_m u_m / u_m, 1, ``gain_max``) and
      W_m <- W_m + g_m (mean_m - W_m) (:func:`~fedbench.methods.aggregation_hetero.dwa_gains`;
      ``dwa=false``: g = 1, the spec's noDWA ablation).

    Traffic: down = the adapter and head (36,864 r on BERT-base q/v) + one float32 score per
    module; up = the chosen modules' A and B (1536 r |K_k| there) + the head + one int32
    index per chosen module.
    """
    family = "layer / depth subsets"

    config_cls = FedPilotConfig

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.modules = lora_modules(ctx.all_keys)
        layer = {k: j for j, keys in ctx.layer_keys.items() for k in keys}
        self.layer_of = [layer[m + A_SFX] for m in self.modules]
        self._cost: MemoryCostModel | None = None  # measured once (deterministic: rebuilt the same on resume)

    # -- the memory cost model --------------------------------------------------------
    def module_keys(self, chosen) -> list[str]:
        return [self.modules[i] + sfx for i in chosen for sfx in (A_SFX, B_SFX)]

    def cost_model(self, state: MethodState) -> MemoryCostModel:
        """From the accountant's steps of S_l = the modules of layers >= l (+ the head), l = 0..L."""
        if self._cost is None:
            if self.ctx.memory is None:
                raise UserError("fed_pilot plans with the run's memory accountant (MethodContext.memory), "
                                "which this runner does not provide")
            probe = ClientPlan(0, 0, ())
            L = self.ctx.n_layers
            steps = [self.ctx.memory.step_bytes(self, probe, self.module_keys(
                [i for i, j in enumerate(self.layer_of) if j >= low]) + list(self.ctx.head_keys))
                for low in range(L + 1)]
            module_bytes = [tensor_bytes([state.tensors[m + A_SFX], state.tensors[m + B_SFX]]) for m in self.modules]
            self._cost = MemoryCostModel.from_steps(steps, self.layer_of, module_bytes)
        return self._cost

    def with_modules(self, plan: ClientPlan, chosen, extra: dict) -> ClientPlan:
        chosen = sorted(int(i) for i in chosen)
        layers = tuple(sorted({self.layer_of[i] for i in chosen}))
        return dataclasses.replace(plan, train_layers=layers, extra={**extra, SELECTED: chosen})

    # -- hooks ------------------------------------------------------------------------
    def plan(self, rnd, clients, state, rng):
        """The budget and what the client chooses with; the plan's modules until it chooses
        are the top-layer set the budget was measured on."""
        cost = self.cost_model(state)
        scores = list(state.extra.get(GLOBAL, [0.0] * len(self.modules)))
        plans = {}
        for p in clients:
            top = cost.top(min(p.layers, self.ctx.n_layers))
            extra = {BUDGET: cost.cost(top), COST: cost, GLOBAL: scores}
            plans[p.client] = self.with_modules(ClientPlan(p.client, p.tier, ()), top, extra)
        return plans

    def client_select(self, plan, client):
        sq = client.grad_sq_norms(self.module_keys(range(len(self.modules))), self.config.score_batches)
        local = [sq[m + A_SFX] + sq[m + B_SFX] for m in self.modules]
        values = ig_values(local, plan.extra[GLOBAL], self.config.lam)
        chosen = select_under_budget(values, plan.extra[COST], plan.extra[BUDGET], self.config.grid)
        if chosen is None:
            raise RuntimeError(f"client {plan.client}: not even the head fits its memory budget "
                               f"({plan.extra[BUDGET]} bytes)")
        return self.with_modules(plan, chosen, plan.extra)

    def upload_keys(self, plan):
        return self.module_keys(plan.extra[SELECTED]) + (list(self.ctx.head_keys) if plan.train_head else [])

    def traffic(self, plan, payload, upload):
        """Down: the payload + one score per module; up: the upload + one index per module trained."""
        return Traffic(tensor_bytes(payload) + SCORE_BYTES * len(self.modules),
                       tensor_bytes(upload) + INDEX_BYTES * len(plan.extra[SELECTED]))

    def aggregate(self, state, updates):
        if not updates:
            return state
        out = weighted_mean_by_key(state.tensors, updates, "examples")  # spatial: each module over its trainers
        updated = sorted({i for u in updates for i in u.plan.extra[SELECTED]})
        history = (list(state.extra.get(HISTORY, [])) + [updated])[-self.config.window:]
        counts = [sum(i in set(h) for h in history) for i in range(len(self.modules))]
        gains = dwa_gains(counts, 1.0, self.config.gain_max) if self.config.dwa else [1.0] * len(self.modules)
        scores = list(state.extra.get(GLOBAL, [0.0] * len(self.modules)))
        s = float(self.config.lora_alpha) / self.config.lora_r
        server = self.ctx.server
        with server.metered() if server is not None else contextlib.nullcontext():
            for i in updated:
                a, b = self.modules[i] + A_SFX, self.modules[i] + B_SFX
                for k in (a, b):  # temporal: the gain on the move towards this round's mean
                    out[k] = extrapolate(state.tensors[k], out[k], gains[i])
                before = lora_product(state.tensors[a], state.tensors[b], s)  # (d_out, d_in)
                scores[i] = float((lora_product(out[a], out[b], s) - before).norm())
        return MethodState(out, {**state.extra, HISTORY: history, GLOBAL: scores})
