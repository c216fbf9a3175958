"""RAVAN (methods/ravan.py): the hand checks of shared/docs/methods-2027.md Sec. 5 on the pure
server rule, the patched model (frozen seeded bases, cores between them, dW = 0 at the
start), head subsets held by the step, and the traffic on the BERT-shaped twin.

Tried against the rule (2026-11-29): averaging every client into every head, zero-filled
(not only over its trainers), fails ``test_head_averaged_over_its_trainers_only`` (head 0 =
0.5 * 2 + 0.5 * 0 = 1, not 2); the core product transposed in :func:`apply_cores` fails
``test_apply_cores_is_the_sum_of_the_heads``."""

import dataclasses

import numpy as np
import pytest
import torch
from fedbench.methods.base import ClientPlan, ClientProfile, ClientUpdate
from fedbench.methods.ravan import (
    HEADS,
    PRODUCT,
    Ravan,
    RavanConfig,
    apply_cores,
    core_name,
    ravan_merge,
)
from fedbench.runners.executors.adapters import AdapterModel, method_context
from fedbench.runners.executors.step import KeptEntries
from traffic_twin import L, twin


def test_spec_hand_check_uploads_averaged_exactly():
    """h = 2, r = 1, d = 2, B_1 = A_1^T = e1, B_2 = A_2^T = e2; uploads (2, 0) and (4, 6),
    p = (0.5, 0.5) -> P = (3, 3), dW = diag(3, 3) = 0.5 diag(2, 0) + 0.5 diag(4, 6)."""
    up1, up2 = torch.tensor([2.0, 0.0]).view(2, 1, 1), torch.tensor([4.0, 6.0]).view(2, 1, 1)
    p = ravan_merge(torch.zeros(2, 1, 1), [up1, up2], [[0, 1], [0, 1]], [0.5, 0.5])
    assert p.flatten().tolist() == [0.5 * 2 + 0.5 * 4, 0.5 * 0 + 0.5 * 6]  # (3, 3)
    e = torch.eye(2)
    a, b = e, e  # stacked A (rows A_1 = e1^T, A_2 = e2^T), stacked B (columns e1, e2)
    dense = lambda prod: b @ torch.block_diag(*prod) @ a
    assert torch.equal(dense(p), torch.diag(torch.tensor([3.0, 3.0])))
    assert torch.equal(dense(p), 0.5 * torch.diag(torch.tensor([2.0, 0.0])) + 0.5 * torch.diag(torch.tensor([4.0, 6.0])))


def test_head_averaged_over_its_trainers_only():
    """Client 1 trains heads {0, 1} with P = (2, 4), client 2 only head 1 with P = 8, equal
    weights: head 0 = 2 (its one trainer), head 1 = (0.5 * 4 + 0.5 * 8) / (0.5 + 0.5) = 6; a head
    nobody trains keeps its product (head 2 = 7)."""
    current = torch.tensor([0.0, 0.0, 7.0]).view(3, 1, 1)
    out = ravan_merge(current, [torch.tensor([2.0, 4.0]).view(2, 1, 1), torch.tensor([8.0]).view(1, 1, 1)],
                      [[0, 1], [1]], [0.5, 0.5])
    assert out.flatten().tolist() == [2.0, (0.5 * 4 + 0.5 * 8) / (0.5 + 0.5), 7.0]


def test_apply_cores_is_the_sum_of_the_heads():
    g = torch.Generator().manual_seed(1)
    h, r, d_in, d_out = 3, 2, 7, 5
    a, b = torch.randn(h * r, d_in, generator=g), torch.randn(d_out, h * r, generator=g)
    prod, x = torch.randn(h, r, r, generator=g), torch.randn(4, d_in, generator=g)
    got = apply_cores(x @ a.T, prod) @ b.T
    want = sum(x @ (b[:, i * r:(i + 1) * r] @ prod[i] @ a[i * r:(i + 1) * r]).T for i in range(h))
    torch.testing.assert_close(got, want)


