"""Fed-HeLLo: heterogeneous LoRA allocation (Zhang et al., "Fed-HeLLo: Efficient Federated
Foundation Model Fine-Tuning with Heterogeneous LoRA Allocation", papers/fed_hello.txt).

Every client runs the full-depth model and trains the LoRA of c_i of the L layers (+ the
head); the other LoRA layers are really frozen (``requires_grad=False``). Which layers is
decided each round by a heterogeneous LoRA allocation (HLA) strategy:

- GD-HLA (Eq. 6), fixed masks: Triangle = first c_i layers, Inverted triangle = last c_i,
  Bottleneck = first floor(c_i/2) and last ceil(c_i/2) (the paper writes [c_i/2] twice; we
  make the halves sum to c_i as docs/methods.md says; the authors' 9-of-12 runs put the odd
  layer at the front instead), Uniform = c_i layers drawn uniformly every round.
- RGD-HLA (Eq. 7): prior g_j = (clients whose GD mask has j) / (ones in all masks), from the
  masks of *all* clients; every round each client draws c_i layers without replacement with
  probabilities g (successive sampling, so inclusion rates are not exactly c_i g_j).
- FIM-HLA (Eq. 4, 5): on the server's proxy set, score layer j by the mean over examples of
  ||grad_{theta_j} loss||^2; cluster the L scores into k = #budget levels groups (exact 1-D
  k-means), ordered by score; the highest group gets a_1, the next a_2, ... with
  a_h = #{h': c_h' >= c_h} / sum_h' c_h' r_h' (Eq. 5 as printed: the numerator counts
  levels, unweighted); normalise over layers; each client draws c_i without replacement.
- Co-design (``fed_hello``): RGD for rounds 1..T_RGD, then FIM-HLA; the FIM probabilities
  are recomputed at round T_RGD + 1 and every T_FIM rounds after, clients sample from the
  current ones every round (Sec. III-B.3). ``fed_hello_fim`` = T_RGD 0, T_FIM 1.

Aggregation (Eq. 3): per LoRA layer, the *uniform* mean over the clients that trained it of
their update, added to the global (= the mean of their uploaded weights, since all start
from the global); layers nobody trained keep their value. The head is trained by every
client and averaged the same way. ``weighting='examples'`` weights by example counts.

What the savings are: frozen LoRA layers need no weight gradients or optimizer state, and
the layers *below the lowest trained layer* need no backward at all; layers above it still
need a backward pass (to reach the trained ones), and the forward is always full depth.

Deviations from the authors' code (docs/methods.md): real freezing instead of lr 0; the FIM
uses every proxy example and differentiates the task loss (not the raw true-class logit of
one example); k-means groups are ordered by score; the head is aggregated; layer membership
comes from the task's layer map, not substring matches; after T_RGD the allocation is drawn
from the FIM probabilities every round (the code falls back to the RGD prior between FIM
rounds). The FIM pass runs with dropout off (eval mode): the paper does not say.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, weighted_mean_by_key
from fedbench.methods.base import ClientPlan, ClientProfile, Method, MethodConfig, MethodState
from fedbench.methods.paper_defaults import paper_defaults

log = logging.getLogger(__name__)

Pattern = Literal["bottleneck", "triangle", "inverted", "uniform"]


# ----------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class FedHelloBaseConfig(MethodConfig):
    lora_r: int | None = cfg_field(None, "LoRA rank; None = the paper's: 16 (classification), 8 (LMs)")
    lora_alpha: float = cfg_field(16.0, "LoRA alpha (paper: 16)")
    lora_dropout: float = cfg_field(0.1, "dropout on the LoRA input (paper: 0.1)")
    lora_targets: str = cfg_field("qv", "LoRA targets: the paper puts LoRA on query and value")
    weighting: Weighting = cfg_field(
        "uniform", "per-layer mean over the clients that trained it: 'uniform' (Eq. 3) or example-weighted"
    )
    train_head: bool = cfg_field(True, "clients train the head, averaged (default); false = it stays at its init, as "
                                       "in the authors' code (the opt-in of FlexLoRA / FLoRA, for comparison)")


@dataclass(frozen=True)
class FedHelloRGDConfig(FedHelloBaseConfig):
    pattern: Pattern = cfg_field("bottleneck", "GD pattern whose masks give the RGD prior (Eq. 7)")


@dataclass(frozen=True)
class FedHelloFIMConfig(FedHelloBaseConfig):
    t_fim: int = cfg_field(1, "recompute FIM scores every T_FIM rounds (FIM-HLA alone: 1)")
    proxy_size: int | None = cfg_field(
        None, "proxy examples for the FIM scores, drawn from the test examples every run holds out for the "
              "server (run.server_holdout: the paper's per-task sizes); None = all of them")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "t_fim", self.t_fim is None or self.t_fim >= 1, "must be an integer >= 1")
        check(self, "proxy_size", self.proxy_size is None or self.proxy_size >= 1,
              "must be an integer >= 1 (FIM-HLA needs a proxy set) or none (all held-out examples)")


@dataclass(frozen=True)
class FedHelloConfig(FedHelloFIMConfig):
    pattern: Pattern = cfg_field("bottleneck", "GD pattern whose masks give the RGD prior of the warm start")
    t_rgd: int | None = cfg_field(
        None, "RGD-HLA for the first T_RGD rounds; None = paper: 50 (classification), 1 (LMs)")
    t_fim: int | None = cfg_field(
        None, "then FIM-HLA, rescored every T_FIM rounds; None = paper: 50 (classification), 2 (LMs)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "t_rgd", self.t_rgd is None or self.t_rgd >= 0, "must be an integer >= 0 (or none: the paper's)")


# ---------------------------------------------------------------------- allocation math
def gd_layers(pattern: str, c: int, n_layers: int, rng: np.random.Generator | None = None) -> tuple[int, ...]:
    """The layers of a GD-HLA mask with budget c (Eq. 6); 'uniform' draws c layers with ``rng``."""
    L, c = n_layers, min(c, n_layers)
    if pattern == "triangle":
        return tuple(range(c))
    if pattern == "inverted":
        return tuple(range(L - c, L))
    if pattern == "bottleneck":
        front, back = c // 2, c - c // 2  # floor(c/2) shallow + ceil(c/2) deep = c
        return tuple(range(front)) + tuple(range(L - back, L))
    if pattern == "uniform":
        if rng is None:
            raise ValueError("the uniform pattern draws layers: pass an rng")
        return tuple(sorted(int(j) for j in rng.choice(L, size=c, replace=False)))
    raise ValueError(f"unknown GD pattern {pattern!r}")


def rgd_priors(pattern: str, budgets: Sequence[int], n_layers: int) -> np.ndarray:
    """Eq. 7: g_j = sum_i m_ij / sum_ij m_ij over the GD masks of all clients; (L,).

    The random Uniform mask enters through its expectation c_i / L per layer (so g = 1/L).
    """
    counts = np.zeros(n_layers)  # (L,)
    for c in budgets:
        c = min(c, n_layers)
        if pattern == "uniform":
            counts += c / n_layers
        else:
            counts[list(gd_layers(pattern, c, n_layers))] += 1
    return counts / counts.sum()


def sample_layers(probs: np.ndarray, c: int, rng: np.random.Generator) -> tuple[int, ...]:
    """c distinct layers drawn one by one without replacement with probabilities ``probs``.

    If fewer than c layers have positive probability, they are all taken and the rest is
    drawn uniformly from the zero-probability layers (the limit of tiny probabilities).
    """
    L = len(probs)
    c = min(c, L)
    pos = np.flatnonzero(probs > 0)
    if len(pos) >= c:
        chosen = rng.choice(L, size=c, replace=False, p=probs / probs.sum())
    else:
        zero = np.flatnonzero(probs <= 0)
        chosen = np.concatenate([pos, rng.choice(zero, size=c - len(pos), replace=False)])
    return tuple(sorted(int(j) for j in chosen))


def kmeans_1d(values: Sequence[float], k: int) -> np.ndarray:
    """Exact 1-D k-means (optimal contiguous split of the sorted values, dynamic programming).

    Returns a group label per value, **0 = the group with the highest values**, 1 = next, ...
    Equal values always share a group, so there are min(k, #distinct values) groups.
    """
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(-v, kind="stable")  # descending
    s = v[order]
    n = len(s)
    k = max(1, min(k, len(np.unique(s))))
    c1 = np.concatenate([[0.0], np.cumsum(s)])
    c2 = np.concatenate([[0.0], np.cumsum(s * s)])

    def sse(i: int, j: int) -> float:  # within-group sum of squares of s[i:j]
        m = j - i
        return c2[j] - c2[i] - (c1[j] - c1[i]) ** 2 / m

    cut_ok = [i == 0 or s[i - 1] != s[i] for i in range(n)]  # never split equal values
    inf = float("inf")
    cost = np.full((k + 1, n + 1), inf)
    back = np.zeros((k + 1, n + 1), dtype=np.int64)
    cost[0, 0] = 0.0
    for g in range(1, k + 1):
        for j in range(1, n + 1):
            if j < n and not cut_ok[j]:
                continue
            for i in range(g - 1, j):
                if cost[g - 1, i] < inf and cut_ok[i]:
                    val = cost[g - 1, i] + sse(i, j)
                    if val < cost[g, j]:
                        cost[g, j], back[g, j] = val, i
    labels_sorted = np.zeros(n, dtype=np.int64)
    j = n
    for g in range(k, 0, -1):
        i = back[g, j]
        labels_sorted[i:j] = g - 1
        j = i
    labels = np.empty(n, dtype=np.int64)
    labels[order] = labels_sorted
    return labels


def budget_levels(profiles: Sequence[ClientProfile], n_layers: int) -> tuple[list[int], list[float]]:
    """The distinct budgets c_1 < ... < c_k of the federation and the fraction r_h of clients at each."""
    budgets = [min(p.layers, n_layers) for p in profiles]
    levels = sorted(set(budgets))
    return levels, [budgets.count(c) / len(budgets) for c in levels]


def eq5_base_probs(levels: Sequence[int], ratios: Sequence[float]) -> np.ndarray:
    """Eq. 5: a_h = sum_h' 1(c_h' >= c_h) / sum_h' c_h' r_h' for levels c_h ascending; (k,)."""
    c, r = np.asarray(levels, dtype=np.float64), np.asarray(ratios, dtype=np.float64)
    return np.array([(c >= ch).sum() for ch in c]) / float((c * r).sum())


