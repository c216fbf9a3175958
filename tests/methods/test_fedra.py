"""FedRA plan (allocation matrix) and aggregation on hand-built tensors."""

import numpy as np
import torch

from fedbench.methods.base import ClientPlan, ClientProfile, ClientUpdate, MethodContext, MethodState, Traffic
from fedbench.methods.fedra import FedRA, FedRAConfig, allocation_matrix

L = 4
LAYER_KEYS = {j: [f"l{j}.A", f"l{j}.B"] for j in range(L)}
HEAD = ["head.w"]


def ctx(budgets):
    profiles = {i: ClientProfile(i, 0, c, 1, 10) for i, c in enumerate(budgets)}
    return MethodContext(L, LAYER_KEYS, HEAD, profiles, 2, 2.0)


def state(value=0.0):
    return MethodState({k: torch.full((2,), value) for ks in LAYER_KEYS.values() for k in ks} | {"head.w": torch.full((2,), value)})


def test_allocation_rows_sum_to_budget_and_are_uniform():
    rng = np.random.default_rng(0)
    counts = np.zeros(L)
    for _ in range(4000):
        m = allocation_matrix([1, 3], L, rng)
        assert m.sum(axis=1).tolist() == [1, 3]
        counts += m[0]
    # client 0 picks each layer with probability 1/4
    assert np.allclose(counts / 4000, 0.25, atol=0.03)


def test_plan_uses_chosen_blocks_in_ascending_order():
    method = FedRA(FedRAConfig(), ctx([2, 3]))
    profiles = list(method.ctx.profiles.values())
    plans = method.plan(1, profiles, state(), np.random.default_rng(1))
    for p in profiles:
        plan = plans[p.client]
        assert len(plan.train_layers) == p.layers
        assert plan.blocks == plan.train_layers == tuple(sorted(plan.blocks))


def test_redraw_covers_every_layer():
    method = FedRA(FedRAConfig(coverage="redraw"), ctx([2, 2]))
    profiles = list(method.ctx.profiles.values())
    for seed in range(20):
        plans = method.plan(1, profiles, state(), np.random.default_rng(seed))
        covered = set().union(*(p.train_layers for p in plans.values()))
        assert covered == set(range(L))


def upd(client, layers, value, n):
    keys = [k for j in layers for k in LAYER_KEYS[j]] + HEAD
    plan = ClientPlan(client, 0, layers, blocks=layers)
    return ClientUpdate(client, {k: torch.full((2,), float(value)) for k in keys}, n, plan)


def test_aggregate_example_weighted_per_layer_and_keeps_untouched():
    method = FedRA(FedRAConfig(), ctx([2, 2]))
    new = method.aggregate(state(5.0), [upd(0, (0, 1), 1.0, 10), upd(1, (1, 2), 4.0, 30)])
    assert torch.allclose(new.tensors["l0.A"], torch.tensor(1.0))  # only client 0 had layer 0
    assert torch.allclose(new.tensors["l1.A"], torch.tensor((1.0 * 10 + 4.0 * 30) / 40))
    assert torch.allclose(new.tensors["l2.B"], torch.tensor(4.0))
    assert torch.allclose(new.tensors["l3.A"], torch.tensor(5.0))  # nobody: keeps last value (Eq. 3)
    assert torch.allclose(new.tensors["head.w"], torch.tensor((1.0 * 10 + 4.0 * 30) / 40))


def test_uniform_weighting_option():
    method = FedRA(FedRAConfig(weighting="uniform"), ctx([2, 2]))
    new = method.aggregate(state(), [upd(0, (1,), 1.0, 10), upd(1, (1,), 4.0, 30)])
    assert torch.allclose(new.tensors["l1.A"], torch.tensor((1.0 + 4.0) / 2))


def test_traffic_both_ways_labelled():
    c = ctx([2, 3])
    c.block_bytes = {j: 100 * (j + 1) for j in range(L)}
    plan = ClientPlan(0, 0, (1, 3), blocks=(1, 3))
    pay = {k: torch.zeros(2) for k in ["l1.A", "l1.B", "l3.A", "l3.B", "head.w"]}
    up = {k: torch.zeros(3) for k in ["l1.A", "head.w"]}
    lora = 5 * 2 * 4
    m = FedRA(FedRAConfig(), c)
    assert m.traffic(plan, pay, up) == Traffic(lora, 2 * 3 * 4, {FedRA.WITH_BLOCKS: lora + 200 + 400})
    m = FedRA(FedRAConfig(count_frozen_blocks=True), c)
    assert m.traffic(plan, pay, up) == Traffic(lora + 600, 2 * 3 * 4, {FedRA.WITHOUT_BLOCKS: lora})


def test_fulldepth_variant_trains_random_layers_on_the_full_model():
    from fedbench.methods import METHODS
    from fedbench.methods.fedra import FedRAFullDepth

    assert METHODS.get("fedra_fulldepth") is FedRAFullDepth
    assert "full-depth" in METHODS.entry("fedra_fulldepth").description
    method = FedRAFullDepth(FedRAConfig(), ctx([2, 3]))
    profiles = list(method.ctx.profiles.values())
    sub = FedRA(FedRAConfig(), method.ctx).plan(1, profiles, state(), np.random.default_rng(1))
    plans = method.plan(1, profiles, state(), np.random.default_rng(1))
    for p in profiles:
        assert plans[p.client].blocks is None  # full-depth forward
        assert plans[p.client].train_layers == sub[p.client].train_layers  # the same allocation M
        assert len(plans[p.client].train_layers) == p.layers
    pay = {"l0.A": torch.zeros(2), "head.w": torch.zeros(2)}
    assert method.traffic(plans[0], pay, {"l0.A": torch.zeros(2)}) == Traffic(2 * 2 * 4, 2 * 4, {})
