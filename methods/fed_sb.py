"""Fed-SB (LoRA-SB; Singhal et al., 2025): train only the r x r matrix R between a fixed B
and A, initialised by a federated round of gradients."""

from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, sign_gradient_factors, weighted_mean_by_key
from fedbench.methods.base import (EXTRA_PREFIX, ClientPlan, LocalPhase, Method, MethodConfig, MethodState, Traffic,
                                   extra_module, tensor_bytes)
from fedbench.methods.rank_hetero import A_SFX, B_SFX, lora_modules

EXTRA = "fed_sb"  # the extra module holding every LoRA module's R (fedbench_extra.fed_sb.<i>)
GRAD_SFX = ".fed_sb_grad"  # upload of the init round: a module's summed dense gradient (d_out, d_in)
INIT, QUOTA, FACTORS = "init", "grad_examples", "send_factors"  # plan.extra keys


@dataclass(frozen=True)
class FedSBConfig(MethodConfig):
    lora_r: int = cfg_field(8, "r: B (d_out x r), R (r x r), A (r x d_in) (the authors: 64 for BERT on SNLI, 200 "
                               "for LLMs; at most the smaller side of a LoRA module trains fully)")
    lora_alpha: float = cfg_field(8.0, "LoRA alpha; the authors set alpha = r (scaling 1): change it with lora_r")
    grad_samples: int = cfg_field(
        64, "examples whose summed gradient initialises B, R, A (the authors: 550 on SNLI, 50-170 for LLMs), "
            "split over round 1's clients in proportion to their data (whole batches, at least this many)")
    init_step: float = cfg_field(
        1e-3, "eta_eff of the init's sign-gradient step G_hat = -eta_eff sign(G) (the authors: lr / total steps)")
    weighting: Weighting = cfg_field("uniform", "client weights of R's and the head's mean: uniform (the authors') "
                                                "or example counts")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "grad_samples", self.grad_samples >= 1, "must be an integer >= 1")
        check(self, "init_step", self.init_step > 0, "must be a number > 0")


class RMatrices(nn.ParameterList):
    """R of every LoRA module, in the order of the model's LoRA modules (identity until the
    init round sets R0; with B = 0 before it, R does not matter)."""

    def __init__(self, n: int, r: int):
        super().__init__([nn.Parameter(torch.eye(r)) for _ in range(n)])


@METHODS.register("fed_sb", "Fed-SB: B and A fixed from a federated sign-gradient init round, only the r x r R "
                            "between them trained and averaged (r^2 per module each way)")
