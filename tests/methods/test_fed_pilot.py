"""Fed-pilot: the knapsack and the non-additive memory cost model (hand checks), DWA, the
IG-Score, the aggregation, and on tiny_text: the cost model against the accountant's
measured steps, the client-side choice within budget, and what a round records."""

import dataclasses

import numpy as np
import pytest
import torch

from fedbench.methods import METHODS
from fedbench.methods.aggregation_hetero import dwa_gains, extrapolate
from fedbench.methods.base import ClientAPI, ClientPlan, ClientUpdate, MemoryAPI, MethodState
from fedbench.methods.fed_pilot import BUDGET, COST, GLOBAL, HISTORY, SELECTED, FedPilot, FedPilotConfig
from fedbench.methods.memory_plan import MemoryCostModel, ig_values, knapsack, select_under_budget
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.executors.selection import select_plan
from smoke import SMALL_TASK_CONFIGS


# ------------------------------------------------------------------ pure rules, by hand
def test_knapsack_takes_the_best_set_not_the_densest():
    """Costs (3, 4, 5), values (4, 5, 6), capacity 8: {1, 3} is worth 4 + 6 = 10, {1, 2}
    (the greedy by value per cost: 4/3 > 5/4 > 6/5) only 4 + 5 = 9."""
    chosen = knapsack([4, 5, 6], [3, 4, 5], 8)
    assert chosen == [0, 2]
    assert sum([4, 5, 6][i] for i in chosen) == 4 + 6
    assert knapsack([4, 5, 6], [3, 4, 5], 2) == []
    assert knapsack([4, 5, 6], [3, 4, 5], 12) == [0, 1, 2]  # 3 + 4 + 5 = 12 fits exactly


def test_knapsack_on_a_coarse_grid_never_exceeds_the_capacity():
    """Weights 7, 8, 9 (gcd 1) and capacity 23 on a grid of 4: units of ceil(23 / 4) = 6 bytes,
    each weight rounds up to 2 units, the capacity down to 3: one item (a rounding down, to
    1 unit each, would take all three: 24 bytes > 23). With grid 100 the units are bytes:
    7 + 9 = 16 or 8 + 9 = 17 (two items) fit 23, exactly; capacity 24 takes all three."""
    w = [7, 8, 9]
    assert len(knapsack([1, 1, 1], w, 23, grid=4)) == 1
    assert len(knapsack([1, 1, 1], w, 23, grid=100)) == 2
    assert knapsack([1, 1, 1], w, 24, grid=100) == [0, 1, 2] and 7 + 8 + 9 == 24
    assert knapsack([1, 1, 1], [9224] * 3, 2 * 9224, grid=2) == [0, 1]  # units of the gcd 9224: 2 <= grid, exact


def test_memory_is_charged_once_for_the_lowest_trained_layer():
    """Module 0 in layer 0, modules 1 and 2 in layer 1; saved activations act = (10, 2, 0) by
    lowest trained layer, each module weighs 1. Budget 5: the valuable module 0 would cost
    0 + 10 + 1 = 11 > 5, so the modules of layer 1: 2 + 1 + 1 = 4 <= 5, value 1 + 1 = 2.
    Budget 12: lowest layer 0 leaves 12 - 10 = 2 for two modules, module 0 and one of layer 1:
    value 9 + 1 = 10. An additive knapsack (act ignored) would pick module 0 at budget 5."""
    model = MemoryCostModel(fixed=0, act=(10, 2, 0), weights=(1, 1, 1), layers=(0, 1, 1))
    values = [9.0, 1.0, 1.0]
    assert select_under_budget(values, model, 5) == [1, 2]
    assert model.cost([1, 2]) == 2 + 1 + 1
    chosen = select_under_budget(values, model, 12)
    assert 0 in chosen and len(chosen) == 2 and sum(values[i] for i in chosen) == 9 + 1
    assert model.cost(chosen) == 10 + 1 + 1
    assert select_under_budget(values, model, 0) == []  # the head alone: act[L] = 0
    assert select_under_budget(values, MemoryCostModel(1, (10, 2, 0), (1, 1, 1), (0, 1, 1)), 0) is None


