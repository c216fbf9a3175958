"""Fixtures for method tests: a tiny peft model (blocks of one Linear + a head) and a
MethodContext built from it, small enough for exact hand-checked arithmetic (both from
:mod:`helpers`, which the tests' ``method_setup`` builds on)."""

import pytest
import torch

from helpers import context_for, tiny_adapter_model


@pytest.fixture
def tiny_am():
    """tiny_am(r=4, alpha=8.0, d=4, n_blocks=3, n_classes=3) -> AdapterModel with LoRA on blocks.j.fc."""
    return tiny_adapter_model


@pytest.fixture
def ctx_for():
    """ctx_for(am, budgets=[(tier, layers, rank), ...]) -> MethodContext (client i has budgets[i])."""
    return context_for


@pytest.fixture
def rank_updates():
    """rank_updates(m, state, plans, sizes, seed=5) -> [ClientUpdate]: client c (of ``sizes[c]``
    examples) uploads random, non-symmetric factors at its plan's rank for every LoRA module of
    ``m.modules`` (A (r_c, d_in), B (d_out, r_c)) and its head unchanged."""
    from fedbench.methods.base import ClientUpdate

    def make(m, state, plans, sizes, seed=5):
        g = torch.Generator().manual_seed(seed)
        ups = []
        for c, n in enumerate(sizes):
            r = plans[c].rank
            t = {k: state.tensors[k].clone() for k in m.ctx.head_keys}
            for mod in m.modules:
                d_out = state.tensors[mod + ".lora_B.weight"].shape[0]
                d_in = state.tensors[mod + ".lora_A.weight"].shape[1]
                t[mod + ".lora_A.weight"] = torch.randn(r, d_in, generator=g)
                t[mod + ".lora_B.weight"] = torch.randn(d_out, r, generator=g)
            ups.append(ClientUpdate(c, t, n, plans[c]))
        return ups

    return make
