"""FedQuad (methods/fedquad.py) and activation quantisation (runners/executors/act_quant.py):
the hand checks of shared/docs/methods-2027.md Sec. 6, the meter counting packed bytes,
gradients through dequantised activations, plans under a memory model and the traffic on
the BERT-shaped twin.

Tried against the rules (2026-11-29): rounding by truncation instead of to nearest breaks
the half-step bound of ``test_round_trip_error_is_at_most_half_a_step``; taking the largest Q
of a depth instead of the least fails ``test_efficient_pairs_of_the_spec``; lowering the
fastest device instead of the slowest fails ``test_greedy_lowers_the_slowest_device``."""

import dataclasses

import numpy as np
import pytest
import torch
from fedbench.methods.base import ClientProfile, MemoryAPI
from fedbench.methods.fedquad import (
    DEPTH,
    QUANT,
    FedQuad,
    FedQuadConfig,
    efficient_pairs,
    greedy_depths,
    round_time,
)
from fedbench.runners.cost.meters import SavedTensorBytes, storage_ptrs
from fedbench.runners.executors.act_quant import dequantise, quantise, quantised_blocks
from fedbench.runners.executors.adapters import AdapterModel, method_context
from torch import nn
from traffic_twin import twin


def test_round_trip_error_is_at_most_half_a_step():
    """8-bit round trip: max error <= (max - min) / 255 / 2 (the spec's hand check)."""
    t = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3 + 1
    back = dequantise(quantise(t))
    bound = float(t.max() - t.min()) / 255 / 2
    assert float((back - t).abs().max()) <= bound * (1 + 1e-5)
    assert float((back - t).abs().max()) > bound / 4  # a real quantisation, not a copy
    assert quantise(t)[0].dtype == torch.uint8
    assert torch.equal(dequantise(quantise(torch.full((3,), 2.5))), torch.full((3,), 2.5))  # constant: exact


def test_spec_memory_example():
    """a = 100 MB per layer, D = 8, Q = 4, b = 8 (16-bit activations): 100 (8 - 4 (1 - 8/16)) = 600 MB
    against 800 MB unquantised."""
    act = lambda d, q: 100 * (d - q * (1 - 8 / 16))
    assert act(8, 4) == 600 and act(8, 0) == 800


def test_efficient_pairs_of_the_spec():
    """L = 12, budget 6a, cost a (D - Q / 2): D = 9 needs Q = 6 (9 - 3 = 6a); per depth the least Q,
    Q = 2 (D - 6) from D = 6 (Q = 0) to D = 12 (Q = 12); below 6 layers none is needed."""
    pairs = efficient_pairs(lambda d, q: d - q / 2, 12, 6)
    assert pairs[9] == 6
    assert pairs == {d: max(0, 2 * (d - 6)) for d in range(1, 13)}
    assert efficient_pairs(lambda d, q: d - q / 2, 12, 0.4) == {}  # nothing fits


def test_greedy_lowers_the_slowest_device():
    """L = 4, steps (10, 10, 40), every depth feasible: at D = 4 the times are 10 (1 + 2) = 30, 30 and
    40 (1 + 2) = 120; the third device goes shallower until D = 1, 40 (1 + 2 / 4) = 60, its last
    option, still over 1.2 x the median 30."""
    every = {d: 0 for d in range(1, 5)}
    assert round_time(40, 1, 4) == 40 * (1 + 2 * 1 / 4)
    assert greedy_depths([every] * 3, [10, 10, 40], 4, 1.2) == [4, 4, 1]
    # a device within the ratio keeps its depth: 10 (1 + 2) = 30 vs 12 (1 + 2) = 36 <= 1.2 x 30
    assert greedy_depths([every] * 2, [10, 12], 4, 1.2) == [4, 4]


class _Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def _net(d=6):
    torch.manual_seed(0)
    return nn.Sequential(_Block(d), _Block(d))


