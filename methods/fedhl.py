"""FedHL (Peng, Zeng, Li, Li, Chen & Wang, "FedHL: Federated Learning for Heterogeneous
Low-Rank Adaptation via Unbiased Aggregation", arXiv 2505.18494): rank-heterogeneous LoRA
aggregated on a full-rank global model (shared plumbing: methods/flora.py, rank_hetero.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedbench.config import cfg_field
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, client_weight
from fedbench.methods.aggregation_hetero import full_rank_merge
from fedbench.methods.base import MethodState, Traffic, tensor_bytes
from fedbench.methods.flora import FreshLoRA
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankConfig, base_key

WEIGHTS_NOTE = "variant: the paper's optimal aggregation weights (abstract: they minimise the gradient-drift term " \
               "of its convergence bound) were not readable"


@dataclass(frozen=True)
class FedHLConfig(RankConfig):
    weights: Weighting = cfg_field("examples", "aggregation weights w_k: n_k / n ('examples', default) or 1 / K "
                                               f"('uniform'); {WEIGHTS_NOTE}")
    downlink: Literal["dense", "stacked"] = cfg_field(
        "dense", "the headline down count: 'dense' = last round's full-rank update dW (d_out x d_in per module), "
                 "'stacked' = last round's participants' factors (sum_j r_j (d_in + d_out)); both exact, the other "
                 "and the payload as sent are recorded as alternatives")


@METHODS.register("fedhl", "FedHL: fresh rank-r_k LoRA on the full-rank global model each round, merged densely "
                           "(W += sum_k w_k (alpha / r_k) B_k A_k, float32, no truncation); variant: aggregation "
                           "weights n_k / n, the paper's optimal weights not readable")
class FedHL(FreshLoRA):
    """FedHL (arXiv 2505.18494). Sources: the abstract (arXiv, researchtrend.ai,
    sciencestack.ai, aitopics.org); the method section, equations and code were not
    retrievable (searched 2026-12): a **variant** of the paper wherever it says so below.
    Spec: shared/docs/methods-2027.md Sec. 2 (its reading of the abstract).

    - Full-rank global model (paper, abstract: "the full-rank global model as a calibrated
      aggregation basis", so that no client starts from a global adapter truncated to its
      rank; the mechanics are the spec's reading, a variant): the server keeps the dense
      W^t = W0 + sum_{tau < t} dW^tau of every LoRA module in float32 (a bf16 merge loses
      small updates). Client k starts each round from W^t with a fresh rank-r_k LoRA (B = 0,
      A seeded per client and round: its first forward is the global model's), r_k = its
      tier's rank, trains it and the head, and uploads (A_k, B_k).
    - Aggregation: dW^t = sum_k w_k s_k B_k A_k with s_k = alpha / r_k (the client's own peft
      scaling), W^{t+1} = W^t + dW^t, exact, no SVD
      (:func:`~fedbench.methods.aggregation_hetero.full_rank_merge`); the head by example
      weights. Weights (variant): the paper derives optimal, per-round weights from its
      convergence bound (abstract); their formula was not readable, so ``weights`` is
      n_k / n (default) or uniform, recorded in ``run.method_layout``. With n_k / n the
      update is FLoRA's merge (Wang et al. 2024), computed densely in float32: what the
      paper adds beyond it, its weights, is exactly what is missing here.
    - Traffic: up = A_k, B_k, r_k (d_in + d_out) per module (36,864 r_k on BERT-base q/v) +
      the head. Down (two exact counts; ``downlink`` picks the headline, the other and the
      payload as sent are alternatives): 'dense' = last round's dW, d_out d_in per module
      (14,155,776 on BERT-base q/v; from it a client holding W^{t-1} rebuilds W^t, and one
      dense delta also catches up a client that missed rounds); 'stacked' = the factors of
      last round's participants, sum_j r_j (d_in + d_out) per module; nothing in round 1
      (every client holds W0); + the head. The fresh LoRA is drawn on the client (seeded).
    """

    config_cls = FedHLConfig
    DENSE_LABEL = "dense dW of the last round (d_out x d_in per module) + head"
    STACKED_LABEL = "stacked factors of the last round's participants (sum_j r_j (d_in + d_out) per module) + head"

    def init_state(self, tensors):
        return MethodState(dict(tensors) | {k: v.float() for k, v in self.read_base(tensors).items()}, {})

    def layout(self):
        return {"fedhl_weights": f"{self.config.weights} ({WEIGHTS_NOTE})"}

    def traffic(self, plan, payload, upload):
        r_stack = int(plan.extra.get("stack_rank", 0))  # 0: nothing aggregated yet
        head = tensor_bytes({k: payload[k] for k in self.ctx.head_keys if k in payload})
        dense = stacked = head
        for m in self.modules:
            w = payload[base_key(m)]  # (d_out, d_in)
            dense += (w.numel() if r_stack else 0) * w.element_size()
            stacked += r_stack * (w.shape[0] + w.shape[1]) * w.element_size()
        counts = {self.DENSE_LABEL: dense, self.STACKED_LABEL: stacked}
        headline = self.DENSE_LABEL if self.config.downlink == "dense" else self.STACKED_LABEL
        variants = {k: v for k, v in counts.items() if k != headline} | {self.MERGED_LABEL: tensor_bytes(payload)}
        return Traffic(counts[headline], tensor_bytes(upload), variants)

    def aggregation_weights(self, updates) -> list[float]:
        """w_k, summing to 1 (the pluggable weight rule: ``weights``)."""
        raw = [client_weight(u, self.config.weights) for u in updates]
        return [w / sum(raw) for w in raw]

    def merge(self, state, updates, out):
        coefs = [w * self.client_scaling(u.plan.rank) for w, u in zip(self.aggregation_weights(updates), updates)]
        with self.metered():
            for m in self.modules:
                parts = [(u.tensors[m + A_SFX], u.tensors[m + B_SFX]) for u in updates]
                out[base_key(m)] = full_rank_merge(state.tensors[base_key(m)], parts, coefs)  # (d_out, d_in)
        return MethodState(out, {**state.extra, "stack_rank": int(sum(u.plan.rank for u in updates))})
