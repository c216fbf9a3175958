"""fedavg / all_small / straggler / exclusive: plans and aggregation."""

import numpy as np
import torch

from fedbench.methods.base import ClientProfile, ClientUpdate, MethodContext, MethodState, Traffic
from fedbench.methods.baselines import AllSmall, Exclusive, FedAvg, Straggler, StragglerConfig

L = 12
LAYER_KEYS = {j: [f"l{j}.A"] for j in range(L)}


def ctx(budgets):
    profiles = {i: ClientProfile(i, t, c, 1, 10 * (i + 1)) for i, (t, c) in enumerate(budgets)}
    return MethodContext(L, LAYER_KEYS, ["head"], profiles, 2, 2.0)


TIERS = [(0, 6), (1, 9), (2, 12)]


def plans(cls, cfg=None):
    c = ctx(TIERS)
    m = cls(cfg or cls.config_cls(), c)
    return m, m.plan(1, list(c.profiles.values()), None, np.random.default_rng(0))


def test_fedavg_everyone_trains_everything_and_averages_by_examples():
    m, ps = plans(FedAvg)
    assert all(p.train_layers == tuple(range(L)) and p.blocks is None for p in ps.values())
    st = MethodState({"l0.A": torch.zeros(1), "head": torch.zeros(1)} | {f"l{j}.A": torch.zeros(1) for j in range(L)})
    ups = [ClientUpdate(i, {"l0.A": torch.tensor([float(i + 1)])}, 10 * (i + 1), ps[i]) for i in range(3)]
    new = m.aggregate(st, ups)
    assert torch.allclose(new.tensors["l0.A"], torch.tensor([(1 * 10 + 2 * 20 + 3 * 30) / 60]))


def test_default_traffic_is_the_payload_down_and_the_upload_up():
    m, ps = plans(FedAvg)
    payload = {"l0.A": torch.zeros(3, 4), "head": torch.zeros(5, dtype=torch.float16)}
    upload = {"l0.A": torch.zeros(3, 4, dtype=torch.float64)}
    assert m.traffic(ps[0], payload, upload) == Traffic(3 * 4 * 4 + 5 * 2, 3 * 4 * 8, {})


def test_straggler_authors_alternate_layers():
    _, ps = plans(Straggler)
    assert all(p.train_layers == (0, 2, 4, 6, 8, 10) for p in ps.values())
    _, ps = plans(Straggler, StragglerConfig(layers="first"))
    assert ps[2].train_layers == tuple(range(6))


def test_exclusive_only_full_capacity_clients_train():
    _, ps = plans(Exclusive)
    assert [ps[i].skip for i in range(3)] == [True, True, False]


def test_all_small_cuts_model_to_smallest_depth():
    m, ps = plans(AllSmall)
    assert all(p.blocks == tuple(range(6)) == p.train_layers for p in ps.values())
    assert m.eval_blocks(None) == tuple(range(6))
