"""LoRA-A2 (Koo, Jang & Ok, ACL 2025): alternating freeze + adaptive rank selection under a
per-client upload budget (shared plumbing: methods/alternating.py; rules:
methods/factor_rules.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.alternating import RANKS, UPLOAD_RANK, MaskedAlternating
from fedbench.methods.base import LORA_FACTORS
from fedbench.methods.factor_rules import rank_scores, select_top_ranks
from fedbench.methods.rolora import RoLoRAHetConfig


@dataclass(frozen=True)
class LoRAA2Config(RoLoRAHetConfig):
    lr_ratio: float = cfg_field(
        16.0, "lr_B / lr_A (the paper trains B and A at different rates, after LoRA+; its ratio was not readable "
              "here: LoRA+'s 16, the spec's default): B trains at the run's lr, A at lr / lr_ratio (the head at the "
              "run's lr in every round)")
    score_batches: int = cfg_field(
        4, "local batches whose summed gradient scores the ranks before training (the spec's reconstruction)")
    aggregation: Literal["zero_fill", "contrib"] = cfg_field(
        "zero_fill", "'zero_fill': each rank F + sum_k p_k M_k (F_k - F) over every client of the round (the "
                     "weighted mean of the clients' factors); 'contrib': each rank averaged over the clients that "
                     "selected it (the paper's rule was not readable: both are the spec's)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "lr_ratio", self.lr_ratio > 0, "must be a number > 0")
        check(self, "score_batches", self.score_batches >= 1, "must be an integer >= 1")


@METHODS.register("lora_a2", "LoRA-A2: alternating freeze (B, then A, ...) + adaptive rank selection: client k "
                             "scores the R ranks of every module on its data and trains and uploads only the top "
                             "r_k M of the round's factor (r_k: its tier's rank, its upload budget) (variant: rank "
                             "score ||B_i|| ||G_A,i||, zero-filled n_k/n averaging and lr_B/lr_A = 16, the paper's "
                             "Eq. 2, aggregation weights and ratio not readable here)")
class LoRAA2(MaskedAlternating):
    """LoRA-A2 (Koo, Jang & Ok, "Towards Robust and Efficient Federated Low-Rank Adaptation
    with Heterogeneous Clients", ACL 2025, pp. 416-429; arXiv 2410.22815). Read: the arXiv
    v1/v2 HTML method paragraphs (equation bodies stripped) and the authors' project page
    (github.com/pseudope/LoRA-A2, index.html: the alternation equations and the main
    table); code "to be released", none found. Spec: shared/docs/methods-2027.md Sec. 3.

    - **Paper (Sec. "Alternating Freeze", Eq. 1; project page):** A is frozen in even
      rounds and B in odd ones, rounds counted from 0, and B trains first because LoRA
      inits B = 0 (round 1 here = round 0 there; asserted). With the other factor frozen
      and shared, sum_k w_k B_k A = sum_k w_k dW_k: exact.
    - **Paper (different learning rates for B and A, after LoRA+); variant (the ratio):**
      ``lr_ratio`` = lr_B / lr_A = 16 (LoRA+'s; the paper's was not readable): B trains at
      the run's lr, A at lr / 16 (``LocalPhase.lr_scales``); the head at the run's lr.
    - **Paper (Sec. "Adaptive Rank Selection", Eqs. 2-3; Secs. 4.2-4.3 of the ACL version):**
      the global adapter has rank R = ``lora_r`` (r_G); client k has an upload budget of r_k
      ranks per module (its tier's rank, ``ClientProfile.rank``: the upload budget is a
      tier attribute, ``Method.upload_budget`` holds the client to it); it scores every
      (module, rank) on its local data, selects the r_k M best over the **whole model**
      (M = adapted modules; a module may get several ranks or none:
      :func:`~fedbench.methods.factor_rules.select_top_ranks`), and a mask (Eq. 3) keeps
      the update to those ranks: chosen on the client (``Method.client_select``), only they
      train (``LocalPhase.trained_slices``) and only they are sent (+ the selection, one byte
      per rank and module).
    - **Variant (the score, Eq. 2):** the paper measures "how much each rank contributes to
      the change in dW" and beat magnitude and SNIP scores with it; the equation body was
      not readable. Here (the spec's reconstruction,
      :func:`~fedbench.methods.factor_rules.rank_scores`): A-round
      ||B[:, i]|| ||G_A[i, :]||, B-round ||G_B[:, i]|| ||A[i, :]||, G the trained factor's
      gradient averaged over ``score_batches`` local batches before training, dropout off
      (``ClientAPI.gradients``; its FLOPs are counted in the client's total).
    - **Variant (the server):** the trained factor is averaged rank by rank with
      :func:`~fedbench.methods.factor_rules.masked_factor_mean`: ``zero_fill`` (default,
      p_k = n_k / n over the round's clients) or ``contrib`` (over the selectors); the head
      is averaged with p_k.
    - Traffic: up r_k (d_in or d_out) scalars per module on average + the selection + head (BERT-base
      q/v: 18,432 r_k); down (methods/alternating.py) the factor changed last round, 18,432 R
      (both for a client that missed a round). Memory and FLOPs equal across tiers (every
      client holds rank R); only the uplink differs.
    """

    config_cls = LoRAA2Config

    def local_phases(self, plan):
        """B-rounds at the run's lr; A-rounds: A at lr / ``lr_ratio``, the head at the run's."""
        (phase,) = super().local_phases(plan)
        own = () if plan.factor == "B" else tuple((k, 1.0 / self.config.lr_ratio) for k in self.factor_keys("A"))
        return (dataclasses.replace(phase, lr_scales=own),)

    def client_select(self, plan, client):
        """On the client, before training: score every (module, rank) of the round's factor
        from its gradient averaged over ``score_batches`` local batches (the global factors
        loaded; its FLOPs are the client's) and keep the top r_k M over the model."""
        factor = plan.factor
        keys = self.factor_keys(factor)
        grads = client.gradients(keys, self.config.score_batches)
        values = client.values(self.factor_keys("A") + self.factor_keys("B"))
        scores = {m: rank_scores(factor, values[m + LORA_FACTORS["A"]], values[m + LORA_FACTORS["B"]], grads[k])
                  for m, k in zip(self.modules, keys)}
        ranks = select_top_ranks(scores, plan.extra[UPLOAD_RANK] * len(self.modules))
        return dataclasses.replace(plan, extra={**plan.extra, RANKS: ranks})

    @property
    def normalise(self) -> str:
        return "all" if self.config.aggregation == "zero_fill" else "selectors"
