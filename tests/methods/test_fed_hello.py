"""Fed-HeLLo family: GD masks, RGD sampling, FIM-HLA (k-means order, Eq. 5), co-design
schedule, Eq. 3 aggregation, paper defaults, the opt-in frozen head (a small end-to-end run:
test_fed_hello_run.py)."""

from __future__ import annotations

import contextlib
import itertools
import math

import numpy as np
import pytest
import torch

from fedbench.config import build_config
from fedbench.methods import METHODS
from fedbench.methods.base import ClientPlan, ClientProfile, ClientUpdate, MethodContext, MethodState
from fedbench.methods.fed_hello import (
    FedHelloConfig,
    FedHelloFIMConfig,
    budget_levels,
    eq5_base_probs,
    fim_layer_probs,
    gd_layers,
    hla_schedule,
    kmeans_1d,
    rgd_priors,
    sample_layers,
)

KEYS = ["fed_hello", "fed_hello_fim", "fed_hello_rgd", "fed_hello_gd_triangle", "fed_hello_gd_inverted",
        "fed_hello_gd_bottleneck", "fed_hello_gd_uniform"]


# ------------------------------------------------------------------------- fixtures
def make_ctx(budgets: list[int], n_layers: int, server=None, task_kind: str = "classification") -> MethodContext:
    layer_keys = {j: [f"l{j}.lora_A.weight", f"l{j}.lora_B.weight"] for j in range(n_layers)}
    profiles = {i: ClientProfile(i, sorted(set(budgets)).index(c), c, 4, 10 * (i + 1)) for i, c in enumerate(budgets)}
    return MethodContext(n_layers=n_layers, layer_keys=layer_keys, head_keys=["head.weight"], profiles=profiles,
                         lora_r=16, lora_alpha=16.0, task_kind=task_kind, server=server)


def make_method(key: str, budgets: list[int], n_layers: int, server=None, **cfg):
    cls = METHODS.get(key)
    return cls(build_config(cls.config_cls, cfg, "method"), make_ctx(budgets, n_layers, server))


def zero_state(n_layers: int) -> MethodState:
    t = {f"l{j}.lora_{m}.weight": torch.zeros(2, 2) for j in range(n_layers) for m in "AB"}
    return MethodState({**t, "head.weight": torch.zeros(2, 2)})


class StubServer:
    """Stands in for ServerTools: fixed FIM scores, records when it was asked."""

    def __init__(self, scores):
        self.scores = list(scores)
        self.calls = 0
        self.metered_blocks = 0

    def layer_grad_sq_norms(self, tensors, layer_keys):
        self.calls += 1
        return {j: self.scores[j] for j in layer_keys}

    @contextlib.contextmanager
    def metered(self):
        self.metered_blocks += 1
        yield


def exact_inclusion(probs, c: int) -> np.ndarray:
    """P(layer j among c successive draws without replacement), by enumerating sequences."""
    p = np.asarray(probs, dtype=float)
    incl = np.zeros(len(p))
    for seq in itertools.permutations(range(len(p)), c):
        pr, left = 1.0, 1.0
        for j in seq:
            pr *= p[j] / left
            left -= p[j]
        incl[list(seq)] += pr
    return incl


def test_all_seven_keys_registered():
    for key in KEYS:
        assert key in METHODS


# ------------------------------------------------------------------------- GD-HLA
def test_gd_masks_exactly_as_eq6():
    L = 12
    assert gd_layers("triangle", 6, L) == (0, 1, 2, 3, 4, 5)
    assert gd_layers("inverted", 6, L) == (6, 7, 8, 9, 10, 11)
    assert gd_layers("bottleneck", 6, L) == (0, 1, 2, 9, 10, 11)
    # odd budget: floor(9/2) = 4 shallow + ceil(9/2) = 5 deep, 9 in all
    assert gd_layers("bottleneck", 9, L) == (0, 1, 2, 3, 7, 8, 9, 10, 11)
    assert gd_layers("bottleneck", 1, L) == (11,)
    assert gd_layers("triangle", 9, L) == tuple(range(9))
    for pattern in ("triangle", "inverted", "bottleneck"):
        assert gd_layers(pattern, 12, L) == tuple(range(12))
    for c in range(1, L + 1):
        assert len(gd_layers("bottleneck", c, L)) == c


