"""FedEx-LoRA: the aggregate is exact (non-symmetric, non-square factors), the residual
is not transposed, and a client that sat out receives (and pays for) what it missed."""

import numpy as np
import torch

from fedbench.methods import METHODS
from fedbench.methods.aggregation import exact_lora_mean
from fedbench.methods.base import ClientUpdate, MethodState
from fedbench.methods.fedex_lora import MISSED, FedExLoRA, FedExLoRAConfig
from helpers import method_setup

M = "blocks.0.fc"
A0, B0, W0 = M + ".lora_A.weight", M + ".lora_B.weight", M + ".base_layer.weight"
ALPHA, R = 8.0, 4
S = ALPHA / R


def test_exact_lora_mean_by_hand_on_non_square_factors():
    g = torch.Generator().manual_seed(0)
    parts = [(torch.randn(2, 5, generator=g), torch.randn(3, 2, generator=g)) for _ in range(3)]  # A (2,5), B (3,2)
    w = [1.0, 2.0, 5.0]
    a_bar, b_bar, res = exact_lora_mean(parts, w)
    (a1, b1), (a2, b2), (a3, b3) = parts
    assert torch.allclose(a_bar, (1 * a1 + 2 * a2 + 5 * a3) / 8)
    assert torch.allclose(b_bar, (1 * b1 + 2 * b2 + 5 * b3) / 8)
    assert torch.allclose(res, (1 * b1 @ a1 + 2 * b2 @ a2 + 5 * b3 @ a3) / 8 - b_bar @ a_bar, atol=1e-6)
    assert res.shape == (3, 5)  # oriented like the weight (d_out, d_in): no transpose
    w0 = torch.randn(3, 5, generator=g)
    mean_weight = (1 * (w0 + S * b1 @ a1) + 2 * (w0 + S * b2 @ a2) + 5 * (w0 + S * b3 @ a3)) / 8
    assert torch.allclose(w0 + S * res + S * b_bar @ a_bar, mean_weight, atol=1e-5)


def _setup(n_clients=3, **kw):
    s = method_setup(FedExLoRA, [(0, 3, R)] * n_clients, FedExLoRAConfig(lora_r=R, lora_alpha=ALPHA, **kw), base=True,
                     plan_round=None, r=R, alpha=ALPHA)
    return s.am, s.m, s.state


def _round(m, state, clients, rnd, sizes=None):
    profiles = [m.ctx.profiles[c] for c in clients]
    plans = m.plan(rnd, profiles, state, np.random.default_rng(rnd))
    g = torch.Generator().manual_seed(rnd)
    ups = []
    for c in clients:
        t = {k: v + torch.randn(v.shape, generator=g) for k, v in m.client_payload(state, plans[c]).items()
             if k in set(m.upload_keys(plans[c]))}
        ups.append(ClientUpdate(c, t, (sizes or {}).get(c, 10), plans[c]))
    return plans, ups


def test_global_model_is_the_mean_of_the_clients_models():
    """Non-symmetric random factors: W0' + s B_bar A_bar = mean_k (W0 + s B_k A_k); with the
    residual transposed, or left out, it is not."""
    for weighting, sizes in (("uniform", None), ("examples", {0: 1, 1: 2, 2: 7})):
        am, m, state = _setup(weighting=weighting)
        plans, ups = _round(m, state, [0, 1, 2], 1, sizes)
        p = [1 / 3] * 3 if weighting == "uniform" else [1 / 10, 2 / 10, 7 / 10]
        w0 = state.tensors[W0]
        want = sum(pk * (w0 + S * u.tensors[B0] @ u.tensors[A0]) for pk, u in zip(p, ups))
        new = m.aggregate(state, ups).tensors
        got = new[W0] + S * new[B0] @ new[A0]
        assert torch.allclose(got, want, atol=1e-5)
        res = (new[W0] - w0) / S
        assert not torch.allclose(res, res.T, atol=1e-3)  # non-symmetric: a transpose would be caught
        assert new[W0].dtype == torch.float32
        assert torch.allclose(new["head.bias"], sum(pk * u.tensors["head.bias"] for pk, u in zip(p, ups)))


def test_a_client_that_sat_out_receives_and_pays_for_every_missed_residual():
    am, m, state = _setup(n_clients=3)
    plans, ups = _round(m, state, [0, 1, 2], 1)  # round 1: three clients
    assert plans[0].extra[MISSED] == []
    state = m.aggregate(state, ups)
    plans, ups = _round(m, state, [1, 2], 2)  # round 2: client 0 sits out
    assert plans[1].extra[MISSED] == [3]
    state = m.aggregate(state, ups)
    plans, _ = _round(m, state, [0, 1], 3)
    assert plans[0].extra[MISSED] == [3, 2] and plans[1].extra[MISSED] == [2]
    pay = m.client_payload(state, plans[0])
    assert torch.equal(pay[W0], state.tensors[W0])  # W0^3 holds both residuals
    adapter = 4 * (3 * R * (4 + 4) + 3 * 4 + 3)  # 3 modules x (A + B) + head
    t0 = m.traffic(plans[0], pay, {})
    assert t0.down_bytes == adapter + 4 * 3 * (3 * R + 2 * R) * (4 + 4)  # N_t r (d_in + d_out), rounds 1 and 2
    assert t0.down_variants[m.FACTORED_LABEL] == t0.down_bytes
    assert t0.down_variants[m.DENSE_LABEL] == adapter + 4 * 3 * 4 * 4  # one dense 4 x 4 per module
    t1 = m.traffic(plans[1], m.client_payload(state, plans[1]), {})
    assert t1.down_bytes == adapter + 4 * 3 * 2 * R * (4 + 4)


def test_registered_trains_everything_every_layer():
    assert METHODS.get("fedex_lora") is FedExLoRA
    am, m, state = _setup()
    plans, _ = _round(m, state, [0, 1, 2], 1)
    assert set(m.upload_keys(plans[0])) == set(am.all_keys)
    assert set(m.client_payload(state, plans[0])) == set(am.all_keys) | set(m.base_weights_needed())
    assert isinstance(m.aggregate(state, []), MethodState)
