"""FlexLoRA and FLoRA's opt-in departures (``server_rule='authors_code'``, ``train_head=false``):
the papers' rules stay the default; each departure against the paper's rule on hand-built
tensors, expected values written as arithmetic (the methods' docstrings say where each comes from)."""

import pytest
import torch

from fedbench.config import FieldError
from fedbench.methods.aggregation import factor_means
from fedbench.methods.base import ClientUpdate
from fedbench.methods.flexlora import FlexLoRA
from fedbench.methods.flora import FLoRA
from fedbench.methods.rank_hetero import AuthorsRuleConfig

from helpers import method_setup

M = "blocks.0.fc"
A0, B0, W0 = M + ".lora_A.weight", M + ".lora_B.weight", M + ".base_layer.weight"
ALPHA = 8.0
E = torch.eye(4)


def _setup(cls, ranks, **cfg):
    """(method, state with the base weights, round-1 plans) on the shared tiny model (r = 4)."""
    s = method_setup(cls, [(t, 3, r) for t, r in enumerate(ranks)], AuthorsRuleConfig(lora_r=4, lora_alpha=ALPHA, **cfg),
                     base=True, alpha=ALPHA)
    return s.m, s.state, s.plans


def _upload(m, state, plan, a, b, n=1, head_shift=0.0):
    """Client ``plan.client`` uploads factors (a, b) on module M (zeros elsewhere) and its head + head_shift."""
    t = {k: state.tensors[k] + head_shift for k in m.ctx.head_keys}
    for mod in m.modules:
        t[mod + ".lora_A.weight"] = a if mod == M else torch.zeros_like(a)
        t[mod + ".lora_B.weight"] = b if mod == M else torch.zeros_like(b)
    return ClientUpdate(plan.client, t, n, plan)


def test_defaults_are_the_papers_rules():
    cfg = AuthorsRuleConfig()
    assert cfg.server_rule == "paper" and cfg.train_head is True
    with pytest.raises(FieldError):
        AuthorsRuleConfig(server_rule="stack")