def test_cost_model_from_measured_steps_is_exact_on_the_nested_sets():
    """3 modules (layers 0, 1, 1) of 8 bytes, params 100; the head alone: grads 2, optimizer 4;
    with S_0 (every module): grads 2 + 24, optimizer 4 + 48 (Adam: 2 x), so
    f = (26 + 52 - 6) / 24 = 3, w = 3 * 8 = 24 per module, fixed = 100 + 2 + 4."""
    steps = [{"params": 100, "grads": 26, "optimizer": 52, "activations": 50},
             {"params": 100, "grads": 2 + 16, "optimizer": 4 + 32, "activations": 20},
             {"params": 100, "grads": 2, "optimizer": 4, "activations": 5}]
    model = MemoryCostModel.from_steps(steps, layers=[0, 1, 1], module_bytes=[8, 8, 8])
    assert model.weights == (24, 24, 24) and model.fixed == 106 and model.act == (50, 20, 5)
    for low, chosen in ((0, [0, 1, 2]), (1, [1, 2]), (2, [])):
        assert model.cost(chosen) == sum(steps[low].values())
    assert model.top(1) == [1, 2] and model.cost(model.top(1)) == 100 + 18 + 36 + 20


def test_dwa_gain_lifts_the_under_updated_module():
    """u = (10, 5): u_bar = 7.5, g = clip(7.5 / 10, 1, 2) = 1 and clip(7.5 / 5, 1, 2) = 1.5."""
    assert dwa_gains([10, 5]) == [1.0, 1.5]
    assert dwa_gains([10, 1], high=2.0) == [1.0, 2.0]  # 5.5 / 1 clipped to 2
    assert dwa_gains([0, 4]) == [1.0, 1.0]  # never updated: no move to scale
    cur, mean = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 2.0])
    assert torch.equal(extrapolate(cur, mean, 1.5), torch.tensor([1.0 + 1.5 * (3.0 - 1.0), 2.0]))


def test_ig_score_mixes_the_normalised_terms():
    """local (1, 3) -> (1/4, 3/4); global (0, 0) -> uniform (1/2, 1/2); lam 0.5."""
    assert ig_values([1, 3], [0, 0], 0.5) == [0.5 * 1 / 4 + 0.5 * 1 / 2, 0.5 * 3 / 4 + 0.5 * 1 / 2]
    assert ig_values([1, 3], [3, 1], 1.0) == [1 / 4, 3 / 4]


# ------------------------------------------------------------------ the method's hooks
class FakeMemory(MemoryAPI):
    """Analytic step bytes: params 1000, gradient = parameter bytes, Adam state 2 x, 100
    activation bytes per layer from the lowest trained one up (L = 3 layers)."""

    def __init__(self, am):
        self.am = am

    def step_bytes(self, method, plan, trainable):
        p = sum(self.am.read([k])[k].numel() * 4 for k in trainable)
        low = min((j for j, ks in self.am.layer_keys.items() if set(ks) & set(trainable)), default=3)
        return {"params": 1000, "grads": p, "optimizer": 2 * p, "activations": 100 * (3 - low)}


class FakeClient(ClientAPI):
    def __init__(self, scores):
        self.scores = scores

    def grad_sq_norms(self, keys, batches):
        return {k: self.scores.get(k.rsplit(".lora_", 1)[0], 0.0) for k in keys}


def _method(tiny_am, ctx_for, layers=(3, 2), **cfg):
    am = tiny_am(r=2, alpha=4.0)
    ctx = ctx_for(am, [(t, n, 2) for t, n in enumerate(layers)])
    ctx.memory = FakeMemory(am)
    m = FedPilot(FedPilotConfig(lora_r=2, lora_alpha=4.0, **cfg), ctx)
    return am, m, m.init_state(am.read(am.all_keys))