def _method(tiny_am, ctx_for, heads=2, r=4, budgets=None):
    am = tiny_am(r=r, alpha=float(r), d=6)
    cfg = RavanConfig(lora_r=r, lora_alpha=float(r), heads=heads)
    ctx = ctx_for(am, budgets or [(0, 3, r), (1, 3, r)])
    am.attach_extra(Ravan.extra_modules(cfg, ctx, am.model.head))
    Ravan.patch_model(cfg, am.model)
    return am, Ravan(cfg, dataclasses.replace(ctx, extra_keys=list(am.extra_keys)))


def test_patched_model_has_seeded_orthonormal_bases_and_starts_at_the_base_model(tiny_am, ctx_for):
    am, m = _method(tiny_am, ctx_for)
    am2, _ = _method(tiny_am, ctx_for)
    for mod in m.modules:
        a, b = am.param(mod + ".lora_A.weight"), am.param(mod + ".lora_B.weight")
        torch.testing.assert_close(a @ a.T, torch.eye(4))  # orthonormal rows: disjoint head subspaces
        torch.testing.assert_close(b.T @ b, torch.eye(4))
        assert torch.equal(a, am2.param(mod + ".lora_A.weight"))  # every client rebuilds the same bases
    x = torch.randn(3, 6)
    with torch.no_grad():
        before = am.model(x)
        base = am.model.head(_base_forward(am, x))
        torch.testing.assert_close(before, base)  # H = 0: dW = 0
        core = am.model.get_submodule("fedbench_extra.ravan")[core_name(m.modules[0])]
        core.H.fill_(0.3)
        after = am.model(x)
        assert not torch.allclose(after, before)  # the cores are in the forward
        Ravan.patch_model(m.config, am.model)  # patched again: still one core per matrix
        torch.testing.assert_close(am.model(x), after)


def _base_forward(am, x):
    for blk in am.model.blocks:
        x = x + blk.fc.base_layer(x)
    return x


