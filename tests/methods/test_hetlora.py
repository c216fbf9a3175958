"""HETLoRA: truncation, zero-padded per-component aggregation, the regulariser, scaling."""

import numpy as np
import pytest
import torch

from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, MethodState
from fedbench.methods.hetlora import HetLoRA, HetLoRAConfig
from fedbench.runners.executors.train import adapter_for
from helpers import method_setup, plain_state

A0, B0 = "blocks.0.fc.lora_A.weight", "blocks.0.fc.lora_B.weight"


def _method(am, ctx, **kw):
    return HetLoRA(HetLoRAConfig(lora_r=am.r, lora_alpha=am.alpha, **kw), ctx)


def _const_update(m, plan, n, a, b, d=4):
    """Every module's A = a (r_i, d), B = b (d, r_i); the head (3, d) and (3,) = a."""
    t = {"head.weight": torch.full((3, d), float(a)), "head.bias": torch.full((3,), float(a))}
    for mod in m.modules:
        t[mod + ".lora_A.weight"] = torch.full((plan.rank, d), float(a))
        t[mod + ".lora_B.weight"] = torch.full((d, plan.rank), float(b))
    return ClientUpdate(plan.client, t, n, plan)


def _setup(ranks, **kw):
    return method_setup(HetLoRA, [(t, 3, r) for t, r in enumerate(ranks)],
                        HetLoRAConfig(lora_r=4, lora_alpha=8.0, **kw), state=plain_state)


def test_registered_and_plans_all_layers_at_tier_rank():
    assert METHODS.get("hetlora") is HetLoRA
    am, m, state, plans = _setup([1, 2, 4])
    assert [plans[i].rank for i in range(3)] == [1, 2, 4]
    assert all(p.train_layers == (0, 1, 2) and p.blocks is None for p in plans.values())
    # alpha_i = alpha r_i / r_max: every client scales by alpha / r_max = 8 / 4
    assert plans[0].lora_alpha == 8.0 * 1 / 4 and plans[1].lora_alpha == 8.0 * 2 / 4
    assert "lora_alpha" not in plans[2].extra  # the global rank uses the default adapter


def test_payload_is_the_leading_components():
    am, m, state, plans = _setup([1, 2, 4])
    pay = m.client_payload(state, plans[1])
    assert torch.equal(pay[A0], state.tensors[A0][:2]) and pay[A0].shape == (2, 4)
    assert torch.equal(pay[B0], state.tensors[B0][:, :2]) and pay[B0].shape == (4, 2)
    assert set(m.ctx.head_keys) <= set(pay)


def test_equal_ranks_is_fedavg_of_a_and_b():
    am, m, state, plans = _setup([4, 4], aggregation="examples")
    ups = [_const_update(m, plans[0], 1, 1.0, 3.0), _const_update(m, plans[1], 3, 5.0, 7.0)]
    new = m.aggregate(state, ups).tensors
    assert torch.allclose(new[A0], torch.full((4, 4), (1 * 1.0 + 3 * 5.0) / 4))
    assert torch.allclose(new[B0], torch.full((4, 4), (1 * 3.0 + 3 * 7.0) / 4))
    assert torch.allclose(new["head.weight"], torch.full((3, 4), (1 * 1.0 + 3 * 5.0) / 4))


def test_each_component_averaged_over_the_clients_that_had_it():
    am, m, state, plans = _setup([1, 2, 4], aggregation="examples")
    ups = [_const_update(m, plans[0], 1, 1.0, 10.0), _const_update(m, plans[1], 2, 2.0, 20.0),
           _const_update(m, plans[2], 3, 4.0, 40.0)]
    new = m.aggregate(state, ups).tensors
    a, b = new[A0], new[B0]
    assert torch.allclose(a[0], torch.full((4,), (1 * 1.0 + 2 * 2.0 + 3 * 4.0) / (1 + 2 + 3)))
    assert torch.allclose(a[1], torch.full((4,), (2 * 2.0 + 3 * 4.0) / (2 + 3)))
    assert torch.allclose(a[2:], torch.full((2, 4), 4.0))
    assert torch.allclose(b[:, 0], torch.full((4,), (1 * 10.0 + 2 * 20.0 + 3 * 40.0) / 6))
    assert torch.allclose(b[:, 1], torch.full((4,), (2 * 20.0 + 3 * 40.0) / 5))
    assert torch.allclose(b[:, 2:], torch.full((4, 2), 40.0))


def test_components_nobody_had_keep_their_value():
    am, m, state, plans = _setup([1, 2], aggregation="examples")
    ups = [_const_update(m, plans[0], 1, 1.0, 1.0), _const_update(m, plans[1], 1, 3.0, 3.0)]
    new = m.aggregate(state, ups).tensors
    assert torch.equal(new[A0][2:], state.tensors[A0][2:])
    assert torch.equal(new[B0][:, 2:], state.tensors[B0][:, 2:])
    assert torch.allclose(new[A0][1], torch.full((4,), 3.0))


