"""Fed-PLoRA: Select-N-Fold (the fold is exact), per-module averaging over trainers,
traffic, and FedIT reproduced bit for bit when every client has the full rank."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, tensor_bytes
from fedbench.methods.fed_plora import SLOTS, FedPLoRA, FedPLoRAConfig
from fedbench.methods.rank_hetero import base_key
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.executors.train import adapter_for
from smoke import SMALL_TASK_CONFIGS
from helpers import method_setup

M = "blocks.0.fc"
A0, B0, W0 = M + ".lora_A.weight", M + ".lora_B.weight", M + ".base_layer.weight"
ALPHA = 8.0  # R = 4: s = 8 / 4 = 2


def _setup(ranks, budget="rank", layers=3):
    def trained_looking(m, state):  # a trained-looking global LoRA: non-zero, non-symmetric
        g = torch.Generator().manual_seed(1)
        for mod in m.modules:
            state.tensors[mod + ".lora_A.weight"] = torch.randn(4, 4, generator=g)
            state.tensors[mod + ".lora_B.weight"] = torch.randn(4, 4, generator=g)

    return method_setup(FedPLoRA, [(t, layers, r) for t, r in enumerate(ranks)],
                        FedPLoRAConfig(lora_r=4, lora_alpha=ALPHA, budget=budget), base=True,
                        before_plan=trained_looking, r=4, alpha=ALPHA)


def test_registered_and_plans_r_i_modules_with_the_global_scaling():
    assert METHODS.get("fed_plora") is FedPLoRA
    am, m, state, plans = _setup([1, 2, 4])
    assert [len(plans[c].extra[SLOTS]) for c in range(3)] == [1, 2, 4]
    assert plans[2].extra[SLOTS] == [0, 1, 2, 3] and plans[2].lora_alpha is None  # full rank: default adapter
    assert plans[1].lora_alpha == ALPHA * 2 / 4  # s = alpha r_i / r_i / R = alpha / R for every client
    assert all(p.train_layers == (0, 1, 2) for p in plans.values())


def test_fold_is_the_unselected_modules_in_the_frozen_weight():
    am, m, state, plans = _setup([2, 4])
    plans[0].extra[SLOTS] = [1, 3]
    pay = m.client_payload(state, plans[0])
    a, b, w0 = state.tensors[A0], state.tensors[B0], state.tensors[W0]
    s = ALPHA / 4
    folded = w0 + s * (torch.outer(b[:, 0], a[0]) + torch.outer(b[:, 2], a[2]))  # modules 0 and 2 folded
    assert torch.allclose(pay[W0], folded, atol=1e-6)
    assert torch.equal(pay[A0], a[[1, 3]]) and torch.equal(pay[B0], b[:, [1, 3]])
    assert base_key(M) not in m.client_payload(state, plans[1])  # full rank: nothing folded, W0 is its own


def test_client_starts_exactly_at_the_global_model():
    """Loaded into the client's rank-2 peft adapter (alpha 8 * 2 / 4) over the folded
    weights, the client's forward is the global rank-4 model's."""
    am, m, state, plans = _setup([2, 4])
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    am.load({k: v for k, v in state.tensors.items() if k not in m.base_weights_needed()})
    with torch.no_grad():
        glob = am.model(x)
    name = adapter_for(am, plans[0])
    pay = m.client_payload(state, plans[0])
    with am.use_adapter(name), am.base_overlay(pay), torch.no_grad():
        am.load(pay, name)
        local = am.model(x)
    assert torch.allclose(local, glob, atol=1e-5)


def _update(m, plan, n, value, head=0.0):
    r = len(plan.extra[SLOTS])
    t = {"head.weight": torch.full((3, 4), head), "head.bias": torch.full((3,), head)}
    for mod in m.modules:
        t[mod + ".lora_A.weight"] = torch.full((r, 4), value)
        t[mod + ".lora_B.weight"] = torch.full((4, r), -value)
    return ClientUpdate(plan.client, t, n, plan)


def test_each_module_is_averaged_over_the_clients_that_trained_it():
    am, m, state, plans = _setup([2, 1, 4])
    plans[0].extra[SLOTS], plans[1].extra[SLOTS] = [0, 2], [2]
    ups = [_update(m, plans[0], 1, 1.0, head=1.0), _update(m, plans[1], 3, 5.0, head=5.0),
           _update(m, plans[2], 6, 2.0, head=2.0)]
    new = m.aggregate(state, ups).tensors
    a = new[A0]
    assert torch.allclose(a[0], torch.full((4,), (1.0 * 1 + 2.0 * 6) / 7))  # clients 0 and 2
    assert torch.allclose(a[1], torch.full((4,), 2.0))  # client 2 alone
    assert torch.allclose(a[2], torch.full((4,), (1.0 * 1 + 5.0 * 3 + 2.0 * 6) / 10))  # all three
    assert torch.allclose(new[B0][:, 2], torch.full((4,), -(1.0 * 1 + 5.0 * 3 + 2.0 * 6) / 10))
    assert torch.allclose(new["head.bias"], torch.full((3,), (1.0 * 1 + 5.0 * 3 + 2.0 * 6) / 10))
    assert torch.equal(new[W0], state.tensors[W0])  # W0 never changes
    only = m.aggregate(state, ups[:2]).tensors
    assert torch.equal(only[A0][1], state.tensors[A0][1]) and torch.equal(only[A0][3], state.tensors[A0][3])


def test_traffic_counts_all_r_modules_down_and_the_selected_up():
    am, m, state, plans = _setup([1, 4])
    head = 4 * (3 * 4 + 3)
    for c, r in ((0, 1), (1, 4)):
        pay = m.client_payload(state, plans[c])
        up = _update(m, plans[c], 1, 1.0).tensors
        t = m.traffic(plans[c], pay, up)
        assert t.down_bytes == 4 * 3 * 4 * (4 + 4) + head  # 3 modules x R (d_in + d_out) floats + head
        assert t.up_bytes == 4 * 3 * r * (4 + 4) + head
        assert t.down_variants[m.SENT_LABEL] == tensor_bytes(pay)
    assert m.traffic(plans[0], m.client_payload(state, plans[0]), {}).down_variants[m.SENT_LABEL] == \
        4 * (3 * (4 * 4 + 1 * (4 + 4))) + head  # dense folded weights + the rank-1 factors


def test_layer_budget_trains_whole_layers_and_averages_over_their_trainers():
    am, m, state, plans = _setup([1, 16], budget="layers", layers=1)  # tier ranks unused
    assert all(len(p.train_layers) == 1 and p.rank == 4 and p.extra[SLOTS] == [0, 1, 2, 3] for p in plans.values())
    assert base_key(M) not in m.client_payload(state, plans[0])
    ups = []
    for c, p in plans.items():
        keys = m.upload_keys(p)
        ups.append(ClientUpdate(c, {k: torch.full_like(state.tensors[k], float(c + 1)) for k in keys}, 1, p))
    new = m.aggregate(state, ups).tensors
    for j in range(3):
        owners = [c for c, p in plans.items() if j in p.train_layers]
        a = f"blocks.{j}.fc.lora_A.weight"
        want = torch.full((4, 4), sum(c + 1.0 for c in owners) / len(owners)) if owners else state.tensors[a]
        assert torch.equal(new[a], want)


def test_full_rank_clients_reproduce_fedit_bit_for_bit(tmp_path):
    """Every tier at R: the same run as fedavg (FedIT), curve for curve."""
    run = dict(rounds=2, clients=4, per_round=3, roc="1:1:1", tier_ranks=[8, 8, 8], seed=0, out=str(tmp_path),
               eval_initial=True, measure_flops=False)
    lora = dict(lora_r=8, lora_alpha=16.0)
    task = SMALL_TASK_CONFIGS["tiny_text"]
    ref, _ = Experiment("fedavg", "tiny_text", run, lora, task).run()
    got, _ = Experiment("fed_plora", "tiny_text", run, lora, task).run()
    assert ref["status"] == got["status"] == "ok"
    assert got["results"]["curve"] == ref["results"]["curve"]
    assert got["results"]["final"] == ref["results"]["final"]
    assert got["cost"]["traffic_mb_per_client_round"] == ref["cost"]["traffic_mb_per_client_round"]