def test_meter_counts_packed_bytes_and_gradients_go_through():
    """Block 1 quantised: it saves its input (for fc's weight gradient) and tanh's output, each
    B d floats: 2 (B d 4) bytes unquantised, 2 (B d 1 + 4 + 4) quantised (uint8 + min + step)."""
    B, d = 5, 6
    x = torch.randn(B, d, generator=torch.Generator().manual_seed(1))
    grads, saved = {}, {}
    for bits in ({}, {1: 8}):
        net = _net(d)
        for p in net[0].parameters():
            p.requires_grad_(False)
        meter = SavedTensorBytes(storage_ptrs(list(net.parameters())))
        block1 = SavedTensorBytes(storage_ptrs(list(net.parameters())))
        with quantised_blocks(dict(enumerate(net)), bits, list(net.parameters())):
            with meter.track():
                h = net[0](x)
                with block1.track():  # the second block alone
                    out = net[1](h)
            out.square().sum().backward()
        saved[bool(bits)] = block1.bytes
        grads[bool(bits)] = net[1].fc.weight.grad
    assert saved[False] == 2 * (B * d * 4)
    assert saved[True] == 2 * (B * d * 1 + 4 + 4)
    torch.testing.assert_close(grads[True], grads[False], rtol=0.05, atol=0.05)
    assert not torch.equal(grads[True], grads[False])  # the backward read the quantised activations


class _Memory(MemoryAPI):
    """The spec's memory model as the accountant: 100 (D - Q / 2) activation bytes."""

    def step_bytes(self, method, plan, trainable):
        q = len(method.quantised_activations(plan))
        return {"params": 0, "grads": 0, "optimizer": 0, "activations": int(100 * (plan.extra[DEPTH] - q / 2))}


def _fedquad(am, profiles, **cfg):
    ctx = dataclasses.replace(method_context(am, profiles, 3), memory=_Memory())
    return FedQuad(FedQuadConfig(**cfg), ctx)


def test_plans_reach_deeper_by_quantising(tiny_am):
    """L = 3 (blocks 0..2), tiers of 1 and 3 layers, equal data: the 1-layer tier's budget is 100;
    D = 2 fits with Q = 2 (100 (2 - 1) = 100), D = 3 does not (100 (3 - 3 / 2) = 150). Times 10 (1 + 2 2/3)
    and 10 (1 + 2): within 1.2 x the median, so no greedy move."""
    am = tiny_am()
    m = _fedquad(am, {0: ClientProfile(0, 0, 1, 4, 10), 1: ClientProfile(1, 2, 3, 4, 10)})
    plans = m.plan(1, list(m.ctx.profiles.values()), None, np.random.default_rng(0))
    assert (plans[0].train_layers, plans[0].extra[QUANT]) == ((1, 2), [1, 2])
    assert (plans[1].train_layers, plans[1].extra[QUANT]) == ((0, 1, 2), [])
    assert m.quantised_activations(plans[0]) == {1: 8, 2: 8}
    no_q = _fedquad(am, dict(m.ctx.profiles), quantise=False).plan(1, list(m.ctx.profiles.values()), None,
                                                                  np.random.default_rng(0))
    assert (no_q[0].train_layers, no_q[0].extra[QUANT]) == ((2,), [])


def test_traffic_on_the_twin_is_the_spec_formula():
    """Up 24,576 D_k (q + v per layer at r = 8, d = 768), down 294,912; on the width-48 twin one
    layer's q and v are 2 * 8 * (48 + 48) = 1536 scalars."""
    assert 2 * 8 * (768 + 768) == 24_576 and 12 * 24_576 == 294_912
    am = AdapterModel(twin(), 8, 16.0, 0.0, "qv")
    m = _fedquad(am, {0: ClientProfile(0, 0, 6, 8, 10)})
    state = m.init_state(am.read(am.all_keys))
    plan = m.config_plan(0, 0, 6, 0)
    pay = m.client_payload(state, plan)
    up = {k: pay[k] for k in m.upload_keys(plan)}
    head = sum(state.tensors[k].numel() for k in m.ctx.head_keys) * 4
    t = m.traffic(plan, pay, up)
    assert ((t.up_bytes - head) // 4, (t.down_bytes - head) // 4) == (6 * 1536, 12 * 1536)


def test_config_checks():
    with pytest.raises(Exception, match="must be 8"):
        FedQuadConfig(bits=4)


def test_its_step_is_its_own():
    """The packed executor does not quantise: FedQuad's clients train one by one."""
    assert FedQuad.step_overrides() == ["quantised_activations"] and not FedQuad.plain_step()