def test_gd_uniform_draws_c_distinct_layers_uniformly():
    rng = np.random.default_rng(0)
    counts = np.zeros(12)
    n = 4000
    for _ in range(n):
        layers = gd_layers("uniform", 6, 12, rng)
        assert len(set(layers)) == 6
        counts[list(layers)] += 1
    rate = 6 / 12
    assert np.all(np.abs(counts / n - rate) < 5 * math.sqrt(rate * (1 - rate) / n))


def test_gd_methods_plan_fixed_masks_full_depth():
    m = make_method("fed_hello_gd_bottleneck", [6, 6, 9, 12], 12)
    profiles = list(m.ctx.profiles.values())
    plans = m.plan(1, profiles, zero_state(12), np.random.default_rng(0))
    assert plans[0].train_layers == (0, 1, 2, 9, 10, 11)
    assert plans[2].train_layers == (0, 1, 2, 3, 7, 8, 9, 10, 11)
    assert plans[3].train_layers == tuple(range(12))
    assert all(p.blocks is None and p.train_head for p in plans.values())
    tri = make_method("fed_hello_gd_triangle", [6, 12], 12).plan(1, profiles[:1], zero_state(12), None)
    inv = make_method("fed_hello_gd_inverted", [6, 12], 12).plan(1, profiles[:1], zero_state(12), None)
    assert tri[0].train_layers == tuple(range(6)) and inv[0].train_layers == tuple(range(6, 12))


# ------------------------------------------------------------------------- RGD-HLA
def test_rgd_priors_eq7_bottleneck_hand_count():
    # 6 clients of budget 6, 3 of 9, 1 of 12 (RoC 6:3:1, L = 12); total ones 6*6 + 3*9 + 12 = 75
    g = rgd_priors("bottleneck", [6] * 6 + [9] * 3 + [12], 12)
    ends = 6 + 3 + 1  # layers 0-2 and 9-11 are in every mask
    expected = np.array([ends, ends, ends, 3 + 1, 1, 1, 1, 3 + 1, 3 + 1, ends, ends, ends]) / 75
    np.testing.assert_allclose(g, expected)
    np.testing.assert_allclose(rgd_priors("uniform", [6, 9, 12], 12), np.full(12, 1 / 12))


def test_sample_layers_inclusion_matches_successive_sampling():
    """Over many draws, each layer's inclusion frequency equals the exact probability of being
    among c successive draws without replacement from g (within 5 binomial std). That rate is
    not c * g_j: the test also checks the naive rate would be rejected, so it can fail."""
    g = np.array([0.4, 0.25, 0.15, 0.1, 0.1])
    rng = np.random.default_rng(1)
    n = 20000
    for c in (2, 3):
        counts = np.zeros(5)
        for _ in range(n):
            layers = sample_layers(g, c, rng)
            assert len(set(layers)) == c
            counts[list(layers)] += 1
        freq, exact = counts / n, exact_inclusion(g, c)
        tol = 5 * np.sqrt(exact * (1 - exact) / n)
        assert np.all(np.abs(freq - exact) < tol)
        assert np.any(np.abs(freq - c * g) > tol)  # the naive reading would fail


def test_sample_layers_zero_probability_layers_fill_last():
    rng = np.random.default_rng(0)
    for _ in range(50):
        layers = sample_layers(np.array([0.5, 0.5, 0.0, 0.0, 0.0]), 3, rng)
        assert {0, 1} <= set(layers) and len(layers) == 3


def test_rgd_plan_exact_budgets_and_rates():
    """Every client always gets exactly c_i distinct layers; per-tier inclusion frequencies match
    the exact rates implied by the Bottleneck prior of the whole federation (L = 6)."""
    budgets = [3, 3, 3, 5, 5, 6]
    m = make_method("fed_hello_rgd", budgets, 6)
    # Bottleneck masks: c=3 -> {0,4,5}; c=5 -> {0,1,3,4,5}; c=6 -> all; 25 ones
    prior = np.array([3 + 2 + 1, 2 + 1, 1, 2 + 1, 3 + 2 + 1, 3 + 2 + 1]) / 25
    np.testing.assert_allclose(m.prior, prior)
    profiles = list(m.ctx.profiles.values())
    rng, state, n = np.random.default_rng(2), zero_state(6), 2000
    counts = {c: np.zeros(6) for c in (3, 5, 6)}
    for rnd in range(1, n + 1):
        for p in m.plan(rnd, profiles, state, rng).values():
            c = budgets[p.client]
            assert len(p.train_layers) == c == len(set(p.train_layers))
            counts[c][list(p.train_layers)] += 1
    for c, draws in ((3, 3 * n), (5, 2 * n)):
        exact = exact_inclusion(prior, c)
        tol = 5 * np.sqrt(exact * (1 - exact) / draws) + 1e-12
        assert np.all(np.abs(counts[c] / draws - exact) < tol), c
    np.testing.assert_array_equal(counts[6], np.full(6, n))