def test_defaults_are_the_papers_sparsity_weighting_and_self_pruning():
    cfg = HetLoRAConfig()
    assert cfg.aggregation == "sparsity" and cfg.prune and cfg.reg_lambda > 0
    assert HetLoRAConfig(aggregation="examples", prune=False).aggregation == "examples"  # the others are options


def test_sparsity_weights_are_frobenius_norms_of_b_a():
    am, m, state, plans = _setup([1, 1], aggregation="sparsity")
    # B_i A_i = a_i b_i * ones(4, 4): ||.||_F = 4 a_i b_i -> weights 4 and 8 (examples ignored)
    ups = [_const_update(m, plans[0], 100, 1.0, 1.0), _const_update(m, plans[1], 1, 2.0, 1.0)]
    new = m.aggregate(state, ups).tensors
    assert torch.allclose(new[A0][0], torch.full((4,), (4 * 1.0 + 8 * 2.0) / (4 + 8)))
    assert torch.allclose(new[B0][:, 0], torch.full((4,), (4 * 1.0 + 8 * 1.0) / (4 + 8)))


def test_regulariser_on_live_parameters_has_a_gradient():
    am, m, state, plans = _setup([4], reg_lambda=0.5, reg_gamma=0.5)
    plan = plans[0]  # rank 4, tail = components 2, 3
    torch.manual_seed(1)
    with am.use_adapter(adapter_for(am, plan)):
        am.load({k: torch.randn_like(v) for k, v in state.tensors.items() if "lora_" in k})
        am.set_trainable(m.ctx.all_keys)
        reg = m.local_loss(am.model, None, None, plan)
        reg.backward()
        a, b = am.param(A0), am.param(B0)
        expect = 0.5 * sum(am.param(k + ".lora_A.weight")[2:].norm() * am.param(k + ".lora_B.weight")[:, 2:].norm()
                           for k in m.modules)
        assert torch.allclose(reg, expect)
        # d/dA_tail of 0.5 ||A_t|| ||B_t|| = 0.5 ||B_t|| A_t / ||A_t||; leading components untouched
        assert torch.allclose(a.grad[2:], 0.5 * b[:, 2:].norm() * a[2:] / a[2:].norm(), atol=1e-6)
        assert torch.count_nonzero(a.grad[:2]) == 0 and torch.count_nonzero(b.grad[:, :2]) == 0
        assert torch.count_nonzero(b.grad[:, 2:]) > 0


def test_regulariser_off_when_lambda_zero_or_nothing_to_prune():
    am, m, state, plans = _setup([1, 4], reg_lambda=0.0)
    assert m.local_loss(am.model, None, None, plans[1]) is None
    am, m, state, plans = _setup([1, 4])
    assert m.local_loss(am.model, None, None, plans[0]) is None  # rank 1: t = max(1, 0) = 1 = r


def test_client_scaling_matches_the_global_model():
    """The leading r_i components act on a client exactly as in the global model: peft's
    delta of the client's rank-2 adapter = the global adapter's delta with components 2..
    zeroed = (alpha / r_max) B[:, :2] A[:2]. A client alpha of 8 (scaling 8/2) fails."""
    am, m, state, plans = _setup([2])
    torch.manual_seed(2)
    st = {k: torch.randn_like(v) for k, v in state.tensors.items()}
    pay = m.client_payload(MethodState(st), plans[0])
    name = adapter_for(am, plans[0])
    am.load(pay, name)
    layer = am.model.blocks[0].fc
    client = layer.get_delta_weight(name)
    trunc = {A0: st[A0].clone(), B0: st[B0].clone()}
    trunc[A0][2:] = 0
    trunc[B0][:, 2:] = 0
    am.load(trunc, "default")
    assert torch.allclose(client, layer.get_delta_weight("default"), atol=1e-6)
    assert torch.allclose(client, (8.0 / 4) * st[B0][:, :2] @ st[A0][:2], atol=1e-6)


def test_self_pruning_lowers_the_rank_of_a_client_whose_tail_shrank():
    am, m, state, plans = _setup([4, 4], reg_gamma=0.5, prune=True)
    st = dict(state.tensors)
    for mod in m.modules:
        st[mod + ".lora_B.weight"] = torch.ones(4, 4)
    state = MethodState(st)
    shrunk = _const_update(m, plans[0], 1, 0.0, 0.0)  # tail norm 0 < the one it received
    grown = _const_update(m, plans[1], 1, 9.0, 9.0)
    new = m.aggregate(state, [shrunk, grown])
    assert new.extra["ranks"] == {"0": 2}
    again = m.plan(2, list(m.ctx.profiles.values()), new, np.random.default_rng(0))
    assert again[0].rank == 2 and again[1].rank == 4


def test_rank_above_global_rank_is_an_error(tiny_am, ctx_for):
    am = tiny_am(r=4)
    with pytest.raises(UserError, match="lora_r"):
        _method(am, ctx_for(am, [(0, 3, 16)]))
    with pytest.raises(ValueError):
        HetLoRAConfig(reg_gamma=0.0)