def fim_layer_probs(scores: Sequence[float], levels: Sequence[int],
                    ratios: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """FIM-HLA: (per-layer allocation probabilities (L,), score group per layer (L,)).

    Group 0 (highest scores) gets a_1 (the largest), group 1 gets a_2, ...; normalised.
    """
    groups = kmeans_1d(scores, len(levels))
    a = eq5_base_probs(levels, ratios)  # (k,), decreasing
    p = a[groups]
    return p / p.sum(), groups


def hla_schedule(rnd: int, t_rgd: int, t_fim: int) -> tuple[str, bool]:
    """Co-design (Sec. III-B.3) for 1-based round ``rnd``: ('rgd' | 'fim', rescore FIM now?)."""
    if rnd <= t_rgd:
        return "rgd", False
    return "fim", (rnd - t_rgd - 1) % t_fim == 0


# ------------------------------------------------------------------------------ methods
class FedHelloBase(Method):
    """Shared by the family: full-depth plans from per-client layer choices + Eq. 3."""

    config_cls = FedHelloBaseConfig

    def __init__(self, config, ctx):
        super().__init__(type(self).resolve_config(config, ctx.task_kind), ctx)

    @classmethod
    def resolve_config(cls, config, task_kind):
        if config.lora_r is None:
            config = dataclasses.replace(config, lora_r=paper_defaults(task_kind).lora_r)
        return config

    def budget(self, p: ClientProfile) -> int:
        return min(p.layers, self.ctx.n_layers)

    def choose_layers(self, rnd: int, clients: Sequence[ClientProfile], state: MethodState,
                      rng: np.random.Generator) -> dict[int, tuple[int, ...]]:
        """Client -> the LoRA layers it trains this round (the allocation maps m_i)."""
        raise NotImplementedError

    def plan(self, rnd, clients, state, rng):
        layers = self.choose_layers(rnd, clients, state, rng)
        return {p.client: ClientPlan(p.client, p.tier, layers[p.client], train_head=self.config.train_head)
                for p in clients}

    def aggregate(self, state: MethodState, updates) -> MethodState:
        """Eq. 3: per tensor, mean over the clients that uploaded it; others keep their value."""
        return MethodState(weighted_mean_by_key(state.tensors, updates, self.config.weighting), state.extra)


class FedHelloGD(FedHelloBase):
    """GD-HLA with the fixed pattern of the subclass (Eq. 6)."""

    pattern: str = ""

    def choose_layers(self, rnd, clients, state, rng):
        L = self.ctx.n_layers
        return {p.client: gd_layers(self.pattern, self.budget(p), L, rng) for p in clients}


@METHODS.register("fed_hello_gd_triangle", "Fed-HeLLo GD-HLA Triangle: each client trains its first c_i LoRA layers")
class FedHelloGDTriangle(FedHelloGD):
    family = "Fed-HeLLo"
    pattern = "triangle"


@METHODS.register("fed_hello_gd_inverted",
                  "Fed-HeLLo GD-HLA Inverted triangle: each client trains its last c_i LoRA layers")
class FedHelloGDInverted(FedHelloGD):
    family = "Fed-HeLLo"
    pattern = "inverted"


@METHODS.register("fed_hello_gd_bottleneck",
                  "Fed-HeLLo GD-HLA Bottleneck: the first floor(c_i/2) and last ceil(c_i/2) LoRA layers")
class FedHelloGDBottleneck(FedHelloGD):
    family = "Fed-HeLLo"
    pattern = "bottleneck"


@METHODS.register("fed_hello_gd_uniform", "Fed-HeLLo GD-HLA Uniform: c_i LoRA layers drawn uniformly each round")
class FedHelloGDUniform(FedHelloGD):
    family = "Fed-HeLLo"
    pattern = "uniform"


class _RGDPrior:
    """Mixin: the RGD prior (Eq. 7) from the GD masks of every client of the federation."""

    def rgd_prior(self) -> np.ndarray:
        budgets = [p.layers for p in self.ctx.profiles.values()]
        return rgd_priors(self.config.pattern, budgets, self.ctx.n_layers)


@METHODS.register("fed_hello_rgd", "Fed-HeLLo RGD-HLA: c_i layers drawn each round from a GD pattern's prior")
class FedHelloRGD(_RGDPrior, FedHelloBase):
    family = "Fed-HeLLo"
    config_cls = FedHelloRGDConfig

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.prior = self.rgd_prior()  # (L,)

    def choose_layers(self, rnd, clients, state, rng):
        return {p.client: sample_layers(self.prior, self.budget(p), rng) for p in clients}


@METHODS.register("fed_hello_fim",
                  "Fed-HeLLo FIM-HLA: layers drawn by server-side FIM scores on a proxy set (Eq. 4, 5)")
class FedHelloFIM(FedHelloBase):
    """FIM-HLA every T_FIM rounds from round 1 (the co-design with T_RGD = 0)."""
    family = "Fed-HeLLo"

    config_cls = FedHelloFIMConfig

    @classmethod
    def proxy_size_for(cls, config, n_holdout):
        return int(config.proxy_size) if config.proxy_size else max(n_holdout, 1)  # FIM needs one at least

    @property
    def t_rgd(self) -> int:
        return 0

    def warm_start_probs(self) -> np.ndarray:
        raise RuntimeError("FIM-HLA alone has no RGD warm start (T_RGD = 0)")

    def choose_layers(self, rnd, clients, state, rng):
        stage, rescore = hla_schedule(rnd, self.t_rgd, self.config.t_fim)
        if stage == "rgd":
            probs = self.warm_start_probs()
        else:
            if rescore or "fim_probs" not in state.extra:
                self.rescore(rnd, state)
            probs = np.asarray(state.extra["fim_probs"])
        log.debug("fed_hello round %d: %s-HLA%s", rnd, stage, " (rescored)" if rescore else "")
        return {p.client: sample_layers(probs, self.budget(p), rng) for p in clients}

    def rescore(self, rnd: int, state: MethodState) -> None:
        """FIM scores of the global model on the proxy set -> groups -> Eq. 5 probabilities.

        Server work (metered apart from the clients). The results are recorded in
        ``state.extra`` (JSON lists): the method's only cross-round state.
        """
        server = self.ctx.server
        L = self.ctx.n_layers
        scores = server.layer_grad_sq_norms(state.tensors, self.ctx.layer_keys)  # metered itself
        with server.metered():
            levels, ratios = budget_levels(list(self.ctx.profiles.values()), L)
            probs, groups = fim_layer_probs([scores[j] for j in range(L)], levels, ratios)
        state.extra.update(
            fim_scores=[float(scores[j]) for j in range(L)], fim_groups=[int(g) for g in groups],
            fim_probs=[float(x) for x in probs], fim_round=int(rnd),
        )


@METHODS.register("fed_hello",
                  "Fed-HeLLo: RGD-HLA warm start for T_RGD rounds, then FIM-HLA rescored every T_FIM rounds")
class FedHello(_RGDPrior, FedHelloFIM):
    family = "Fed-HeLLo"
    config_cls = FedHelloConfig

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.prior = self.rgd_prior()  # (L,)

    @classmethod
    def resolve_config(cls, config, task_kind):
        config = super().resolve_config(config, task_kind)
        paper = paper_defaults(task_kind)
        return dataclasses.replace(
            config, t_rgd=paper.t_rgd if config.t_rgd is None else config.t_rgd,
            t_fim=paper.t_fim if config.t_fim is None else config.t_fim,
        )

    @property
    def t_rgd(self) -> int:
        return self.config.t_rgd

    def warm_start_probs(self) -> np.ndarray:
        return self.prior