def test_state_payload_and_plans(tiny_am, ctx_for):
    am, m = _method(tiny_am, ctx_for, heads=2, budgets=[(0, 1, 4), (2, 3, 4)])
    state = m.init_state(am.read(am.all_keys))
    assert not any("lora_" in k for k in state.tensors)  # the bases are the model's, never sent
    plans = m.plan(1, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    assert [len(h) for h in plans[0].extra[HEADS]] == [1] * 3  # ceil(2 * 1 / 3) = 1 head
    assert plans[1].extra[HEADS] == [[0, 1]] * 3
    # largest |s| ||H|| first once the cores differ
    state.tensors[m.core_key(0, "H")][1] = 5.0
    assert m.plan(2, [m.ctx.profiles[0]], state, np.random.default_rng(0))[0].extra[HEADS][0] == [1]


def test_untrained_heads_are_held_by_the_step(tiny_am, ctx_for):
    am, m = _method(tiny_am, ctx_for, heads=2, budgets=[(0, 1, 4)])
    plan = ClientPlan(0, 0, (0, 1, 2), extra={HEADS: [[1], [0], [1]]})
    (phase,) = m.local_phases(plan)
    params = dict(zip(phase.trainable, am.set_trainable(phase.trainable)))
    kept = KeptEntries(phase, params)
    h = params[m.core_key(0, "H")]
    before = h.detach().clone()
    with torch.no_grad():
        h.add_(1.0)
    kept.restore()
    assert torch.equal(h[0], before[0]) and torch.equal(h[1], before[1] + 1)


def test_server_round_is_the_exact_mean_of_the_clients_updates(tiny_am, ctx_for):
    am, m = _method(tiny_am, ctx_for, heads=2)
    state = m.init_state(am.read(am.all_keys))
    plans = m.plan(1, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    g = torch.Generator().manual_seed(3)
    ups = []
    for c, n in ((0, 10), (1, 30)):
        t = {k: state.tensors[k] + 1.0 * c for k in m.ctx.head_keys}
        for i in range(len(m.modules)):
            t[m.core_key(i, "H")[:-2] + PRODUCT] = torch.randn(2, 2, 2, generator=g)
        ups.append(ClientUpdate(c, t, n, plans[c]))
    new = m.aggregate(state, ups)
    for i, mod in enumerate(m.modules):
        a, b = am.param(mod + ".lora_A.weight").detach(), am.param(mod + ".lora_B.weight").detach()
        def dw(p, a=a, b=b):
            return b @ torch.block_diag(*p) @ a
        key = m.core_key(i, "H")[:-2] + PRODUCT
        want = 0.25 * dw(ups[0].tensors[key]) + 0.75 * dw(ups[1].tensors[key])  # n = 10, 30
        got = dw(new.tensors[m.core_key(i, "s")][:, None, None] * new.tensors[m.core_key(i, "H")])
        torch.testing.assert_close(got, want)
        assert new.tensors[m.core_key(i, "s")].tolist() == [1.0, 1.0]
    torch.testing.assert_close(new.tensors[m.ctx.head_keys[0]], state.tensors[m.ctx.head_keys[0]] + 0.75)


def test_traffic_on_the_twin_is_the_spec_formula():
    """Up and down h r^2 per matrix (+ the head): h = 4, r = 2 over the twin's 24 q/v matrices;
    the spec's BERT-base figure, h = 4, r = 55: 24 * 4 * 55^2 = 290,400 each way."""
    assert L * 4 * 55 ** 2 == 290_400
    am = AdapterModel(twin(), 8, 8.0, 0.0, "qv")
    cfg = RavanConfig(lora_r=8, lora_alpha=8.0, heads=4)
    profiles = {0: ClientProfile(0, 0, 6, 8, 10), 1: ClientProfile(1, 2, 12, 8, 10)}
    ctx = method_context(am, profiles, 2)
    am.attach_extra(Ravan.extra_modules(cfg, ctx, am.model.get_submodule("classifier")))
    Ravan.patch_model(cfg, am.model)
    m = Ravan(cfg, dataclasses.replace(ctx, extra_keys=list(am.extra_keys)))
    state = m.init_state(am.read(am.all_keys))
    plans = m.plan(1, list(profiles.values()), state, np.random.default_rng(0))
    head = sum(state.tensors[k].numel() for k in m.ctx.head_keys) * 4
    for c, n_heads in ((0, 2), (1, 4)):  # 6 of 12 layers: ceil(4 / 2) = 2 heads
        pay = m.client_payload(state, plans[c])
        up = {k: state.tensors[k] for k in m.ctx.head_keys} | {
            m.core_key(i, "H")[:-2] + PRODUCT: torch.zeros(n_heads, 2, 2) for i in range(len(m.modules))}
        t = m.traffic(plans[c], pay, up)
        assert (t.down_bytes - head) // 4 == L * 4 * 2 ** 2
        assert (t.up_bytes - head) // 4 == L * n_heads * 2 ** 2
        assert list(t.down_variants.values()) == [t.down_bytes + L * 4 * 4]  # + s, h per matrix


def test_config_refuses_a_rank_not_split_into_heads():
    with pytest.raises(Exception, match="multiple of heads"):
        RavanConfig(lora_r=6, heads=4)


def test_plans_on_meta_tensors_draw_heads_at_random(tiny_am, ctx_for):
    """``fedbench plan`` plans on ``meta`` tensors (no values): ties everywhere, heads at random."""
    am, m = _method(tiny_am, ctx_for, heads=2, budgets=[(0, 1, 4)])
    state = m.init_state({k: v.to("meta") for k, v in am.read(am.all_keys).items()})
    plan = m.plan(1, [m.ctx.profiles[0]], state, np.random.default_rng(0))[0]
    assert [len(h) for h in plan.extra[HEADS]] == [1, 1, 1]


def test_its_step_is_its_own():
    """The packed executor's forward runs neither the core hooks nor the products: sequential."""
    assert Ravan.step_overrides() == ["client_statistics", "patch_model"] and not Ravan.plain_step()
