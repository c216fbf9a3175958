"""raFLoRA (arXiv 2602.13486) and HLoRA (arXiv 2503.00813): rank-heterogeneous LoRA by a
dense aggregate and SVD redistribution, with and without rank-partition weights (shared
plumbing: methods/rank_hetero.py)."""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.config import cfg_field
from fedbench.methods import METHODS
from fedbench.methods.aggregation import balanced_factors, rank_partition_update
from fedbench.methods.base import MethodState
from fedbench.methods.rank_hetero import A_SFX, B_SFX, RankConfig, RankMethod


@dataclass(frozen=True)
class RaFLoRAConfig(RankConfig):
    partition_weights: bool = cfg_field(
        True, "normalise each rank partition (rho_{h-1}, rho_h] by the examples of the clients that cover it "
              "(raFLoRA); false = by all clients' examples (HLoRA's rank-agnostic weights)")


@METHODS.register("raflora", "raFLoRA: rank-partition-weighted dense aggregate, SVD, each client gets the top r_i "
                             "(no rank collapse)")
class RaFLoRA(RankMethod):
    """raFLoRA (arXiv 2602.13486; spec: shared/docs/methods-2026.md Sec. 7, from the abstract
    and a third-party reimplementation of Algorithm 1 / Eq. 8: the full text was not
    retrieved).

    Rank levels rho_1 < ... < rho_m are the tier ranks of the federation (every client's
    profile, not only this round's). Per LoRA module, with n_k example counts and C_h =
    {k : r_k >= rho_h}, N_h = sum_{C_h} n_k (:func:`~fedbench.methods.aggregation.rank_partition_update`):

        dW = sum_h sum_{k in C_h} (n_k / N_h) s B_k[:, rho_{h-1}:rho_h] A_k[rho_{h-1}:rho_h, :]

    then SVD dW = U S V^T, B_g = U sqrt(S) / sqrt(s), A_g = sqrt(S) V^T / sqrt(s) truncated to
    r_max (:func:`~fedbench.methods.aggregation.balanced_factors`; dW has rank <= rho_m <=
    r_max, so the global model W0 + s B_g A_g is dW exactly); client k gets B_g[:, :r_k],
    A_g[:r_k]. The head is averaged with example weights.

    Choices the sources leave open: the scaling is s = alpha / r_max for every client (a
    rank-r_k adapter has alpha r_k / r_max, as HETLoRA), so a rank component means the same
    on every client and the partition sums add like components; a partition no sampled
    client covers keeps the previous global's slice (N_h = 0: nothing to normalise).
    Traffic: r_k (d_in + d_out) per module each way + the head; the server pays a dense
    product per client and an SVD per module (metered).
    """
    family = "rank heterogeneity"

    config_cls = RaFLoRAConfig

    def client_alpha(self, rank: int) -> float:
        return float(self.config.lora_alpha) * rank / self.r_max

    def levels(self, updates) -> list[int]:
        """The rank levels: every tier rank of the federation (and this round's)."""
        return sorted({p.rank for p in self.ctx.profiles.values()} | {u.plan.rank for u in updates})

    def client_payload(self, state, plan):
        out = {}
        for m in self.modules:
            out[m + A_SFX] = state.tensors[m + A_SFX][: plan.rank]  # (r_k, d_in)
            out[m + B_SFX] = state.tensors[m + B_SFX][:, : plan.rank]  # (d_out, r_k)
        return out | self.head_tensors(state)

    def merge(self, state, updates, out):
        s = self.client_scaling(self.r_max)
        weights = [float(u.n_examples) for u in updates]
        levels = self.levels(updates)
        with self.metered():
            for m in self.modules:
                a_key, b_key = m + A_SFX, m + B_SFX
                parts = [(u.tensors[a_key], u.tensors[b_key]) for u in updates]
                delta = rank_partition_update(parts, weights, levels, s, self.config.partition_weights,
                                              fallback=(state.tensors[a_key], state.tensors[b_key]))
                a, b = balanced_factors(delta, self.r_max, s)
                out[a_key] = a.to(state.tensors[a_key].dtype)
                out[b_key] = b.to(state.tensors[b_key].dtype)
        return MethodState(out, state.extra)


@dataclass(frozen=True)
class HLoRAConfig(RaFLoRAConfig):
    partition_weights: bool = cfg_field(
        False, "HLoRA: false = every partition weighted by all clients' examples (rank-agnostic, the weighting "
               "raFLoRA says collapses the upper ranks); true = raFLoRA")


@METHODS.register("hlora", "HLoRA: rank-agnostic dense aggregate sum_k (n_k / n) B_k A_k, SVD, each client gets the "
                           "top r_i (raFLoRA's ablation)")
class HLoRA(RaFLoRA):
    """HLoRA (arXiv 2503.00813; spec Sec. 7, from the abstract, a summary and a third-party
    NVFlare reimplementation): the server forms W' = sum_k (n_k / n) s B_k A_k, takes its
    SVD and sends client k the top r_k components, FlexLoRA-style. Implemented as raFLoRA
    with partition weighting off (``partition_weights=False``): the upper partitions are
    covered only by the high-rank clients yet divided by every client's examples, so they
    shrink by N_h / N each round, the rank collapse raFLoRA describes. Same scaling and
    redistribution as raFLoRA (balanced factors); an uncovered partition adds nothing.
    """
    family = "rank heterogeneity"

    config_cls = HLoRAConfig
