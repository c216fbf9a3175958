"""InclusiveFL: prefix plans, per-layer owner averaging, momentum distillation from the
current round's upper-block update, every round."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, MethodState
from fedbench.methods.depth_hetero import MOMENTUM, InclusiveFL, InclusiveFLConfig
from helpers import method_setup

BETA = 0.2


def _setup(depths=(2, 4)):
    s = method_setup(InclusiveFL, [(t, d, 4) for t, d in enumerate(depths)], InclusiveFLConfig(beta=BETA),
                     state=lambda m, t: MethodState({k: torch.zeros_like(v) for k, v in t.items()}), n_blocks=4)
    return s.m, s.state, s.plans


def _update(m, plan, n, values):
    """Block j's LoRA tensors = values[j] everywhere; the head = 1."""
    t = {k: torch.full((3, 4) if k.endswith("weight") else (3,), 1.0) for k in m.ctx.head_keys}
    for j in plan.train_layers:
        for k in m.ctx.layer_keys[j]:
            t[k] = torch.full((4, 4), float(values[j]))
    return ClientUpdate(plan.client, t, n, plan)


def _a(state, j):
    return state.tensors[f"blocks.{j}.fc.lora_A.weight"]


def test_prefix_plans():
    assert METHODS.get("inclusivefl") is InclusiveFL
    m, state, plans = _setup()
    assert plans[0].blocks == (0, 1) and plans[0].train_layers == (0, 1) and plans[0].train_head
    assert plans[1].blocks == (0, 1, 2, 3)
    assert m.levels == [2, 4]
    pay = m.client_payload(state, plans[0])
    assert not any(k.startswith("blocks.2") for k in pay) and "head.weight" in pay


def test_layers_averaged_over_owners_and_momentum_from_this_rounds_update():
    m, s0, plans = _setup()
    small = lambda: _update(m, plans[0], 1, {0: 1.0, 1: 1.0})
    # round 1: the top block of the small model (block 1) = owner mean + beta * the mean of
    # this round's upper-block (2, 3) updates (from 0: 5 and 9)
    s1 = m.aggregate(s0, [small(), _update(m, plans[1], 3, {0: 3.0, 1: 3.0, 2: 5.0, 3: 9.0})])
    assert torch.allclose(_a(s1, 1), torch.full((4, 4), (1 * 1.0 + 3 * 3.0) / 4 + BETA * (5.0 + 9.0) / 2))
    assert torch.allclose(_a(s1, 2), torch.full((4, 4), 5.0))  # only the large client has it
    assert torch.allclose(_a(s1, 0), torch.full((4, 4), 2.5))  # other blocks: plain owner mean
    assert torch.allclose(s1.tensors[MOMENTUM + "blocks.1.fc.lora_A.weight"], torch.full((4, 4), (5.0 + 9.0) / 2))
    # round 2: this round's upper updates ((6 - 5) + (11 - 9)) / 2, not last round's
    s2 = m.aggregate(s1, [small(), _update(m, plans[1], 3, {0: 3.0, 1: 3.0, 2: 6.0, 3: 11.0})])
    assert torch.allclose(_a(s2, 1), torch.full((4, 4), 2.5 + BETA * ((6.0 - 5.0) + (11.0 - 9.0)) / 2))
    assert set(m.eval_tensors(s2)) == set(s0.tensors)  # buffers are not model tensors


def test_no_larger_client_sampled_gives_an_empty_buffer():
    m, s0, plans = _setup()
    s1 = m.aggregate(s0, [_update(m, plans[0], 1, {0: 1.0, 1: 1.0})])
    assert torch.count_nonzero(s1.tensors[MOMENTUM + "blocks.1.fc.lora_A.weight"]) == 0
    assert torch.equal(_a(s1, 2), _a(s0, 2))


def test_beta_zero_is_plain_per_layer_fedavg():
    m, s0, plans = _setup()
    m0 = InclusiveFL(InclusiveFLConfig(beta=0.0), m.ctx)
    ups = [_update(m, plans[0], 1, {0: 1.0, 1: 1.0}), _update(m, plans[1], 3, {0: 3.0, 1: 3.0, 2: 5.0, 3: 9.0})]
    s2 = m0.aggregate(m0.aggregate(s0, ups), ups)
    assert torch.allclose(_a(s2, 1), torch.full((4, 4), 2.5)) and not any(k.startswith(MOMENTUM) for k in s2.tensors)
