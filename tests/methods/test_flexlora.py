"""FlexLoRA: averaged full-size update, SVD redistribution, scaling, exact evaluation."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate
from fedbench.methods.flexlora import FlexLoRA
from fedbench.methods.rank_hetero import AuthorsRuleConfig, base_key
from fedbench.methods.base import tensor_bytes
from fedbench.runners.executors.train import adapter_for
from helpers import method_setup

M = "blocks.0.fc"
A0, B0 = M + ".lora_A.weight", M + ".lora_B.weight"
ALPHA = 8.0


def _setup(ranks):
    return method_setup(FlexLoRA, [(t, 3, r) for t, r in enumerate(ranks)], AuthorsRuleConfig(lora_r=4, lora_alpha=ALPHA),
                        base=True, alpha=ALPHA)


def _random_updates(m, state, plans, sizes, seed=3):
    g = torch.Generator().manual_seed(seed)
    ups = []
    for c, n in enumerate(sizes):
        r = plans[c].rank
        t = {k: state.tensors[k] + 1.0 for k in m.ctx.head_keys}
        for mod in m.modules:
            t[mod + ".lora_A.weight"] = torch.randn(r, 4, generator=g)
            t[mod + ".lora_B.weight"] = torch.randn(4, r, generator=g)
        ups.append(ClientUpdate(c, t, n, plans[c]))
    return ups


def _expected_delta(ups):
    """sum_i p_i (alpha / r_i) B_i A_i for module M, written out."""
    total = sum(u.n_examples for u in ups)
    return sum((u.n_examples / total) * (ALPHA / u.plan.rank) * u.tensors[B0] @ u.tensors[A0] for u in ups)


def test_registered_and_first_round_sends_the_initial_lora():
    assert METHODS.get("flexlora") is FlexLoRA
    am, m, state, plans = _setup([1, 2, 4])
    pay = m.client_payload(state, plans[1])
    assert torch.equal(pay[A0], state.tensors[A0][:2]) and torch.count_nonzero(pay[B0]) == 0
    assert pay[B0].shape == (4, 2)
    # traffic: the rank-r_i factors only: 3 modules x r_i (d_in + d_out) floats + head (3x4 + 3)
    for c, r in enumerate([1, 2, 4]):
        assert tensor_bytes(m.client_payload(state, plans[c])) == 4 * (3 * r * (4 + 4) + 3 * 4 + 3)


def test_full_rank_client_gets_back_the_averaged_update():
    am, m, state, plans = _setup([1, 2, 4])
    ups = _random_updates(m, state, plans, [1, 2, 3])
    new = m.aggregate(state, ups)
    delta = _expected_delta(ups)
    assert torch.allclose(new.tensors[M + ".flexlora_delta"], delta, atol=1e-5)
    pay = m.client_payload(new, plans[2])  # rank 4 = full rank of a 4x4 update
    assert torch.allclose((ALPHA / 4) * pay[B0] @ pay[A0], delta, atol=1e-5)


def test_smaller_rank_gets_the_best_rank_r_approximation():
    am, m, state, plans = _setup([1, 2, 4])
    ups = _random_updates(m, state, plans, [1, 2, 3])
    new = m.aggregate(state, ups)
    delta = _expected_delta(ups)
    u, s, vh = torch.linalg.svd(delta)
    for c, r in [(0, 1), (1, 2)]:
        pay = m.client_payload(new, plans[c])
        got = (ALPHA / r) * pay[B0] @ pay[A0]
        assert torch.allclose(got, u[:, :r] @ torch.diag(s[:r]) @ vh[:r], atol=1e-5)
        assert torch.isclose(torch.linalg.norm(delta - got), s[r:].square().sum().sqrt(), atol=1e-5)


def test_peft_scaling_of_the_client_adapter_matches_the_server():
    """Loaded into the client's own rank-2 peft adapter, the payload's delta is the server's
    best rank-2 approximation (a server using alpha / r_max for the client would be off by 2x)."""
    am, m, state, plans = _setup([1, 2, 4])
    new = m.aggregate(state, _random_updates(m, state, plans, [1, 2, 3]))
    name = adapter_for(am, plans[1])
    am.load(m.client_payload(new, plans[1]), name)
    u, s, vh = torch.linalg.svd(new.tensors[M + ".flexlora_delta"])
    assert torch.allclose(am.model.blocks[0].fc.get_delta_weight(name), u[:, :2] * s[:2] @ vh[:2], atol=1e-5)


def test_head_is_example_weighted_and_eval_merges_the_exact_update():
    am, m, state, plans = _setup([1, 4])
    ups = _random_updates(m, state, plans, [1, 3])
    ups[1].tensors["head.bias"] = state.tensors["head.bias"] + 5.0
    new = m.aggregate(state, ups)
    assert torch.allclose(new.tensors["head.bias"], state.tensors["head.bias"] + (1 * 1.0 + 3 * 5.0) / 4)
    ev = m.eval_tensors(new)
    assert torch.allclose(ev[base_key(M)], state.tensors[base_key(M)] + _expected_delta(ups), atol=1e-5)
    assert torch.count_nonzero(ev[B0]) == 0  # the default adapter adds nothing on top
    assert not any(k.endswith("flexlora_delta") for k in ev)
