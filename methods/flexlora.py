"""FlexLoRA (Bai et al., NeurIPS 2024): average the full-size updates, SVD, redistribute
each client its top-r_i factors (shared plumbing: methods/rank_hetero.py)."""

from __future__ import annotations


import torch

from fedbench.methods import METHODS
from fedbench.methods.base import MethodState
from fedbench.methods.aggregation import pad_rank, top_factors
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankMethod, base_key, lora_product


DELTA_SFX = ".flexlora_delta"  # state key of a module's dense global update (d_out, d_in)


@METHODS.register("flexlora", "FlexLoRA: average the clients' full-size B_i A_i, SVD, send each client its top r_i")
class FlexLoRA(RankMethod):
    """FlexLoRA (Bai et al., "Federated Fine-tuning of Large Language Models under
    Heterogeneous Tasks and Client Resources", NeurIPS 2024).

    Server, per LoRA module: dW = sum_i p_i s_i B_i A_i with p_i example weights and
    s_i = alpha / r_i (the client's own peft scaling); SVD dW = U S V^T; client i gets
    A = V_{r_i}^T, B = U_{r_i} S_{r_i} / s_i, so its model starts from the best rank-r_i
    approximation of dW. The state keeps the top-r_max factors (payloads are slices of
    them) and dW itself: the global model evaluated is W0 + dW exactly (merged into the
    base weights for the evaluation). Round 1 sends the initial LoRA (A0[:r_i], B = 0).
    Traffic: what is sent, the rank-r_i factors each way (the paper's tables count
    full-size matrices; the Fed-HeLLo paper's 57 MB/round for FlexLoRA does the same).
    """
    family = "rank heterogeneity"

    def init_state(self, tensors):
        st = dict(tensors) | self.read_base(tensors)
        for m in self.modules:
            w = st[base_key(m)]
            st[m + DELTA_SFX] = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        return MethodState(st, {"aggregated": False})

    def client_payload(self, state, plan):
        # state LoRA = top-r_max factors at the global scaling alpha / r_max
        rescale = self.client_scaling(self.r_max) / self.client_scaling(plan.rank)
        out = {}
        for m in self.modules:
            out[m + A_SFX] = state.tensors[m + A_SFX][: plan.rank]  # (r_i, d_in)
            out[m + B_SFX] = state.tensors[m + B_SFX][:, : plan.rank] * rescale  # (d_out, r_i)
        return out | self.head_tensors(state)

    def merge(self, state, updates, out):
        total = float(sum(u.n_examples for u in updates))
        s_max = self.client_scaling(self.r_max)
        with self.metered():
            for m in self.modules:
                delta = sum((u.n_examples / total) * lora_product(
                    u.tensors[m + A_SFX], u.tensors[m + B_SFX], self.client_scaling(u.plan.rank)) for u in updates)
                a, b = top_factors(delta, self.r_max, s_max)
                a, b = pad_rank(a, b, self.r_max)  # a module smaller than r_max
                out[m + DELTA_SFX] = delta
                out[m + A_SFX] = a.to(state.tensors[m + A_SFX].dtype)
                out[m + B_SFX] = b.to(state.tensors[m + B_SFX].dtype)
        return MethodState(out, {**state.extra, "aggregated": True})

    def eval_tensors(self, state):
        """W0 + dW in the base weights, the default adapter's B zero, the head."""
        out = self.head_tensors(state)
        for m in self.modules:
            w0 = state.tensors[base_key(m)]
            out[base_key(m)] = (w0.float() + state.tensors[m + DELTA_SFX]).to(w0.dtype)
            out[m + A_SFX] = state.tensors[m + A_SFX]
            out[m + B_SFX] = torch.zeros_like(state.tensors[m + B_SFX])
        return out