def test_factor_means_are_not_the_mean_of_products():
    # two rank-1 clients, p = (1/2, 1/2), B carried at scale c = 2, padded to rank 2:
    # A_bar = [[0.5, 0.5], [0, 0]], B_bar = 2 * 0.5 * [[1, 0], [1, 0]] = [[1, 0], [1, 0]]
    a, b = factor_means([(E[:1, :2], E[:2, :1]), (E[1:2, :2], E[:2, 1:2])], [0.5, 0.5], [2.0, 2.0], 2)
    assert torch.equal(a, torch.tensor([[0.5, 0.5], [0.0, 0.0]]))
    assert torch.equal(b, torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    assert torch.equal(b @ a, torch.full((2, 2), 0.5))  # the mean of the products would be 0.5 * 2 * I = I


def test_flexlora_authors_rule_on_hand_built_factors():
    """Two rank-1 clients of equal size, client 0: B A = e1 e1^T, client 1: e2 e2^T; alpha 8, r_max 4.
    Paper: dW = 1/2 (8/1) e1 e1^T + 1/2 (8/1) e2 e2^T = diag(4, 4, 0, 0).
    Authors' code: A_bar = 1/2 (e1 + e2)^T, B_bar = 1/2 ((8/1)/(8/4)) (e1 + e2) = 2 (e1 + e2),
    dW = (8/4) B_bar A_bar = 2 (e1 + e2)(e1 + e2)^T: 2 on the top-left 2 x 2 block, 0 elsewhere."""
    paper = torch.diag(torch.tensor([4.0, 4.0, 0.0, 0.0]))
    authors = torch.zeros(4, 4)
    authors[:2, :2] = 2.0
    for rule, expected in (("paper", paper), ("authors_code", authors)):
        m, state, plans = _setup(FlexLoRA, [1, 1], server_rule=rule)
        ups = [_upload(m, state, plans[0], E[:1], E[:, :1]), _upload(m, state, plans[1], E[1:2], E[:, 1:2])]
        new = m.aggregate(state, ups)
        assert torch.allclose(new.tensors[M + ".flexlora_delta"], expected, atol=1e-6), rule


def test_flexlora_authors_rule_is_exact_for_one_client():
    """One rank-2 client: no cross terms, so both rules give its own (8/2) B A = 4 B A."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 4, generator=g), torch.randn(4, 2, generator=g)
    got = []
    for rule in ("paper", "authors_code"):
        m, state, plans = _setup(FlexLoRA, [2], server_rule=rule)
        got.append(m.aggregate(state, [_upload(m, state, plans[0], a, b)]).tensors[M + ".flexlora_delta"])
    assert torch.allclose(got[0], 4 * b @ a, atol=1e-5) and torch.allclose(got[1], 4 * b @ a, atol=1e-5)


def test_flora_authors_scaling_on_hand_built_factors():
    """One rank-2 client, B A = diag(1, 1, 0, 0), alpha 8, lora_r 4: the paper merges at the client's
    own 8/2 = 4, the authors' code at the stack's alpha / r = 8/4 = 2."""
    a, b = E[:2], E[:, :2]
    for rule, scale in (("paper", 4.0), ("authors_code", 2.0)):
        m, state, plans = _setup(FLoRA, [2], server_rule=rule)
        new = m.aggregate(state, [_upload(m, state, plans[0], a, b)])
        assert torch.allclose(new.tensors[W0] - state.tensors[W0], scale * torch.diag(torch.tensor([1.0, 1, 0, 0])),
                              atol=1e-6), rule


@pytest.mark.parametrize("cls", [FlexLoRA, FLoRA])
def test_frozen_head_is_neither_trained_nor_averaged(cls):
    m, state, plans = _setup(cls, [1, 4], train_head=False)
    assert all(not p.train_head for p in plans.values())
    assert not set(m.ctx.head_keys) & set(m.upload_keys(plans[0]))
    ups = [_upload(m, state, plans[c], torch.ones(r, 4), torch.ones(4, r)) for c, r in ((0, 1), (1, 4))]
    ups = [ClientUpdate(u.client, {k: v for k, v in u.tensors.items() if k not in m.ctx.head_keys}, 1, u.plan)
           for u in ups]
    new = m.aggregate(state, ups)
    assert all(torch.equal(new.tensors[k], state.tensors[k]) for k in m.ctx.head_keys)
    # default: the head is trained and averaged: (1 * 1.0 + 1 * 3.0) / 2 = 2.0 above the old head
    m, state, plans = _setup(cls, [1, 4])
    assert all(p.train_head for p in plans.values())
    new = m.aggregate(state, [_upload(m, state, plans[0], torch.ones(1, 4), torch.ones(4, 1), head_shift=1.0),
                              _upload(m, state, plans[1], torch.ones(4, 4), torch.ones(4, 4), head_shift=3.0)])
    assert all(torch.allclose(new.tensors[k], state.tensors[k] + 2.0) for k in m.ctx.head_keys)


@pytest.mark.parametrize("preset,methods,shared", [
    ("flexlora_flora_authors_cpu.yaml", ("flexlora", "flora"), 36),  # the {} arm, seeds 0-2
    ("fed_hello_frozen_head_cpu.yaml", ("fed_hello",), 18),
    ("straggler_gap_minilm_cpu.yaml", ("fed_hello", "straggler"), 12),  # the 50-round arm
    ("straggler_gap_budgets_cpu.yaml", ("fed_hello", "straggler"), 12),  # the paper's tier budgets
])
def test_measuring_presets_reuse_the_claims_runs(preset, methods, shared, tmp_path):
    """Every arm builds a valid run; the arm at the papers' rules (or 50 rounds) is the claims
    preset's runs by run id, so the sweep skips what fed_hello_claims_cpu.yaml has done (with or
    without ``../shared``: :func:`smoke.preset_here`)."""
    from pathlib import Path

    from smoke import preset_here

    from fedbench.runners.core.spec import build_spec
    from fedbench.runners.core.sweep import expand_sweep, load_preset

    bench = Path(__file__).resolve().parents[2] / "benchmarks"

    def ids(name):
        return {build_spec(r["method"], r["task"], r["run"], r["method_config"], r["task_config"]).run_id
                for r in expand_sweep(load_preset(preset_here(bench / name, tmp_path))) if r["method"] in methods}

    assert len(ids(preset) & ids("fed_hello_claims_cpu.yaml")) == shared