class FedSB(Method):
    """Fed-SB (Singhal et al., "Fed-SB: A Silver Bullet for Extreme Communication Efficiency
    and Performance in (Private) Federated LoRA Fine-Tuning", 2025; LoRA-SB's adapter; spec:
    shared/docs/methods-2026.md Sec. 4).

    Adapter per LoRA module: dW = s B R A, B (d_out x r) and A (r x d_in) frozen, only R
    (r x r) trained (+ the head). peft holds B and A as the module's LoRA; R sits in an
    extra module and a forward pre-hook on peft's ``lora_B`` maps its input A x to R A x
    (peft has no B R A adapter).

    Round 1 is the init round, computed federatedly (the authors compute G on the pooled
    training set before the split: centralised data access, not copied): each sampled
    client sends G_k = sum of dW-gradients of its loss over its share of ``grad_samples``
    examples (dense d_out x d_in per module, counted as up traffic) and trains nothing;
    the server sums G = sum_k G_k and sets, per module
    (:func:`~fedbench.methods.aggregation.sign_gradient_factors`), G_hat = -eta sign(G),
    G_hat^T = U S V^T, A = U_r^T, B = V_r, R0 = diag(S_r) / s: the model starts one
    sign-gradient step from W0. The authors' code sets R0 = diag(S_r), without / s: the
    same at alpha = r (s = 1, their setting and our default), a step s times too large
    otherwise; dividing by s keeps the model one sign-gradient step from W0 at any alpha. Exact SVD instead of ``torch.svd_lowrank`` (whose global
    RNG reset is a pitfall of the authors' code). Rounds 2..T: clients train R (and the
    head) from the global R; server R_bar = mean R_k (uniform), head averaged; exact:
    mean(B R_k A) = B R_bar A. Budgets are ignored (every client, every layer, rank r).

    Traffic: round 1 down = the head (B = 0: the LoRA is known), up = the dense
    gradients. Later: R (r^2 per module) + head each way, plus B and A (r (d_in + d_out)
    per module) the first time a client is sent them; the payload the simulator ships
    (B and A every round) is recorded as a variant. Classification only: the R hook is
    installed on the model at training and at ``eval_logits``, which generation tasks do
    not call.
    """
    family = "LoRA aggregation (2024-2026)"

    config_cls = FedSBConfig
    task_kinds: ClassVar[tuple[str, ...]] = ("classification",)
    SENT_LABEL = "as sent (B and A every round)"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.modules = lora_modules(ctx.all_keys)
        self.r_keys = [f"{EXTRA_PREFIX}.{EXTRA}.{i}" for i in range(len(self.modules))]
        self.scaling = config.lora_alpha / config.lora_r
        self._hooked: weakref.WeakSet = weakref.WeakSet()

    @classmethod
    def extra_modules(cls, config, ctx, head):
        n = len(lora_modules([k for j in range(ctx.n_layers) for k in ctx.layer_keys[j]]))
        return {EXTRA: RMatrices(n, config.lora_r)}

    # -- the B R A forward ------------------------------------------------------------
    def install(self, model: nn.Module) -> None:
        """Put R between A and B in every LoRA module of ``model`` (once per model)."""
        if model in self._hooked:
            return
        rs = extra_module(model, EXTRA)
        for i, m in enumerate(self.modules):
            layer = model.get_submodule(m)
            for lora_b in layer.lora_B.values():
                lora_b.register_forward_pre_hook(lambda _mod, args, r=rs[i]: (args[0] @ r.T,) + args[1:])
        self._hooked.add(model)

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        self.install(model)
        return super().client_loss(task, model, batch, plan, hidden, phase)

    def eval_logits(self, task, model, batch, hidden):
        self.install(model)
        return None  # the task's own forward, now through B R A

    # -- rounds -------------------------------------------------------------------------
    def plan(self, rnd, clients, state, rng):
        layers = tuple(range(self.ctx.n_layers))
        init = not state.extra.get("initialised", False)
        total = sum(p.n_examples for p in clients)
        have = set(state.extra.get("have_factors", []))
        plans = {}
        for p in clients:
            extra = {INIT: init, FACTORS: not init and p.client not in have}
            if init:
                extra[QUOTA] = max(1, math.ceil(self.config.grad_samples * p.n_examples / max(total, 1)))
            plans[p.client] = ClientPlan(p.client, p.tier, layers, extra=extra)
        return plans

    def model_keys(self, plan):
        return super().model_keys(plan) + self.r_keys

    def client_payload(self, state, plan):
        return {k: state.tensors[k] for k in self.model_keys(plan)}

    def upload_keys(self, plan):
        return [] if plan.extra[INIT] else self.r_keys + list(self.ctx.head_keys)

    def local_phases(self, plan):
        return () if plan.extra[INIT] else (LocalPhase("train", tuple(self.upload_keys(plan))),)

    def client_statistics(self, task, model, batches, plan):
        """Init round: per LoRA module, the dW-gradient of the loss summed over the client's
        first ``grad_examples`` examples (whole batches); nothing otherwise."""
        if not plan.extra[INIT]:
            return {}
        self.install(model)
        weights = [model.get_submodule(m).base_layer.weight for m in self.modules]
        for w in weights:
            w.requires_grad_(True)
            w.grad = None
        seen = 0
        with torch.enable_grad():
            for batch in batches():
                loss, _ = task.loss(model, batch)
                n = int(batch["y"].shape[0])
                (loss * n).backward()  # the mean loss times n: the sum over the batch
                seen += n
                if seen >= plan.extra[QUOTA]:
                    break
        grads = {m + GRAD_SFX: w.grad.detach().float().clone() for m, w in zip(self.modules, weights)}
        for w in weights:
            w.grad = None
            w.requires_grad_(False)
        return grads

    def traffic(self, plan, payload, upload):
        lora = [m + sfx for m in self.modules for sfx in (A_SFX, B_SFX)]
        head = tensor_bytes({k: payload[k] for k in self.ctx.head_keys})
        if plan.extra[INIT]:
            down = head
        else:
            down = head + tensor_bytes({k: payload[k] for k in self.r_keys})
            down += tensor_bytes({k: payload[k] for k in lora}) if plan.extra[FACTORS] else 0
        return Traffic(down, tensor_bytes(upload), {self.SENT_LABEL: tensor_bytes(payload)})

    def aggregate(self, state, updates):
        if not updates:
            return state
        if not state.extra.get("initialised", False):
            return self.initialise(state, updates)
        out = weighted_mean_by_key(state.tensors, updates, self.config.weighting)
        have = sorted(set(state.extra["have_factors"]) | {u.client for u in updates})
        return MethodState(out, {**state.extra, "have_factors": have})

    def initialise(self, state: MethodState, updates) -> MethodState:
        """B, R0, A of every module from the clients' summed gradients G = sum_k G_k."""
        out = dict(state.tensors)
        server = self.ctx.server
        with server.metered() if server is not None else contextlib.nullcontext():
            for m, r_key in zip(self.modules, self.r_keys):
                grad = sum(u.tensors[m + GRAD_SFX] for u in updates)  # (d_out, d_in)
                a, b, r0 = sign_gradient_factors(grad, self.config.lora_r, self.config.init_step, self.scaling)
                out[m + A_SFX] = a.to(state.tensors[m + A_SFX].dtype)
                out[m + B_SFX] = b.to(state.tensors[m + B_SFX].dtype)
                out[r_key] = r0.to(state.tensors[r_key].dtype)
        return MethodState(out, {**state.extra, "initialised": True, "have_factors": []})