def test_registered_with_a_budget_measured_on_the_top_layers(tiny_am, ctx_for):
    """3 layers of one 2 x 4 LoRA module (A 2 x 4 + B 4 x 2 = 16 floats = 64 bytes): a
    2-layer tier's budget is training the top two: 1000 + 3 * (2 * 64 + head 60) + 100 * (3 - 1)."""
    assert METHODS.get("fed_pilot") is FedPilot
    am, m, state = _method(tiny_am, ctx_for)
    plans = m.plan(1, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    head = (3 * 4 + 3) * 4
    assert plans[1].extra[BUDGET] == 1000 + 3 * (2 * 64 + head) + 100 * 2
    assert plans[1].extra[SELECTED] == [1, 2] and plans[1].train_layers == (1, 2)
    assert plans[0].extra[SELECTED] == [0, 1, 2]


def test_client_select_spends_its_budget_on_the_most_valuable_modules(tiny_am, ctx_for):
    """Module weight 3 x 64 = 192 bytes (gradient + Adam), fixed 1000 + 3 x 60 (head) = 1180,
    act = (300, 200, 100, 0). The 2-layer budget is 1180 + 200 + 2 x 192 = 1764. Lowest layer
    0 leaves 1764 - 1180 - 300 = 284 bytes: one module; lowest layer 1 leaves 384: modules 1
    and 2. Local scores (5, 1, 0): module 0 alone (5) beats modules 1 + 2 (1 + 0); scores
    (0.5, 1, 1): modules 1 + 2 (2) beat any one module (1)."""
    am, m, state = _method(tiny_am, ctx_for, lam=1.0)
    plan = m.plan(1, [m.ctx.profiles[1]], state, np.random.default_rng(0))[1]
    assert plan.extra[BUDGET] == 1180 + 200 + 2 * 192
    chosen = select_plan(m, plan, FakeClient({"blocks.0.fc": 5.0, "blocks.1.fc": 1.0, "blocks.2.fc": 0.0}))
    assert chosen.extra[SELECTED] == [0] and chosen.train_layers == (0,)
    assert plan.extra[COST].cost([0]) == 1180 + 300 + 192 <= plan.extra[BUDGET]
    assert m.upload_keys(chosen) == ["blocks.0.fc.lora_A.weight", "blocks.0.fc.lora_B.weight", "head.weight",
                                     "head.bias"]
    chosen = select_plan(m, plan, FakeClient({"blocks.0.fc": 0.5, "blocks.1.fc": 1.0, "blocks.2.fc": 1.0}))
    assert chosen.extra[SELECTED] == [1, 2] and chosen.train_layers == (1, 2)
    assert plan.extra[COST].cost([0, 1]) == 1180 + 300 + 2 * 192 > plan.extra[BUDGET]


def test_a_selection_may_not_change_the_clients_model():
    class Bad(FedPilot):
        def client_select(self, plan, client):
            return ClientPlan(plan.client, plan.tier, (), rank=1)
    with pytest.raises(RuntimeError, match="changed the plan's rank"):
        select_plan(Bad.__new__(Bad), ClientPlan(0, 0, ()), None)


def test_aggregate_averages_each_module_over_its_trainers_with_the_dwa_gain(tiny_am, ctx_for):
    """Module 0 was updated in 4 of the last rounds, module 2 in 2, module 1 in 3 (with this
    one): u = (4, 3, 2) -> u_bar = 3, g = (1, 1, 1.5). Client 0 (n 1) trains modules 0 and 2,
    client 1 (n 3) module 0: module 0 -> (1 * x0 + 3 * x1) / 4 at gain 1, module 2 -> W + 1.5 (x0 - W)."""
    am, m, state = _method(tiny_am, ctx_for)
    state = MethodState(state.tensors, {HISTORY: [[0, 1], [0, 1], [0, 1, 2]]})
    keys = lambda i: [f"blocks.{i}.fc.lora_A.weight", f"blocks.{i}.fc.lora_B.weight"]  # noqa: E731
    g = torch.Generator().manual_seed(3)
    ups = []
    for c, (mods, n) in enumerate((([0, 2], 1), ([0], 3))):
        t = {k: torch.randn(state.tensors[k].shape, generator=g) for i in mods for k in keys(i)}
        t |= {k: state.tensors[k] + 1.0 for k in m.ctx.head_keys}
        ups.append(ClientUpdate(c, t, n, ClientPlan(c, 0, tuple(mods), extra={SELECTED: mods})))
    new = m.aggregate(state, ups)
    for k in keys(0):
        assert torch.allclose(new.tensors[k], (1 * ups[0].tensors[k] + 3 * ups[1].tensors[k]) / 4, atol=1e-6)
    for k in keys(2):
        w = state.tensors[k]
        assert torch.allclose(new.tensors[k], w + 1.5 * (ups[0].tensors[k] - w), atol=1e-6)
    for k in keys(1):
        assert torch.equal(new.tensors[k], state.tensors[k])
    assert new.extra[HISTORY][-1] == [0, 2]
    s = 4.0 / 2
    a, b = keys(2)
    want = (s * (new.tensors[b] @ new.tensors[a]) - s * (state.tensors[b] @ state.tensors[a])).norm()
    assert new.extra[GLOBAL][2] == pytest.approx(float(want), rel=1e-5) and new.extra[GLOBAL][1] == 0.0
    off = _method(tiny_am, ctx_for, dwa=False)[1].aggregate(state, ups)
    assert torch.allclose(off.tensors[keys(2)[0]], ups[0].tensors[keys(2)[0]], atol=1e-6)  # noDWA: the mean


# ------------------------------------------------------------------ on tiny_text
def _experiment(tmp_path, **run):
    exp = Experiment("fed_pilot", "tiny_text", {**dict(rounds=2, clients=6, per_round=6, roc="1:1:1", seed=0,
                                                       out=str(tmp_path)), **run},
                     task_config=SMALL_TASK_CONFIGS["tiny_text"])
    exp.setup()
    return exp


def test_cost_model_is_exact_on_nested_sets_and_bounds_the_others(tmp_path):
    """The accountant's measured steps of random module sets never exceed the model's cost
    of the same set, and equal it on the sets it was built from (every module above l)."""
    exp = _experiment(tmp_path)
    m, acc = exp.method, exp.method.ctx.memory
    state = m.init_state(exp.am.read(exp.am.all_keys))
    model = m.cost_model(state)
    probe = ClientPlan(0, 0, ())
    head = list(m.ctx.head_keys)
    for low in (0, 5, 11):
        chosen = [i for i, j in enumerate(m.layer_of) if j >= low]
        assert sum(acc.step_bytes(m, probe, m.module_keys(chosen) + head).values()) == model.cost(chosen)
    rng = np.random.default_rng(0)
    for _ in range(4):
        chosen = sorted(rng.choice(len(m.modules), size=int(rng.integers(1, 8)), replace=False).tolist())
        measured = sum(acc.step_bytes(m, probe, m.module_keys(chosen) + head).values())
        assert measured <= model.cost(chosen), chosen
    assert model.act[0] > model.act[6] > model.act[11] > model.act[12]  # lower = more activations kept


def test_every_client_trains_what_it_chose_within_its_budget(tmp_path):
    """Each client-round's trained modules are those of its plan (uploaded, aggregated), and
    their modelled cost is within the tier's budget (top 6 / 9 / 12 of 12 layers)."""
    exp = _experiment(tmp_path)
    seen = []
    aggregate = exp.method.aggregate

    def spy(state, updates):
        for u in updates:
            mods = u.plan.extra[SELECTED]
            assert {k for k in u.tensors if "lora_" in k} == set(exp.method.module_keys(mods))
            assert u.plan.extra[COST].cost(mods) <= u.plan.extra[BUDGET]
            seen.append((u.plan.tier, len(mods)))
        return aggregate(state, updates)
    exp.method.aggregate = spy
    exp.setup = lambda: None
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    assert len(seen) == 2 * 6
    # a lower layer's activations cost more than any module: every tier trains exactly its top layers' modules
    assert {t: n for t, n in seen} == {0: 12, 1: 18, 2: 24}
    by_tier = rec["cost"]["traffic_mb_per_client_round"]["by_tier"]
    assert by_tier["0"]["up"] < by_tier["1"]["up"] < by_tier["2"]["up"]
    assert by_tier["0"]["down"] == by_tier["2"]["down"]  # every client gets the whole adapter


def test_the_server_aggregates_the_plan_the_client_chose(tmp_path):
    """With activations made free (every act[l] = act[L]) the knapsack is additive and picks
    modules by value, not the top layers the budget was measured on: what each client
    uploads, and what the server reads as its trained modules, is its own choice."""
    exp = _experiment(tmp_path, rounds=1)
    m = exp.method
    model = m.cost_model(m.init_state(exp.am.read(exp.am.all_keys)))
    m._cost = dataclasses.replace(model, act=(model.act[-1],) * len(model.act))
    differs = []
    aggregate = m.aggregate

    def spy(state, updates):
        for u in updates:
            mods = u.plan.extra[SELECTED]
            assert {k for k in u.tensors if "lora_" in k} == set(m.module_keys(mods))
            differs.append(mods != m._cost.top(len(mods) // 2))
        return aggregate(state, updates)
    m.aggregate = spy
    exp.setup = lambda: None
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    assert len(differs) == 6 and any(differs)
