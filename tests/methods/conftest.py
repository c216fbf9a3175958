"""Fixtures for method tests: a tiny peft model (blocks of one Linear + a head) and a
MethodContext built from it, small enough for exact hand-checked arithmetic."""

import pytest
import torch
from torch import nn

from fedbench.methods.base import ClientProfile
from fedbench.runners.executors.adapters import AdapterModel, method_context
from fedbench.tasks.base import ModelBundle


class _Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):  # (B, d)
        return x + self.fc(x)


class _Net(nn.Module):
    def __init__(self, d: int, n_blocks: int, n_classes: int):
        super().__init__()
        self.blocks = nn.Sequential(*[_Block(d) for _ in range(n_blocks)])
        self.head = nn.Linear(d, n_classes)

    def forward(self, x):  # (B, d) -> (B, C)
        return self.head(self.blocks(x))


@pytest.fixture
def tiny_am():
    """tiny_am(r=4, alpha=8.0, d=4, n_blocks=3, n_classes=3) -> AdapterModel with LoRA on blocks.j.fc."""

    def make(r=4, alpha=8.0, d=4, n_blocks=3, n_classes=3):
        torch.manual_seed(0)
        bundle = ModelBundle(_Net(d, n_blocks, n_classes), "blocks", {"fc": ["fc"]}, ["head"], default_target="fc")
        return AdapterModel(bundle, r, alpha, 0.0, "default")

    return make


@pytest.fixture
def ctx_for():
    """ctx_for(am, budgets=[(tier, layers, rank), ...]) -> MethodContext (client i has budgets[i])."""

    def make(am, budgets, rounds=3):
        profiles = {i: ClientProfile(i, t, layers, rank, 10) for i, (t, layers, rank) in enumerate(budgets)}
        return method_context(am, profiles, rounds)

    return make


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
