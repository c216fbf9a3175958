"""FedHL: the full-rank merge (hand check: ranks 1 and 2, weights 0.25 / 0.75, each client's
own scaling), the float32 global weight, a client's first forward = the global model, the
weight rule and the record's note of it."""

import numpy as np
import pytest
import torch

from fedbench.methods import METHODS
from fedbench.methods.aggregation_hetero import full_rank_merge
from fedbench.methods.fedhl import FedHL, FedHLConfig
from fedbench.methods.rank_hetero import base_key
from fedbench.runners.executors.train import adapter_for
from helpers import method_setup

M = "blocks.1.fc"
A1, B1, W1 = M + ".lora_A.weight", M + ".lora_B.weight", M + ".base_layer.weight"
ALPHA = 8.0  # s_k = alpha / r_k: 8 for rank 1, 4 for rank 2


def _setup(ranks, **cfg):
    return method_setup(FedHL, [(t, 3, r) for t, r in enumerate(ranks)], FedHLConfig(lora_r=4, lora_alpha=ALPHA, **cfg),
                        base=True, alpha=ALPHA)


def test_merge_is_the_weighted_sum_of_each_clients_own_product(rank_updates):
    """Ranks 1 and 2, n = (1, 3): w = (0.25, 0.75), W^{t+1} - W^t = 0.25 (8 / 1) B_1 A_1 +
    0.75 (8 / 2) B_2 A_2 (float32 tolerance); nothing is truncated (rank 3 of a 4 x 4 update)."""
    assert METHODS.get("fedhl") is FedHL
    am, m, state, plans = _setup([1, 2])
    assert [plans[c].rank for c in (0, 1)] == [1, 2]
    ups = rank_updates(m, state, plans, [1, 3])
    assert m.aggregation_weights(ups) == [0.25, 0.75]
    new = m.aggregate(state, ups)
    (a1, b1), (a2, b2) = [(u.tensors[A1], u.tensors[B1]) for u in ups]
    want = 0.25 * (ALPHA / 1) * b1 @ a1 + 0.75 * (ALPHA / 2) * b2 @ a2
    delta = new.tensors[W1] - state.tensors[W1]
    assert torch.allclose(delta, want, atol=1e-5)
    assert torch.linalg.matrix_rank(delta) == 3
    assert torch.count_nonzero(new.tensors[B1]) == 0  # the adapter stays empty: everything is in W


def test_uniform_weights_are_one_over_k(rank_updates):
    am, m, state, plans = _setup([1, 2], weights="uniform")
    ups = rank_updates(m, state, plans, [1, 3])
    assert m.aggregation_weights(ups) == [0.5, 0.5]
    (a1, b1), (a2, b2) = [(u.tensors[A1], u.tensors[B1]) for u in ups]
    delta = m.aggregate(state, ups).tensors[W1] - state.tensors[W1]
    assert torch.allclose(delta, 0.5 * 8 * b1 @ a1 + 0.5 * 4 * b2 @ a2, atol=1e-5)


def test_global_weight_is_float32_and_keeps_small_updates():
    """1 + 1e-3 is 1.0 in bfloat16 (8 bits of mantissa: its step at 1 is 2^-7); the merge keeps it."""
    w = torch.ones(2, 2, dtype=torch.bfloat16)
    a, b = torch.tensor([[1.0, 0.0]]), torch.tensor([[1e-3], [0.0]])
    out = full_rank_merge(w, [(a, b)], [1.0])
    assert out.dtype == torch.float32 and out[0, 0].item() == pytest.approx(1.0 + 1e-3)
    assert (w.float() + b @ a).to(torch.bfloat16)[0, 0].item() == 1.0


def test_clients_first_forward_is_the_global_model(rank_updates):
    """After a merge, client 1 (rank 2) loads its payload (W^t, fresh A, B = 0) into its own
    rank-2 adapter: its output equals the evaluated global model's."""
    am, m, state, plans = _setup([1, 2])
    new = m.aggregate(state, rank_updates(m, state, plans, [1, 3]))
    nxt = m.plan(2, list(m.ctx.profiles.values()), new, np.random.default_rng(1))
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), am.base_overlay(m.eval_tensors(new)):
        am.load(m.eval_tensors(new))
        glob = am.model(x)
    pay = m.client_payload(new, nxt[1])
    name = adapter_for(am, nxt[1])
    with torch.no_grad(), am.use_adapter(name), am.base_overlay(pay):
        am.load(pay, name)
        client = am.model(x)
    assert torch.allclose(client, glob, atol=1e-6)
    assert torch.count_nonzero(pay[B1]) == 0 and pay[A1].shape == (2, 4)
    assert not torch.equal(glob, am.model(x))  # outside the overlay: W0, not W^t


def test_the_record_says_which_weights_ran():
    m = _setup([1, 2])[1]
    assert m.layout()["fedhl_weights"].startswith("examples (variant: the paper's optimal aggregation weights")
    assert base_key(M) in m.base_weights_needed()
