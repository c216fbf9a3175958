"""FLoRA (Wang et al., NeurIPS 2024): stack the clients' LoRA, merge into the base weights,
fresh LoRA every round (shared plumbing: methods/rank_hetero.py)."""

from __future__ import annotations

import math

import torch

from fedbench.methods import METHODS
from fedbench.methods.base import MethodState, Traffic, tensor_bytes
from fedbench.methods.aggregation import stack_lora
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankMethod, base_key


@METHODS.register("flora", "FLoRA: stack the clients' LoRA along the rank axis, merge into the base, fresh LoRA each round (traffic: the stack; merged weights as alt)")
class FLoRA(RankMethod):
    """FLoRA (Wang et al., "FLoRA: Federated Fine-Tuning Large Language Models with
    Heterogeneous Low-Rank Adaptations", NeurIPS 2024).

    Aggregation per LoRA module: A_s = concat_i(p_i s_i A_i), B_s = concat_i(B_i), so
    B_s A_s = sum_i p_i (alpha / r_i) B_i A_i exactly (the client's own scaling s_i folded
    into its block of A_s; methods.md writes the merge as (alpha / r) B_s A_s, which is
    only right when all ranks are equal). The merged weights W_{t+1} = W_t + B_s A_s are
    the new base every client starts from with a fresh LoRA.

    Payload: W_t of every LoRA module (the merged weights), a fresh A (peft's init,
    uniform(+-1/sqrt(d_in)), seeded per client and round) with B = 0, and the head.

    Traffic, two counts (``traffic``): the headline
    ``cost.traffic_mb_per_client_round`` counts what the FLoRA and Fed-HeLLo papers count,
    the stacked adapter of the last aggregation, sum_i r_i (d_in + d_out) numbers per
    module (from which a client rebuilds W_t = W_{t-1} + B_s A_s itself; nothing in round
    1), + the head; the fresh A is not counted (a client draws it locally; we ship it only
    so the simulated client has no other source). ``cost.traffic_alt_mb_per_client_round``
    ["merged weights ..."] counts the literal payload: the dense W_t of every LoRA module
    + the fresh LoRA + the head.
    Known issue (methods.md): the authors' runs diverge over many rounds; nothing here
    corrects that.
    """
    family = "rank heterogeneity"

    def init_state(self, tensors):
        return MethodState(dict(tensors) | self.read_base(tensors), {})

    MERGED_LABEL = "merged weights (dense W_t of every LoRA module + fresh LoRA + head, as sent)"

    def plan(self, rnd, clients, state, rng):
        plans = super().plan(rnd, clients, state, rng)
        for p in plans.values():
            p.extra["init_seed"] = int(rng.integers(2**31 - 1))
            p.extra["stack_rank"] = int(state.extra.get("stack_rank", 0))  # sum_i r_i of the last merge
        return plans

    def traffic(self, plan, payload, upload):
        """Headline down: the stacked adapter (sum_i r_i (d_in + d_out) per module, the
        papers' count) + the head; variant: the payload as sent (merged weights)."""
        r_stack = int(plan.extra.get("stack_rank", 0))
        stack = 0
        for m in self.modules:
            w = payload[base_key(m)]  # (d_out, d_in)
            stack += r_stack * (w.shape[0] + w.shape[1]) * w.element_size()
        head = tensor_bytes({k: payload[k] for k in self.ctx.head_keys if k in payload})
        return Traffic(stack + head, tensor_bytes(upload), {self.MERGED_LABEL: tensor_bytes(payload)})

    def client_payload(self, state, plan):
        gen = torch.Generator().manual_seed(plan.extra["init_seed"])
        out = {}
        for m in self.modules:
            w = state.tensors[base_key(m)]  # (d_out, d_in)
            d_out, d_in = w.shape
            bound = 1.0 / math.sqrt(d_in)
            a = (torch.rand(plan.rank, d_in, generator=gen) * 2 - 1) * bound
            out[base_key(m)] = w
            out[m + A_SFX] = a.to(device=w.device, dtype=w.dtype)  # (r_i, d_in)
            out[m + B_SFX] = torch.zeros(d_out, plan.rank, dtype=w.dtype, device=w.device)  # (d_out, r_i)
        return out | self.head_tensors(state)

    def merge(self, state, updates, out):
        total = float(sum(u.n_examples for u in updates))
        coefs = [(u.n_examples / total) * self.client_scaling(u.plan.rank) for u in updates]
        with self.metered():
            for m in self.modules:
                a, b = stack_lora([(u.tensors[m + A_SFX], u.tensors[m + B_SFX]) for u in updates], coefs)
                w = state.tensors[base_key(m)]
                out[base_key(m)] = (w.float() + b @ a).to(w.dtype)  # (d_out, d_in)
        return MethodState(out, {**state.extra, "stack_rank": int(sum(u.plan.rank for u in updates))})
