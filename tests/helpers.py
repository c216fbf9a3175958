"""Helpers the tests share (one module; ``tests`` is on the path): the tiny peft model and
the method set-up of the method tests, a run that must succeed, a one-line task error."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import pytest
import torch
from torch import nn

from fedbench.errors import UserError
from fedbench.methods.base import ClientPlan, ClientProfile, Method, MethodConfig, MethodContext, MethodState
from fedbench.runners.executors.adapters import AdapterModel, method_context
from fedbench.tasks.base import ModelBundle


# ------------------------------------------------------------------ the method tests' tiny model
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


def tiny_adapter_model(r: int = 4, alpha: float = 8.0, d: int = 4, n_blocks: int = 3,
                       n_classes: int = 3) -> AdapterModel:
    """An AdapterModel of ``n_blocks`` blocks of one Linear (d, d) + a head (C, d), LoRA on
    ``blocks.j.fc``, drawn from seed 0: small enough for exact hand-checked arithmetic."""
    torch.manual_seed(0)
    bundle = ModelBundle(_Net(d, n_blocks, n_classes), "blocks", {"fc": ["fc"]}, ["head"], default_target="fc")
    return AdapterModel(bundle, r, alpha, 0.0, "default")


def context_for(am: AdapterModel, budgets: Sequence[tuple[int, int, int]], rounds: int = 3) -> MethodContext:
    """The MethodContext of ``am`` with client i's budget ``budgets[i]`` = (tier, layers, rank)."""
    profiles = {i: ClientProfile(i, t, layers, rank, 10) for i, (t, layers, rank) in enumerate(budgets)}
    return method_context(am, profiles, rounds)


class Setup(NamedTuple):
    am: AdapterModel
    m: Method
    state: MethodState
    plans: dict[int, ClientPlan] | None


def method_setup(cls: type[Method], budgets: Sequence[tuple[int, int, int]], cfg: MethodConfig | None = None, *,
                 rounds: int = 3, extras: bool = False, base: bool = False,
                 state: Callable[[Method, dict[str, torch.Tensor]], MethodState] | None = None,
                 before_plan: Callable[[Method, MethodState], None] | None = None, plan_round: int | None = 1,
                 **model: Any) -> Setup:
    """Method ``cls`` (config ``cfg``; default: the model's LoRA rank and alpha) on
    :func:`tiny_adapter_model` (``model``: its sizes) with client budgets ``budgets``:
    its extra modules attached (``extras``), its state from the model's tensors (+ the base
    weights it needs, ``base``) through ``init_state`` (or ``state(m, tensors)``), changed by
    ``before_plan(m, state)``, and the plans of round ``plan_round`` (None: no plans)."""
    am = tiny_adapter_model(**model)
    ctx = context_for(am, budgets, rounds)
    cfg = cls.config_cls(lora_r=am.r, lora_alpha=am.alpha) if cfg is None else cfg
    if extras:
        ctx.extra_keys = am.attach_extra(cls.extra_modules(cfg, ctx, am.model.head))
    m = cls(cfg, ctx)
    tensors = am.read(am.all_keys + (m.base_weights_needed() if base else []))
    st = m.init_state(tensors) if state is None else state(m, tensors)
    if before_plan is not None:
        before_plan(m, st)
    plans = None
    if plan_round is not None:
        plans = m.plan(plan_round, list(ctx.profiles.values()), st, np.random.default_rng(0))
    return Setup(am, m, st, plans)


def plain_state(m: Method, tensors: dict[str, torch.Tensor]) -> MethodState:
    """The model's tensors as they are (no ``init_state``)."""
    return MethodState(tensors)


# ------------------------------------------------------------------------------ runs
def run_ok(method: str, task: str, run: dict, **kw: Any):
    """``Experiment(method, task, run, **kw).run()``, which must succeed: (record, path, experiment)."""
    from fedbench.runners.core.experiment import Experiment

    exp = Experiment(method, task, run, **kw)
    rec, path = exp.run()
    assert rec["status"] == "ok", rec["error"]
    return rec, path, exp


def load_error(task: Any) -> str:
    """The error ``task.load()`` refuses with: a UserError of one line."""
    with pytest.raises(UserError) as e:
        task.load()
    assert "\n" not in str(e.value)
    return str(e.value)