# ------------------------------------------------------------------------- FIM-HLA
def test_kmeans_groups_ordered_by_score_not_index():
    scores = [0.1, 5.0, 0.2, 9.0, 5.1, 0.15]
    labels = kmeans_1d(scores, 3)
    assert labels.tolist() == [2, 1, 2, 0, 1, 2]  # 0 = highest group {9.0}
    assert kmeans_1d([3.0, 3.0, 1.0], 3).tolist() == [0, 0, 1]  # ties never split
    assert kmeans_1d([1.0, 2.0], 1).tolist() == [0, 0]


def test_kmeans_is_the_optimal_split():
    # compare with a brute-force search over all contiguous 3-splits of the sorted values
    v = [10.0, 9.0, 1.2, 1.1, 1.0, 0.0]
    labels = kmeans_1d(v, 3)
    best = min(
        (sum(np.var(v[i:j]) * (j - i) for i, j in ((0, a), (a, b), (b, 6))), a, b)
        for a in range(1, 5) for b in range(a + 1, 6)
    )
    _, a, b = best
    assert labels.tolist() == [0] * a + [1] * (b - a) + [2] * (6 - b)


def test_eq5_hand_worked_three_tiers():
    # budgets 6 / 9 / 12 of 12 layers, ratios 0.6 / 0.3 / 0.1: sum_h c_h r_h = 3.6 + 2.7 + 1.2 = 7.5
    a = eq5_base_probs([6, 9, 12], [0.6, 0.3, 0.1])
    np.testing.assert_allclose(a, [3 / 7.5, 2 / 7.5, 1 / 7.5])
    # 2 high-score layers, 3 middle, 7 low, scattered over the depth
    scores = [9.0, 1.0, 0.1, 5.0, 9.5, 0.2, 5.2, 1.1, 0.9, 5.1, 1.2, 0.15]
    probs, groups = fim_layer_probs(scores, [6, 9, 12], [0.6, 0.3, 0.1])
    # k-means on these scores: {9, 9.5} | {5, 5.1, 5.2} | the seven below 1.3
    high, mid, low = {0, 4}, {3, 6, 9}, {1, 2, 5, 7, 8, 10, 11}
    assert {j for j in range(12) if groups[j] == 0} == high
    assert {j for j in range(12) if groups[j] == 1} == mid
    total = len(high) * 3 + len(mid) * 2 + len(low) * 1  # in units of 1/7.5
    expected = [3 / total if j in high else 2 / total if j in mid else 1 / total for j in range(12)]
    np.testing.assert_allclose(probs, expected)


def test_budget_levels_from_profiles():
    ctx = make_ctx([6] * 6 + [9] * 3 + [12], 12)
    levels, ratios = budget_levels(list(ctx.profiles.values()), 12)
    assert levels == [6, 9, 12]
    np.testing.assert_allclose(ratios, [0.6, 0.3, 0.1])


