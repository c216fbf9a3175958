"""raFLoRA and HLoRA: the rank-partition weights by hand, SVD redistribution, and the rank
collapse of HLoRA's rank-agnostic weights that raFLoRA avoids."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.aggregation import balanced_factors, rank_partition_update
from fedbench.methods.base import ClientUpdate
from fedbench.methods.raflora import HLoRA, HLoRAConfig, RaFLoRA, RaFLoRAConfig
from fedbench.runners.executors.train import adapter_for
from helpers import method_setup

M = "blocks.0.fc"
A0, B0 = M + ".lora_A.weight", M + ".lora_B.weight"
ALPHA = 8.0
S = ALPHA / 4  # every client's scaling: alpha r_k / r_max / r_k


def _setup(ranks, cls=RaFLoRA, cfg=RaFLoRAConfig):
    return method_setup(cls, [(t, 3, r) for t, r in enumerate(ranks)], cfg(lora_r=4, lora_alpha=ALPHA), alpha=ALPHA)


def _random_updates(m, state, plans, sizes, clients=None):
    g = torch.Generator().manual_seed(3)
    ups = []
    for c in clients if clients is not None else range(len(sizes)):
        r = plans[c].rank
        t = {k: state.tensors[k] + 1.0 for k in m.ctx.head_keys}
        for mod in m.modules:
            t[mod + ".lora_A.weight"] = torch.randn(r, 4, generator=g)
            t[mod + ".lora_B.weight"] = torch.randn(4, r, generator=g)
        ups.append(ClientUpdate(c, t, sizes[c], plans[c]))
    return ups


def _slice(u, lo, hi):
    """s B_k[:, lo:hi] A_k[lo:hi] of module M."""
    return S * u.tensors[B0][:, lo:hi] @ u.tensors[A0][lo:hi]


def test_registered_with_one_scaling_for_every_rank():
    assert METHODS.get("raflora") is RaFLoRA and METHODS.get("hlora") is HLoRA
    am, m, state, plans = _setup([1, 2, 4])
    assert [plans[c].lora_alpha for c in range(3)] == [ALPHA * 1 / 4, ALPHA * 2 / 4, None]
    assert HLoRAConfig().partition_weights is False and RaFLoRAConfig().partition_weights is True


def test_raflora_weights_each_rank_partition_by_the_clients_that_cover_it():
    am, m, state, plans = _setup([1, 2, 4])
    u0, u1, u2 = ups = _random_updates(m, state, plans, [1, 2, 3])  # ranks 1, 2, 4; n = 1, 2, 3
    want = ((1 * _slice(u0, 0, 1) + 2 * _slice(u1, 0, 1) + 3 * _slice(u2, 0, 1)) / 6  # (0, 1]: everyone
            + (2 * _slice(u1, 1, 2) + 3 * _slice(u2, 1, 2)) / 5  # (1, 2]: ranks 2 and 4
            + 3 * _slice(u2, 2, 4) / 3)  # (2, 4]: rank 4 alone
    new = m.aggregate(state, ups)
    assert torch.allclose(S * new.tensors[B0] @ new.tensors[A0], want, atol=1e-5)  # rank <= 4: exact
    u, sv, vh = torch.linalg.svd(want)
    pay = m.client_payload(new, plans[1])  # the rank-2 client gets the best rank-2 approximation
    assert torch.allclose(S * pay[B0] @ pay[A0], u[:, :2] * sv[:2] @ vh[:2], atol=1e-5)
    assert torch.allclose(new.tensors["head.bias"], state.tensors["head.bias"] + 1.0)


def test_hlora_weights_every_partition_by_all_clients():
    am, m, state, plans = _setup([1, 2, 4], HLoRA, HLoRAConfig)
    u0, u1, u2 = ups = _random_updates(m, state, plans, [1, 2, 3])
    want = (1 * _slice(u0, 0, 1) + 2 * _slice(u1, 0, 2) + 3 * _slice(u2, 0, 4)) / 6  # sum_k n_k/n s B_k A_k
    new = m.aggregate(state, ups)
    assert torch.allclose(S * new.tensors[B0] @ new.tensors[A0], want, atol=1e-5)


def test_levels_come_from_the_federation_and_an_uncovered_partition_keeps_its_slice():
    am, m, state, plans = _setup([1, 2, 4])
    g = torch.Generator().manual_seed(5)
    for mod in m.modules:  # a global model with something in every component
        state.tensors[mod + ".lora_A.weight"] = torch.randn(4, 4, generator=g)
        state.tensors[mod + ".lora_B.weight"] = torch.randn(4, 4, generator=g)
    u0, u1 = ups = _random_updates(m, state, plans, [1, 2, 3], clients=[0, 1])  # no rank-4 client this round
    assert m.levels(ups) == [1, 2, 4]
    old = S * state.tensors[B0][:, 2:4] @ state.tensors[A0][2:4]
    want = (1 * _slice(u0, 0, 1) + 2 * _slice(u1, 0, 1)) / 3 + _slice(u1, 1, 2) + old
    new = m.aggregate(state, ups)
    assert torch.allclose(S * new.tensors[B0] @ new.tensors[A0], want, atol=1e-5)


def _echo(m, state, plans, sizes):
    """Clients that send back exactly what they received (no training)."""
    return [ClientUpdate(c, m.client_payload(state, plans[c]), n, plans[c]) for c, n in enumerate(sizes)]


def test_hlora_collapses_the_upper_ranks_and_raflora_does_not():
    """A round in which nobody learns: raFLoRA's global model is a fixed point, HLoRA's
    partition (rho_{h-1}, rho_h] shrinks by N_h / N (here 5/6 and 3/6) every round."""
    for cls, cfg in ((RaFLoRA, RaFLoRAConfig), (HLoRA, HLoRAConfig)):
        am, m, state, plans = _setup([1, 2, 4], cls, cfg)
        for mod in m.modules:
            delta = torch.diag(torch.tensor([8.0, 4.0, 2.0, 1.0]))  # distinct singular values
            state.tensors[mod + ".lora_A.weight"], state.tensors[mod + ".lora_B.weight"] = balanced_factors(delta, 4, S)
        new = m.aggregate(state, _echo(m, state, plans, [1, 2, 3]))
        got = torch.linalg.svdvals(S * new.tensors[B0] @ new.tensors[A0])
        if cls is RaFLoRA:
            assert torch.allclose(got, torch.tensor([8.0, 4.0, 2.0, 1.0]), atol=1e-5)
        else:
            assert torch.allclose(got, torch.tensor([8.0, 4.0 * 5 / 6, 2.0 * 3 / 6, 1.0 * 3 / 6]), atol=1e-5)


def test_rank_partition_update_by_hand():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # rank 2: A = I, B = 2 I
    b = 2 * torch.eye(2)
    a1, b1 = torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0], [0.0]])  # rank 1
    out = rank_partition_update([(a, b), (a1, b1)], [3.0, 1.0], [1, 2], scaling=0.5)
    first = (3 * 0.5 * torch.outer(b[:, 0], a[0]) + 1 * 0.5 * torch.outer(b1[:, 0], a1[0])) / 4
    second = 3 * 0.5 * torch.outer(b[:, 1], a[1]) / 3
    assert torch.equal(out, first + second)
    agnostic = rank_partition_update([(a, b), (a1, b1)], [3.0, 1.0], [1, 2], scaling=0.5, partition_weights=False)
    assert torch.equal(agnostic, first + 3 * 0.5 * torch.outer(b[:, 1], a[1]) / 4)


def test_client_adapter_applies_the_server_scaling():
    am, m, state, plans = _setup([1, 2, 4])
    new = m.aggregate(state, _random_updates(m, state, plans, [1, 2, 3]))
    name = adapter_for(am, plans[1])
    pay = m.client_payload(new, plans[1])
    am.load(pay, name)
    assert torch.allclose(am.model.blocks[0].fc.get_delta_weight(name), S * pay[B0] @ pay[A0], atol=1e-6)
