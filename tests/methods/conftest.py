"""Fixtures for method tests: a tiny peft model (blocks of one Linear + a head) and a
MethodContext built from it, small enough for exact hand-checked arithmetic."""

import pytest
import torch
from torch import nn

from fedbench.methods.base import ClientProfile, MethodContext
from fedbench.runners.executors.adapters import AdapterModel
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
        return MethodContext(n_layers=len(am.layer_keys), layer_keys=am.layer_keys, head_keys=am.head_keys,
                             profiles=profiles, lora_r=am.r, lora_alpha=am.alpha, rounds=rounds,
                             block_bytes=am.block_bytes, extra_keys=list(am.extra_keys))

    return make