def test_fim_method_scores_probs_and_sampling():
    scores = [9.0, 1.0, 0.1, 5.0, 9.5, 0.2, 5.2, 1.1, 0.9, 5.1, 1.2, 0.15]
    server = StubServer(scores)
    budgets = [6] * 6 + [9] * 3 + [12]
    m = make_method("fed_hello_fim", budgets, 12, server)
    state = zero_state(12)
    plans = m.plan(1, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    assert server.calls == 1 and server.metered_blocks >= 1
    expected, groups = fim_layer_probs(scores, [6, 9, 12], [0.6, 0.3, 0.1])
    np.testing.assert_allclose(state.extra["fim_probs"], expected)
    assert state.extra["fim_scores"] == scores and state.extra["fim_groups"] == groups.tolist()
    assert state.extra["fim_round"] == 1
    for p in plans.values():
        assert len(p.train_layers) == budgets[p.client] == len(set(p.train_layers)) and p.blocks is None
    m.plan(2, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    assert server.calls == 2  # fed_hello_fim: T_FIM = 1, rescored every round


# ------------------------------------------------------------------------- co-design
def test_schedule_rgd_then_fim_rescored_every_t_fim():
    got = [hla_schedule(r, 2, 2) for r in range(1, 7)]
    assert got == [("rgd", False), ("rgd", False), ("fim", True), ("fim", False), ("fim", True), ("fim", False)]
    assert [hla_schedule(r, 0, 1) for r in (1, 2, 3)] == [("fim", True)] * 3
    # instruction tuning defaults T_RGD = 1, T_FIM = 2
    assert [hla_schedule(r, 1, 2)[1] for r in range(1, 7)] == [False, True, False, True, False, True]


def test_codesign_uses_rgd_prior_then_fim_probs():
    """Triangle prior with budget 2 of 4 puts all mass on layers {0, 1}; the FIM scores favour
    {2, 3}: which layers clients get shows which strategy ran in which round."""
    server = StubServer([0.0, 0.0, 10.0, 10.0])
    m = make_method("fed_hello", [2, 2, 4], 4, server, pattern="triangle", t_rgd=2, t_fim=2)
    np.testing.assert_allclose(m.prior, [3 / 8, 3 / 8, 1 / 8, 1 / 8])
    state, rng = zero_state(4), np.random.default_rng(0)
    weak = [p for p in m.ctx.profiles.values() if p.layers == 2]
    calls = []
    for rnd in range(1, 7):
        plans = m.plan(rnd, weak, state, rng)
        calls.append(server.calls)
        assert all(len(set(p.train_layers)) == 2 for p in plans.values())
        assert ("fim_round" in state.extra) == (rnd >= 3)
    assert calls == [0, 0, 1, 1, 2, 2]  # rescored at rounds 3 and 5
    assert state.extra["fim_round"] == 5
    # FIM: levels (2, 4), a = (2, 1) / D; groups {2,3} -> a_1, {0,1} -> a_2; p = (1, 1, 2, 2) / 6
    np.testing.assert_allclose(state.extra["fim_probs"], [1 / 6, 1 / 6, 1 / 3, 1 / 3])


def test_codesign_rgd_rounds_follow_zero_prior():
    # Triangle with only budget-2 clients: prior (1/2, 1/2, 0, 0) -> RGD rounds always {0, 1}
    server = StubServer([0.0, 0.0, 10.0, 10.0])
    m = make_method("fed_hello", [2, 2], 4, server, pattern="triangle", t_rgd=3, t_fim=5)
    state, rng = zero_state(4), np.random.default_rng(0)
    profiles = list(m.ctx.profiles.values())
    for rnd in range(1, 4):
        assert {p.train_layers for p in m.plan(rnd, profiles, state, rng).values()} == {(0, 1)}
    assert server.calls == 0
    fim_sets = set()
    for rnd in range(4, 40):
        fim_sets |= {p.train_layers for p in m.plan(rnd, profiles, state, rng).values()}
    assert server.calls == 8  # rounds 4, 9, ..., 39
    assert fim_sets - {(0, 1)}  # FIM rounds reach the layers the prior never gives


# ------------------------------------------------------------------------- aggregation
def _update(client, n, tensors, layers):
    return ClientUpdate(client, tensors, n, ClientPlan(client, 0, layers))


@pytest.mark.parametrize("weighting", ["uniform", "examples"])
def test_aggregate_per_layer_mean_over_trainers(weighting):
    m = make_method("fed_hello_rgd", [2, 3], 3, weighting=weighting)
    one = torch.ones(2, 2)
    state = MethodState({**{f"l{j}.lora_{x}.weight": 0 * one for j in range(2) for x in "AB"},
                         "l2.lora_A.weight": 7 * one, "l2.lora_B.weight": 8 * one, "head.weight": 0 * one},
                        extra={"fim_probs": [0.5, 0.5, 0.0]})
    a = {"l0.lora_A.weight": 1 * one, "l0.lora_B.weight": 1 * one, "l1.lora_A.weight": 2 * one,
         "l1.lora_B.weight": 2 * one, "head.weight": 3 * one}
    b = {"l1.lora_A.weight": 4 * one, "l1.lora_B.weight": 4 * one, "head.weight": 5 * one}
    new = m.aggregate(state, [_update(0, 1, a, (0, 1)), _update(1, 3, b, (1,))])
    w0, w1 = (1.0, 1.0) if weighting == "uniform" else (1.0, 3.0)
    t = new.tensors
    assert torch.allclose(t["l0.lora_A.weight"], one * 1)  # only client 0 trained layer 0
    assert torch.allclose(t["l1.lora_A.weight"], one * (w0 * 2 + w1 * 4) / (w0 + w1))
    assert torch.allclose(t["head.weight"], one * (w0 * 3 + w1 * 5) / (w0 + w1))
    assert torch.equal(t["l2.lora_A.weight"], 7 * one) and torch.equal(t["l2.lora_B.weight"], 8 * one)
    assert new.extra == {"fim_probs": [0.5, 0.5, 0.0]}


def test_upload_is_trained_layers_and_payload_is_full_depth():
    m = make_method("fed_hello_gd_triangle", [2, 4], 4)
    plan = m.plan(1, [m.ctx.profiles[0]], zero_state(4), None)[0]
    assert m.upload_keys(plan) == ["l0.lora_A.weight", "l0.lora_B.weight", "l1.lora_A.weight",
                                   "l1.lora_B.weight", "head.weight"]
    assert set(m.client_payload(zero_state(4), plan)) == set(zero_state(4).tensors)


# ------------------------------------------------------------------------- defaults
def test_paper_defaults_resolved_by_task_kind():
    cls = METHODS.get("fed_hello")
    cfg = build_config(cls.config_cls, {}, "method")
    assert (cfg.lora_r, cfg.t_rgd, cfg.t_fim) == (None, None, None)
    cl = cls.resolve_config(cfg, "classification")
    assert (cl.lora_r, cl.lora_alpha, cl.lora_dropout, cl.lora_targets) == (16, 16.0, 0.1, "qv")
    assert (cl.t_rgd, cl.t_fim) == (50, 50)
    lm = cls.resolve_config(cfg, "generation")
    assert (lm.lora_r, lm.t_rgd, lm.t_fim) == (8, 1, 2)
    own = cls.resolve_config(build_config(cls.config_cls, {"lora_r": 4, "t_rgd": 3}, "method"), "generation")
    assert (own.lora_r, own.t_rgd, own.t_fim) == (4, 3, 2)
    fim = METHODS.get("fed_hello_fim").resolve_config(FedHelloFIMConfig(), "generation")
    assert (fim.lora_r, fim.t_fim) == (8, 1)
    m = make_method("fed_hello", [2, 4], 4, StubServer([1, 2, 3, 4]))
    assert (m.config.lora_r, m.config.t_rgd, m.config.t_fim) == (16, 50, 50)


def test_proxy_set_is_the_servers_holdout():
    from fedbench.tasks import TASKS

    # the paper's proxy sizes (Sec. IV-A) are the tasks' server hold-outs
    sizes = {k: TASKS.get(k).server_holdout for k in ("cifar100", "ledgar", "domainnet", "dolly",
                                                       "natural_instructions", "tiny_text")}
    assert sizes == {"cifar100": 100, "ledgar": 50, "domainnet": 1000, "dolly": 50, "natural_instructions": 50,
                     "tiny_text": 50}
    cls = METHODS.get("fed_hello")
    assert cls.proxy_size_for(FedHelloConfig(), 100) == 100
    assert cls.proxy_size_for(FedHelloConfig(proxy_size=7), 100) == 7
    assert METHODS.get("fed_hello_rgd").proxy_size_for(METHODS.get("fed_hello_rgd").config_cls(), 100) == 0


def test_bad_configs_rejected():
    from fedbench.errors import UserError

    for bad in ({"t_fim": 0}, {"t_rgd": -1}, {"proxy_size": 0}, {"pattern": "zigzag"}, {"lora_r": 0}):
        with pytest.raises(UserError):
            build_config(FedHelloConfig, bad, "method")


def test_opt_in_frozen_head_is_neither_trained_nor_averaged():
    """``train_head=false`` (the comparator of FlexLoRA's / FLoRA's opt-in): no plan trains the head,
    so no upload carries it and the global head keeps its value; the default trains it."""
    m = make_method("fed_hello_gd_triangle", [2, 4], 4, train_head=False)
    state = zero_state(4)
    plans = m.plan(1, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    assert all(not p.train_head and "head.weight" not in m.upload_keys(p) for p in plans.values())
    ups = [ClientUpdate(c, {k: torch.ones(2, 2) for k in m.upload_keys(p)}, 10, p) for c, p in plans.items()]
    assert torch.equal(m.aggregate(state, ups).tensors["head.weight"], torch.zeros(2, 2))
    default = make_method("fed_hello_gd_triangle", [2, 4], 4)
    plans = default.plan(1, list(default.ctx.profiles.values()), state, np.random.default_rng(0))
    assert all(p.train_head and "head.weight" in default.upload_keys(p) for p in plans.values())
